"""The Arrow schema of every stage table, in one place.

Every row carries its keys (``problem_id``, ``candidate_id``); no stage aligns tables by row order.
"""

from __future__ import annotations

from enum import Enum

import pyarrow as pa


class DropReason(str, Enum):
    """Why the filter dropped a problem: the closed set a ``problem_stats`` row's ``drop_reason`` holds (null:
    kept). The numbers behind it are the row's own ``n`` and ``pass_rate`` and the recipe's filter."""

    TOO_FEW_CANDIDATES = "too_few_candidates"
    TOO_HARD = "too_hard"
    TOO_EASY = "too_easy"
    WEAK_TESTS = "weak_tests"  # its tests catch too few of its known-wrong solutions (filter.min_suite_strength)

    @property
    def words(self) -> str:
        return self.value.replace("_", " ")


REFERENCE_TEACHER = "reference"  # the teacher name of the problems' own solutions (problems.include_reference)

PROBLEMS = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("source", pa.string()),  # dataset name, e.g. "gsm8k"
        pa.field("domain", pa.string()),  # "math" | "code"
        pa.field("question", pa.string()),
        pa.field("answer", pa.string()),  # gold answer (math) or reference solution (code), may be null
        pa.field("tests", pa.string()),  # code: JSON test spec (see bonforge.sandbox), math: null
        pa.field("metadata", pa.string()),  # JSON object of anything else the source carries
    ]
)

CANDIDATES = pa.schema(
    [
        pa.field("candidate_id", pa.string(), nullable=False),  # "<problem_id>/<teacher>/<sample_index>"
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("text", pa.string()),  # the final response (reasoning split off when present)
        pa.field("reasoning", pa.string()),  # <think>...</think> content of thinking models, else null
        pa.field("finish_reason", pa.string()),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("completion_tokens", pa.int32()),
        pa.field("seed", pa.int64()),
        pa.field("reference_correct", pa.bool_()),  # a published label from an imported pool, else null
        pa.field("text_digest", pa.binary(16)),  # 16 bytes of the text's SHA-256 (bonforge.identity), null: none
        pa.field("language", pa.string()),  # the program's language as its record names it (pool teachers,
        # reference solutions: cpp, java, python, pypy); null: the fence's tag, else the recipe's default
        pa.field("cost_usd", pa.float64()),  # what making the row cost (docs/cost.md); null: no price known
        pa.field("engine_s", pa.float64()),  # local engines: the row's share of the engine's wall time; times
        # the GPUs the engine held (the stage manifest's `cost.gpus`), its GPU-seconds
        pa.field("messages", pa.string()),  # a trajectory (bonforge.tables.trajectories) as JSON: the whole
        # conversation, tool calls and tool outputs included, ``text`` its final answer; null: a one-text answer
    ]
)

# Verdict classes. Math: correct | wrong_answer | no_answer | timeout | error.
# Code: passed | wrong_answer | runtime_error | compile_error | timeout | memory_limit | output_limit | sandbox_error
# | infra_error.
MATH_STATUSES = ("correct", "wrong_answer", "no_answer", "timeout", "error")
CODE_STATUSES = (
    "passed", "wrong_answer", "runtime_error", "compile_error", "timeout", "memory_limit", "output_limit",
    "sandbox_error", "infra_error",
)
# Code verdicts that are no label: nothing is known about the candidate. ``sandbox_error``: the sandbox or the
# problem (its check, its checker program) failed; ``infra_error``: the machine was too busy to finish a run
# (bonforge/sandbox/README.md, "Infrastructure outcomes"). Never reused, never in pass rates, rewards or exports.
NO_LABEL = ("sandbox_error", "infra_error")

VERDICTS = pa.schema(
    [
        pa.field("candidate_id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("extracted", pa.string()),  # math: the extracted answer; code: null
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),  # in [0, 1]
        pa.field("status", pa.string(), nullable=False),
        pa.field("tests_passed", pa.int32()),
        pa.field("tests_total", pa.int32()),
        pa.field("detail", pa.string()),  # truncated stderr / error text for debugging
        pa.field("latency_ms", pa.float64()),
    ]
)

# Open-ended problems: one score per (candidate, scorer) (bonforge.scoring), and the Best-of-N picks.
SCORES = pa.schema(
    [
        pa.field("candidate_id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("scorer", pa.string(), nullable=False),  # the recipe's name for it
        pa.field("kind", pa.string(), nullable=False),  # reference | language_id | reward_model
        pa.field("value", pa.float64()),  # null unless status is ok
        pa.field("label", pa.string()),  # language_id: the detected language
        pa.field("status", pa.string(), nullable=False),  # ok | no_reference | no_text | judge: parse_error,
        # truncated (its reply cut at max_tokens), skipped (a prompt over the engine's window)
        pa.field("n_tokens", pa.int32()),  # reward_model: tokens scored
        pa.field("truncated", pa.bool_()),  # reward_model: the conversation was cut (from the left)
        pa.field("detail", pa.string()),  # JSON: language_id's expected language and confidence
        pa.field("latency_ms", pa.float64()),  # the scorer's time per row in its batch
        pa.field("prompt_tokens", pa.int32()),  # judge and reward-model endpoint: the tokens it read
        pa.field("cost_usd", pa.float64()),  # what scoring the row cost (docs/cost.md); null: no price known
    ]
)

BON = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("pool", pa.string(), nullable=False),  # a teacher's name, or "*" for all teachers together
        pa.field("scorer", pa.string(), nullable=False),
        pa.field("n_candidates", pa.int32(), nullable=False),
        pa.field("n_eligible", pa.int32(), nullable=False),  # scored and kept by the filter
        pa.field("candidate_id", pa.string()),  # the pick; null when no candidate is eligible
        pa.field("value", pa.float64()),
        pa.field("runner_up", pa.float64()),  # the best value among the others
        pa.field("worst_candidate_id", pa.string()),  # the lowest eligible value (ties: the lowest candidate_id)
        pa.field("worst_value", pa.float64()),
        pa.field("tie", pa.bool_(), nullable=False),  # the pick shares its value (lowest candidate_id won)
        pa.field("filtered", pa.map_(pa.string(), pa.int64())),  # reason -> candidates left out
    ]
)

PAIRWISE = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("contender", pa.string(), nullable=False),  # "bon" | "teacher:<name>"
        pa.field("baseline", pa.string(), nullable=False),
        pa.field("game", pa.int32(), nullable=False),  # 0: the contender shown as B, 1: as A
        pa.field("contender_id", pa.string(), nullable=False),
        pa.field("baseline_id", pa.string(), nullable=False),
        pa.field("label", pa.string()),  # A>>B | A>B | A=B | B>A | B>>A, null unless status is ok
        pa.field("status", pa.string(), nullable=False),  # ok | truncated (cut at max_tokens) | no_label | no_reply
        pa.field("n_labels", pa.int32()),  # distinct labels in the reply
        pa.field("contender_score", pa.float64()),  # 1 | 0.5 | 0 for the contender, null without a label
        pa.field("prompt_tokens", pa.int32()),
        pa.field("completion_tokens", pa.int32()),
        pa.field("response", pa.string()),  # the judge's reply (its tail)
        pa.field("cost_usd", pa.float64()),  # what the judge's call cost (docs/cost.md); null: no price known
    ]
)

_KMAP = pa.map_(pa.int32(), pa.float64())
PROBLEM_STATS = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),  # a teacher name, or "*" for all teachers together
        pa.field("n", pa.int32(), nullable=False),
        pa.field("n_correct", pa.int32(), nullable=False),
        pa.field("pass_rate", pa.float64(), nullable=False),
        pa.field("mean_reward", pa.float64(), nullable=False),
        pa.field("pass_at_k", _KMAP),  # k -> unbiased pass@k, for k in 1, 2, 4, ... <= n
        pa.field("majority_at_k", _KMAP),  # k -> expected majority@k over extracted answers
        pa.field("max_at_k", _KMAP),  # k -> expected max reward of k samples
        pa.field("keep", pa.bool_(), nullable=False),  # passes the recipe filter (only meaningful on "*")
        pa.field("drop_reason", pa.string()),  # a DropReason value; null where kept
        pa.field("drop_detail", pa.string()),  # for people: the numbers against the filter's bound; null where kept
        # filter.early_stop: the problem was closed as too easy before all its samples were drawn (``n`` says
        # how many were), and how many samples a build without early stop draws (null: early stop off)
        pa.field("stopped_early", pa.bool_(), nullable=False),
        pa.field("n_planned", pa.int32()),
        # Test-suite strength: of the candidates labelled wrong (reference_correct false: a dataset's incorrect
        # solutions, a package's WA/RE/TLE ones) whose verdict says something about the tests (not
        # compile_error or sandbox_error), how many, and the share the tests rejected (null: none)
        pa.field("n_known_wrong", pa.int32()),
        pa.field("suite_strength", pa.float64()),
    ]
)

# filter.early_stop (``bonforge.stages.rounds``): one row per problem and teacher, the state of a round
ROUNDS = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("n", pa.int32(), nullable=False),  # the samples a build without early stop holds
        pa.field("drawn", pa.int32(), nullable=False),  # samples drawn and judged before this round
        pa.field("correct", pa.int32(), nullable=False),  # right among them
        pa.field("draws", pa.int32(), nullable=False),  # samples held after this round (drawn: none this round)
        pa.field("stopped_early", pa.bool_(), nullable=False),  # the problem is certain to be too easy
        pa.field("round", pa.int32(), nullable=False),
    ]
)

GENSELECT = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),  # "<problem_id>#<prompt_index>"
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("prompt_index", pa.int32(), nullable=False),
        pa.field("candidate_ids", pa.list_(pa.string()), nullable=False),  # in prompt order
        pa.field("n_candidates", pa.int32(), nullable=False),
        pa.field("correct_indices", pa.list_(pa.int32()), nullable=False),  # the label
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("token_counter", pa.string(), nullable=False),  # "tokenizer:<name>" or "estimate"
    ]
)

MAXK_WEIGHTS = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),  # the teacher the weights are on-policy for, or "*"
        pa.field("candidate_id", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("k", pa.int32(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("weight", pa.float64(), nullable=False),  # share of k-subsets where it is the max; sums to 1
        pa.field("gradient_weight", pa.float64(), nullable=False),  # its ∇log p coefficient for ∇ max@k
    ]
)

SELECTOR_EVAL = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("run", pa.int32(), nullable=False),  # 0..runs-1; run r samples with seed + r
        pa.field("seed", pa.int64()),  # null when skipped
        pa.field("n_candidates", pa.int32(), nullable=False),
        pa.field("correct_indices", pa.list_(pa.int32()), nullable=False),
        pa.field("answer_groups", pa.list_(pa.int32()), nullable=False),  # per candidate; -1 = no answer
        pa.field("skipped", pa.bool_(), nullable=False),  # unanimous prompt, selector not called
        pa.field("judgment", pa.int32()),  # the parsed index, null when unparsed or skipped
        pa.field("parsed", pa.bool_(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),  # unparsed counts as wrong
        pa.field("fallback_index", pa.int32(), nullable=False),  # judgment, else a seeded random pick
        pa.field("fallback_correct", pa.bool_(), nullable=False),
        pa.field("prompt_n_tokens", pa.int32(), nullable=False),  # the genselect count: the cost of a call
        pa.field("prompt_tokens", pa.int32()),  # as the engine reported them (null when skipped)
        pa.field("completion_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("response", pa.string()),  # the selector's final text (truncated)
        pa.field("cost_usd", pa.float64()),  # what the selector's call cost (docs/cost.md); a prompt not sent or
        # not answered costs nothing; null: no price known
    ]
)

CONTAMINATION = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),  # a loaded problem left out of `problems`
        pa.field("reason", pa.string(), nullable=False),  # "benchmark" | "duplicate" | "near_duplicate"
        pa.field("benchmark", pa.string()),  # the benchmark's name (reason "benchmark")
        pa.field("matched_id", pa.string(), nullable=False),  # the benchmark item's id, or the kept (near) duplicate's
        pa.field("overlap", pa.string()),  # the shared normalised words (null for duplicates)
    ]
)

# FusioN: one pool per problem (fusion_pools), the analysis of its fused answer (fusion).
FUSION_POOLS = pa.schema([
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("domain", pa.string()),
    pa.field("pool_seed", pa.int64(), nullable=False),
    pa.field("candidate_ids", pa.list_(pa.string()), nullable=False),  # in prompt (position) order
    pa.field("teachers", pa.list_(pa.string()), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),  # the rendered fusion prompt (what the fusor is asked)
])

FUSION = pa.schema([
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("fused_candidate_id", pa.string()),
    pa.field("fused_correct", pa.bool_(), nullable=False),
    pa.field("fused_status", pa.string()),
    pa.field("pool_size", pa.int32(), nullable=False),
    pa.field("oracle", pa.float64(), nullable=False),  # pass@N of the pool: 1 if any candidate is correct
    pa.field("majority", pa.float64()),  # majority vote over extracted answers (ties split), null for code
    pa.field("random", pa.float64(), nullable=False),  # expected accuracy of a random pick
    pa.field("genselect", pa.float64()),  # the selector's pick was correct (1/0), when a selector is configured
    pa.field("total_chars", pa.int64(), nullable=False),
    pa.field("teacher_chars", pa.map_(pa.string(), pa.int64())),  # incl. "multiple" and "unmatched"
    pa.field("position_chars", pa.list_(pa.int64())),  # chars attributed to each pool position
    pa.field("position_multiple", pa.int64()),
    pa.field("position_unmatched", pa.int64()),
])


# FusioN on open-ended problems (fusion_open): the fused answer's scores beside Best-of-N on the same pool.
_VALUES = pa.map_(pa.string(), pa.float64())  # scorer -> value (status ok only)
FUSION_OPEN = pa.schema([
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("fused_candidate_id", pa.string()),
    pa.field("fused_kept", pa.bool_()),  # the hard filter (bon.filter) keeps the fused answer
    pa.field("pool_size", pa.int32(), nullable=False),
    pa.field("scorer", pa.string(), nullable=False),  # the selection scorer (bon.scorer)
    pa.field("bon_candidate_id", pa.string()),  # Best-of-N on the pool by the selection scorer
    pa.field("fused_values", _VALUES),
    pa.field("bon_values", _VALUES),
    pa.field("pool_max", _VALUES),
    pa.field("pool_mean", _VALUES),
    pa.field("total_chars", pa.int64(), nullable=False),
    pa.field("teacher_chars", pa.map_(pa.string(), pa.int64())),
    pa.field("position_chars", pa.list_(pa.int64())),
    pa.field("position_multiple", pa.int64()),
    pa.field("position_unmatched", pa.int64()),
])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder/cast ``table`` to ``schema``; missing nullable columns become nulls."""
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        elif field.nullable:
            cols.append(pa.nulls(table.num_rows, field.type))
        else:
            raise KeyError(f"table lacks required column {field.name!r}")
    return pa.Table.from_arrays(cols, schema=schema)


def text_chars(tables) -> int:
    """The characters of the ``text`` column over ``tables`` (one at a time: a stage's shards), for the
    manifest field ``text_chars`` that the report's tokens figure reads instead of the texts."""
    import pyarrow.compute as pc

    return sum(int(pc.sum(pc.utf8_length(t.column("text"))).as_py() or 0) for t in tables)
