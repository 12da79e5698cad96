"""The problems' checker programs in the code judge (``judging.code``): the tests that ran to the end are
read by their problem's checker (``sandbox.testlib``), and a checker that crashed on one candidate's output is
run again on the jury's answer to say whose failure that was."""

from __future__ import annotations

import logging

from bonforge.judging.spec import TestSpec
from bonforge.sandbox.testlib import CRASHED, PROBLEM_ERROR, UNFINISHED_BUILD, Checkers
from bonforge.sandbox.wire import Status

log = logging.getLogger("bonforge.sandbox")


def run_checkers(specs: list[TestSpec], kept: list[dict], checkers: Checkers) -> None:
    """Judge, with their problem's checker program, the tests that ran to the end (status ``ok``) of every
    request whose problem has one: each checker compiled once (``Checkers.compile``), then one checker
    request per candidate. A test whose checker failed is the problem's error (``PROBLEM_ERROR``)."""
    todo = [i for i, s in enumerate(specs) if s.checker is not None and kept[i].get("results")]
    by_spec: dict[int, dict] = {}  # a problem's spec is one object shared by its requests
    for i in todo:
        by_spec.setdefault(id(specs[i]), specs[i].checker)
    binaries = dict(zip(by_spec, checkers.compile(list(by_spec.values())), strict=True))
    jobs, where = [], []
    for i in todo:
        binary = binaries[id(specs[i])]
        waiting = [k for k, r in enumerate(kept[i]["results"]) if r["status"] == "ok"]
        if binary.startswith(("!", UNFINISHED_BUILD)):  # it does not build: the problem's; or the machine's
            status = PROBLEM_ERROR if binary.startswith("!") else Status.UNFINISHED
            for k in waiting:
                kept[i]["results"][k].update(status=status, error=binary[1:])
                kept[i]["results"][k].pop("stdout", None)
            continue
        if waiting:
            items = [(specs[i].inputs[k], kept[i]["results"][k].pop("stdout"), specs[i].outputs[k]) for k in waiting]
            jobs.append((binary, items))
            where.append((i, waiting))
    for (i, waiting), readings in zip(where, checkers.check(jobs), strict=True):
        for k, (status, note) in zip(waiting, readings, strict=True):
            kept[i]["results"][k].update(status=status, error=note)
    _blame_crashes(specs, kept, binaries, checkers)


def _blame_crashes(specs: list[TestSpec], kept: list[dict], binaries: dict[int, str], checkers: Checkers) -> None:
    """A checker that crashed on a candidate's output (``CRASHED``: not testlib's FAIL) is run once more per
    such test with the jury's answer as the output. Accepted: the candidate's output made it crash, and the
    test is that candidate's ``wrong_answer`` (an RL policy must not earn the problem's error, a verdict that
    is never reused and that says "nothing is known", by finding outputs that crash a buggy checker). Not
    accepted: the checker is broken whatever it reads, the problem's error."""
    crashed = [(i, k) for i, req in enumerate(kept) for k, r in enumerate(req.get("results") or ())
               if r["status"] == CRASHED]  # fmt: skip
    controls: dict[tuple[int, int], int] = {}  # (spec, test) -> its control's place among the jobs
    for i, k in crashed:
        controls.setdefault((id(specs[i]), k), len(controls))
    if not controls:
        return
    spec_of = {id(specs[i]): specs[i] for i, _ in crashed}
    jobs = [(binaries[sid], [(spec_of[sid].inputs[k], spec_of[sid].outputs[k], spec_of[sid].outputs[k])])
            for sid, k in controls]  # fmt: skip
    control = [readings[0] for readings in checkers.check(jobs)]
    for i, k in crashed:
        res = kept[i]["results"][k]
        status, note = control[controls[id(specs[i]), k]]
        if status == "passed":
            log.warning("a checker crashed on one candidate's output and accepts the jury's answer: %s", res["error"])
            res.update(status="wrong_answer", error="the checker crashed on this output (it accepts the jury's "
                       f"answer): {res['error']}")  # fmt: skip
        elif status == Status.UNFINISHED:  # the control could not tell: nothing known, the machine's
            res.update(status=status, error=f"{res['error']} (its control run did not finish: {note})")
        else:
            res.update(status=PROBLEM_ERROR, error=f"{res['error']} (on the jury's answer too: {note or status})")

