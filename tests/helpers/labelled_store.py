"""A small store of one run written by hand, for the viewer's problem page: a code problem whose statement is
prose (with Python words in it, one fenced code block and a ``<script>``), a maths problem, a pool teacher with
published labels (some planted to disagree with our verdicts, one beside a verdict that is no label) and a
sampled teacher. Every text the page shows carries HTML that would set ``window.__pwned`` if it ran."""

from __future__ import annotations

import pyarrow as pa

from bonforge import schema
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

RUN = "lab"
HOSTILE = '<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = \'img\'">'
STATEMENT = (f"Given n, return the sum if it is odd, else print 0 for each test. {HOSTILE}\n"
             "Example:\n```python\ndef solve(n):\n    return n if n % 2 else 0\n```\nNote: while true, class is 3.\n"
             "```text\na fence never closed stays prose: if for while return 1")
PROGRAM = "def solve(n):\n    if n % 2:\n        return n\n    return 0\n"
# (problem, teacher, sample, published label, our status); "model" was sampled: it has no label
ROWS = [("c1", "pool", 0, True, "passed"),           # agree: the control
        ("c1", "pool", 1, True, "wrong_answer"),     # planted: the label says correct, we do not
        ("c1", "pool", 2, True, "infra_error"),      # no label of ours: never a disagreement
        ("c1", "model", 0, None, "passed"),
        ("m1", "pool", 0, False, "correct"),         # planted: we say correct, the label does not
        ("m1", "pool", 1, False, "wrong_answer"),    # agree: the control
        ("m1", "model", 0, None, "wrong_answer")]
DISAGREE = {"c1/pool/1": "label_says_correct", "m1/pool/0": "we_say_correct"}


def _commit(store: StageStore, stage: str, rows: list[dict], table_schema: pa.Schema, teacher: str | None = None):
    store.write_shard(stage, stage, 0, pa.Table.from_pylist(rows, schema=table_schema))
    store.commit(stage, stage, 1, version="1", config={}, upstream={}, extra={"teacher": teacher} if teacher else {})
    return [stage]


def labelled_store(root) -> StageStore:
    store = StageStore(root)
    problems = [{"problem_id": "c1", "source": f"src{HOSTILE}", "domain": "code", "question": STATEMENT,
                 "answer": PROGRAM, "tests": None},
                {"problem_id": "m1", "source": "src", "domain": "math", "question": f"What is 2 + 2? {HOSTILE}",
                 "answer": "4"}]
    cands, verdicts = [], []
    for pid, teacher, i, label, status in ROWS:
        cid = f"{pid}/{teacher}/{i}"
        sampled = teacher == "model"
        text = PROGRAM if pid == "c1" else f"The answer is {4 if status == 'correct' else 5}. {HOSTILE}"
        cands.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "sample_index": i, "text": text,
                      "reference_correct": label, "finish_reason": "stop" if sampled else None,
                      "prompt_tokens": 30 if sampled else None, "completion_tokens": 12 if sampled else None})
        code = pid == "c1"
        verdicts.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher,
                         "extracted": None if code else f"4{HOSTILE}", "correct": status in ("passed", "correct"),
                         "reward": float(status in ("passed", "correct")), "status": status,
                         "tests_passed": 2 if status == "passed" else 0 if code else None,
                         "tests_total": 2 if code else None, "detail": None if status == "passed" else HOSTILE,
                         "latency_ms": 7.5})
    keys = {"problems": _commit(store, "problems", problems, schema.PROBLEMS),
            "candidates": _commit(store, "candidates", cands, schema.CANDIDATES),
            "verdicts": _commit(store, "verdicts", verdicts, schema.VERDICTS)}
    recipe = {"name": "lab", "teachers": [{"name": "pool", "engine": "pool"}, {"name": "model", "engine": "openai"}],
              "problems": {"include_reference": False}}
    store.record_run(RunRecord.from_json({"run_id": RUN, "recipe_name": "lab", "recipe": recipe,
                                          "status": "succeeded", "stages": keys, "cached": {}}))
    return store
