"""Recipe models (YAML → pydantic). A wrong key or value fails before any work, naming the field path.

Fields marked ``exec_only`` (parallelism, timeouts that do not change verdicts, addresses) are left out of
stage keys: changing them never invalidates a cached stage.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, ValidationError, model_validator

from bonforge.config_model import MAX_DEPTH, Model, Name, Need, added, exec_only, install_command, load_yaml, parse_yaml
from bonforge.errors import ConfigError, MissingModules, clip, shown
from bonforge.tables.records import ByteLimits
from bonforge.llm.config import GenerationTeacher, OpenAITeacher, SampledTeacher, TransformersTeacher, VLLMTeacher
from bonforge.llm.prices import worst_case
from bonforge.judging.config import MathVerifyConfig
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.scoring.config import SCORERS, BonConfig, BonFilter, EvaluateConfig, ScorerConfig  # noqa: F401


class DataSource(Model):
    """A public file: ``path`` relative to the data mirror (``BONFORGE_DATA``) and the download cache,
    fetched from ``url`` and checked against ``sha256`` when not mirrored. ``path`` may also be a local
    file or directory (absolute, or relative to the recipe) and then needs no url."""

    path: str = Field(description="Relative path in the mirror/cache, or a local path.")
    url: str | None = Field(None, description="Where to download the file when it is not mirrored.")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="Checksum of the downloaded file.")
    max_line_mib: float = exec_only(64, gt=0, description="Longest JSONL line read (MiB); a longer one is an error.")
    max_input_gib: float = exec_only(
        64, gt=0, description="Most data one file may hold once decompressed (GiB; Parquet: uncompressed, as its "
        "footer says); more is an error.")  # fmt: skip

    def byte_limits(self) -> ByteLimits:
        return ByteLimits(line=int(self.max_line_mib * (1 << 20)), total=int(self.max_input_gib * (1 << 30)))

    def own_needs(self) -> dict[str, str]:
        return {"boto3": "s3"} if self.path.startswith("s3://") else {}


class FieldMap(Model):
    """Which record fields hold the problem's parts (dotted paths allowed; a path may go through a field
    holding a JSON object as a string, as LiveCodeBench's ``metadata.func_name``)."""

    question: str = "question"
    answer: str | None = "answer"
    id: str | None = Field(None, description="Field with a stable id; else ids are '<source>/<row index>'.")
    metadata: list[str] = Field(default_factory=list, description="Fields copied into the metadata JSON.")
    tests: str | list[str] | None = added(
        None, description="Code problems: the field (or fields, joined in order, e.g. [public_tests, "
        "private_tests]) holding the tests, in a shape of `tests_format`.")  # fmt: skip
    tests_format: Literal["auto", "bonforge", "apps", "codecontests", "livecodebench", "assert"] = added(
        "auto", description="The tests' shape (see bonforge.sources.spec_formats); 'auto' tells them apart.")
    fn_name: str | None = added(None, description="Field with the function call-based tests call.")
    entry_point: str | None = added(None, description="Field with the function assert-style tests check.")
    starter: str | None = added(None, description="Field with starter code (appended to the question).")
    time_limit: str | None = added(
        "time_limit", description="Field with a per-test time limit, when present: seconds, '2 seconds', "
        "'500 ms' or {seconds, nanos}; it overrides verify.code.time_limit_s for that problem.")  # fmt: skip
    memory_limit: str | None = added(
        "memory_limit", description="Field with a memory limit, when present: '256 megabytes', a number of "
        "MiB, or bytes for a field named *_bytes; recorded in the metadata as memory_limit_mb.")  # fmt: skip
    language: str | None = added(
        None, description="Open-ended problems: field with the language the answer should be in (an ISO 639-1 "
        "code such as 'de'); kept in the metadata as `language`.")
    solutions: str | None = added(
        None, description="Code problems: field with a list of reference programs (or its JSON string): "
        "answer = the first, all of them in metadata reference_solutions (see include_reference).")  # fmt: skip
    solution_languages: str | None = added(
        None, description="Code problems: field with the language of each of `solutions` (a list beside them: "
        "names, or CodeContests' codes 2 C++, 3 Python 3, 4 Java; Python 2 and unknown ones are left out).")


class ProblemsConfig(Model):
    """Where problems come from."""

    source: DataSource
    name: str = Field(description="Dataset name, used in problem ids and `data_source`.")
    format: Literal["jsonl", "parquet", "hf", "humaneval", "apps", "problem_package"] = Field(
        "jsonl", description="'hf': a local Hugging Face dataset directory (save_to_disk output, or hub-style "
        "Parquet shards such as data/train-*.parquet); 'parquet' also takes a directory of shards; "
        "'problem_package': a folder of competitive-programming packages in the Library Checker layout (or one "
        "package), `files` a glob of the package folders to take.")
    split: str | None = added(None, description="Split of an 'hf' directory (default: train, or the only one).")
    files: str | None = added(None, description="Glob of the shard files inside the source directory.")
    domain: Literal["math", "code", "open"] = Field(
        "math", description="'open': requests without a gold answer (chat, writing, translation): `answer` is an "
        "optional reference, candidates are scored (`scorers`), not verified.")
    fields: FieldMap = Field(default_factory=FieldMap)
    limit: int | None = Field(None, gt=0, description="Keep only the first N problems.")
    missing_answers: Literal["error", "skip"] = added(
        "error", description="Maths problems whose gold answer is missing (null, NaN, infinite, pandas' 'nan'): "
        "'error' stops the load naming the file, record and field; 'skip' leaves them out, counted in the "
        "problems manifest (left_out.no_gold_answer).")  # fmt: skip
    include_reference: bool = Field(
        False, description="Add the problems' reference solutions (HumanEval canonical_solution, APPS "
                           "solutions.json, fields.solutions) to the pool as a teacher named `reference`.")

    @model_validator(mode="after")
    def _tests_for_code(self) -> "ProblemsConfig":
        table = self.format in ("jsonl", "parquet", "hf")
        if self.format == "problem_package" and self.domain != "code":
            raise ValueError("format: problem_package holds code problems (set domain: code)")
        if table and self.domain == "code" and not self.fields.tests:
            raise ValueError("code problems from a table need fields.tests (the field holding their tests)")
        if self.fields.tests and (self.domain != "code" or not table):
            raise ValueError("fields.tests applies to code problems (domain: code) from jsonl, parquet or hf")
        if self.fields.solution_languages and not self.fields.solutions:
            raise ValueError("fields.solution_languages needs fields.solutions (the programs they belong to)")
        if self.fields.language and self.domain != "open":
            raise ValueError("fields.language applies to open-ended problems (domain: open)")
        if self.domain == "open" and not table:
            raise ValueError(f"domain: open takes problems from jsonl, parquet or hf tables, not {self.format!r}")
        return self


class Benchmark(Model):
    """A benchmark whose items must not reach the training data: an ordinary source plus the field with its
    question."""

    name: Name = Field(description="Named in the contamination table.")
    source: DataSource
    format: Literal["jsonl", "parquet", "hf"] = "jsonl"
    split: str | None = Field(None, description="Split of an 'hf' directory (default: train, or the only one).")
    files: str | None = Field(None, description="Glob of the shard files inside the source directory.")
    field: str = Field("problem", description="Field holding the item's question (dotted paths allowed).")
    id: str | None = Field("id", description="Field holding the item's id (null: '<name>/<row index>').")


class NearDuplicatesConfig(Model):
    """Drop problems whose normalised question is a near duplicate of an earlier one's (MinHash/LSH over its
    words and word pairs, each candidate checked by its exact Jaccard similarity; equal numbers required)."""

    threshold: float = Field(0.85, gt=0, le=1, description="Least Jaccard similarity of two questions' shingle "
                             "sets (words and adjacent word pairs) that makes the later one a near duplicate.")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash functions per question (more: fewer missed "
                          "pairs near the threshold, more time).")


class DecontaminateConfig(Model):
    """Drop problems that overlap a benchmark, and duplicates inside the problem set, before sampling."""

    benchmarks: list[Benchmark] = Field(default_factory=list)
    ngram: int = Field(13, ge=1, le=64, description="Words in a shared span that counts as an overlap.")
    dedup: bool = Field(True, description="Also drop repeats of a normalised question (the first one stays).")
    near_duplicates: NearDuplicatesConfig | None = added(
        None, description="Also drop near duplicates (reworded by a word or two) of a question earlier in "
        "problem_id order, with the id they duplicate (see bonforge.tables.near_duplicates); off by default.")

    @model_validator(mode="after")
    def _something_to_do(self) -> "DecontaminateConfig":
        names = [b.name for b in self.benchmarks]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must be unique: {', '.join(names)}")
        if not names and not self.dedup and not self.near_duplicates:
            raise ValueError("nothing to do: no benchmarks, dedup is off and no near_duplicates (remove the section)")
        return self


class PoolTeacher(Model):
    """Import candidates someone already generated (the `pool` engine)."""

    engine: Literal["pool"]
    name: Name
    source: DataSource
    format: Literal["jsonl", "codet", "apps", "problem_package", "messages"] = Field(
        "jsonl", description="'problem_package': the solutions (sol/*) of the packages the problems came from "
        "(problems.format: problem_package), labelled by their info.toml, their language from the file's suffix. "
        "'messages': trajectories, each an OpenAI-style message list (tool calls and tool messages included) in "
        "the field `samples` names (default `messages`), its last assistant message the answer.")
    match: Literal["question", "id", "order"] = Field(
        "question", description="How a pool record finds its problem: same question text, same id, or row order."
    )
    match_field: str = Field("question", description="The pool record's field compared with the problem's question "
                             "or id (default: `question`, or `id` with match: id).")
    samples: str = Field("samples", description="Field (dotted path) holding one sample or a list of samples.")
    text: str | None = Field(None, description="Field of a sample holding its text (None: the sample is text).")
    label: str | None = Field(None, description="Field of a sample with a published correctness label.")
    n: int | None = Field(None, gt=0, description="Keep at most n samples per problem.")
    language: str | None = added(
        None, description="Field of the record with the programs' language: one value for all its samples, or a "
        "list beside them (CodeContests' solutions.language); names (cpp, java, python, pypy) or CodeContests' "
        "codes (2 C++, 3 Python 3, 4 Java; samples in Python 2 or of unknown language are left out).")
    reference_correct: bool | None = added(
        None, description="A label every sample of this pool carries: false for known-wrong programs "
        "(CodeContests' incorrect_solutions), which measure the problem's test-suite strength.")

    @model_validator(mode="before")
    @classmethod
    def _id_field(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("match") == "id" and "match_field" not in data:
            data = {**data, "match_field": "id"}  # a record names its problem by id in `id` unless told otherwise
        if isinstance(data, dict) and data.get("format") == "messages" and "samples" not in data:
            data = {**data, "samples": "messages"}
        return data

    @model_validator(mode="after")
    def _trajectories(self) -> "PoolTeacher":
        if self.format == "messages" and (self.text or self.language):
            raise ValueError("format: messages reads the answer from each trajectory's last assistant message "
                             "(remove `text` and `language`)")
        return self


ENGINES = {"pool": PoolTeacher, "openai": OpenAITeacher, "transformers": TransformersTeacher, "vllm": VLLMTeacher}
TeacherConfig = Annotated[
    Union[PoolTeacher, OpenAITeacher, TransformersTeacher, VLLMTeacher], Field(discriminator="engine")
]
FusorConfig = GenerationTeacher


class VerifyConfig(Model):
    math: MathVerifyConfig = Field(default_factory=MathVerifyConfig)
    code: CodeVerifyConfig = Field(default_factory=CodeVerifyConfig)


class ScoreConfig(Model):
    ks: list[int] | None = Field(None, description="k values for pass@k etc. (default 1, 2, 4, ... <= n).")


class FilterConfig(Model):
    """Keep problems with min_pass_rate < pass rate <= max_pass_rate and at least min_candidates."""

    min_pass_rate: float = Field(0.0, ge=0, le=1)
    max_pass_rate: float = Field(0.5, ge=0, le=1)
    min_candidates: int = Field(2, ge=1)
    min_suite_strength: float | None = added(
        None, ge=0, le=1, description="Drop code problems whose tests reject less than this share of their "
        "known-wrong candidates (problem_stats.suite_strength; problems without any are kept). Off by default.")
    early_stop: bool = added(
        False, description="Sample and verify in rounds and stop drawing a problem once it is certain to be "
        "dropped as too easy (bonforge.stages.rounds): exact, the kept problems and every export are those of a "
        "build that draws all n.")  # fmt: skip
    count_reference: bool = added(
        False, description="With problems.include_reference: count the reference solutions in n and the pass "
        "rate the filter reads (teacher '*'). Off, the filter reads the model teachers' candidates only.")

    @model_validator(mode="after")
    def _ordered(self) -> "FilterConfig":
        if self.min_pass_rate >= self.max_pass_rate:
            raise ValueError(
                f"min_pass_rate ({self.min_pass_rate}) must be below max_pass_rate ({self.max_pass_rate})"
            )
        return self


class GenSelectConfig(Model):
    """Selection prompts (GenSelect)."""

    def own_needs(self) -> dict[str, str]:
        return {"tokenizers": "hf", "transformers": "hf"} if self.tokenizer else {}

    min_candidates: int = Field(2, ge=2)
    max_candidates: int = Field(16, ge=2)
    max_correct_fraction: float = Field(0.5, gt=0, le=1, description="At most this share correct per prompt.")
    prompts_per_problem: int = Field(4, ge=1)
    max_tokens: int = Field(16384, gt=0)
    max_candidate_tokens: int | None = Field(
        12288, gt=0, description="Leave out candidates whose response is longer (tokens, counted like prompts) "
        "before assembly; null: no limit.")  # fmt: skip
    tokenizer: str | None = Field(None, description="Local tokenizer dir/file; else a conservative estimate.")
    template: str | None = Field(None, description="Prompt template file (default: bonforge's genselect.txt).")
    include_reference_candidates: bool = added(
        False, description="With problems.include_reference: let the reference solutions enter the prompts as "
        "candidates. Off, prompts hold the model teachers' candidates only.")

    @model_validator(mode="after")
    def _sizes(self) -> "GenSelectConfig":
        if self.min_candidates > self.max_candidates:
            raise ValueError("min_candidates must not exceed max_candidates")
        return self


class RLExport(Model):
    """The kept problems themselves (and their candidates), for RL with the math and code rewards."""

    name: Name = Field(description="Dataset name under <store>/datasets/.")
    template: str | None = Field(
        None, description="Prompt template file with {question} (default: bonforge's sample_<domain>.txt).")


class SFTExport(Model):
    """One correct answer per kept problem (rejection sampling), for SFT: a trajectory whole, tool calls and
    tool messages included."""

    name: Name = Field(description="Dataset name under <store>/datasets/.")


class ExportConfig(Model):
    name: Name = Field(description="Dataset name under <store>/datasets/.")
    formats: list[Literal["verl", "plain"]] = Field(default_factory=lambda: ["verl", "plain"])
    allow_empty: bool = Field(False, description="Publish a dataset version even when no prompt is left "
                              "(else the build fails, naming why every problem was dropped).")
    rl: RLExport | None = Field(None, description="Also publish the RL dataset of the kept problems.")
    sft: SFTExport | None = added(None, description="Also publish an SFT dataset: each kept problem's first "
                                  "correct candidate (by candidate id) as TRL / verl multi-turn messages.")
    validation_fraction: float = added(
        0.0, ge=0, lt=1, description="Share of the problems whose rows go to a validation split "
        "(<format>/validation.parquet) in every dataset the build publishes; chosen by a hash of the recipe's "
        "seed and the problem id, so a problem is in one split only and stays there as problems are added.")
    license: str | None = added(
        None, description="The licence id written in the dataset card (a Hub licence id such as mit or "
        "apache-2.0: that of the problems and candidates); unset: unknown.")


class FusionPrefilter(Model):
    """Leave weak candidates out of fusion pools before drawing."""

    drop_statuses: list[str] = Field(default_factory=list, description="Verdict statuses to leave out, e.g. "
                                     "[no_answer] (note: statuses that compare with the gold answer leak it).")
    min_chars: int = Field(0, ge=0, description="Leave out candidates shorter than this.")


class FusionExport(Model):
    name: Name = Field(description="Dataset name of the fused SFT data.")
    only_correct: bool = Field(True, description="Export only fused answers that verify as correct.")


class FusionConfig(Model):
    """FusioN: a fusor model reads a pool of candidates from several teachers and writes one answer."""

    teachers: dict[str, int] = Field(min_length=1, description="Teacher name -> candidates drawn per problem.")
    n: int | None = Field(None, gt=0, description="Pool size (default: the sum of the per-teacher counts).")
    seed: int = 0
    problems: Literal["all", "kept"] = Field("all", description="Fuse every problem, or only filter-kept ones.")
    guidance: bool = Field(True, description="Add the quality guidance paragraph to the prompt.")
    template: str | None = Field(None, description="Prompt template file (default: bonforge's fusion.txt).")
    prefilter: FusionPrefilter = Field(default_factory=FusionPrefilter)
    min_span: int = Field(16, gt=0, description="Shortest verbatim span that counts in contribution analysis.")
    fusor: FusorConfig
    selector: FusorConfig | None = Field(
        None, description="A GenSelect selector to compare with: it picks one candidate of each pool (the "
                          "recipe's genselect template), and its accuracy joins the comparison table.")
    export: FusionExport

    @model_validator(mode="after")
    def _counts(self) -> "FusionConfig":
        bad = [k for k, v in self.teachers.items() if v < 1]
        if bad:
            raise ValueError(f"teachers: counts must be >= 1 ({', '.join(bad)})")
        return self


class RayConfig(Model):
    address: str | None = exec_only(None, description="Ray cluster address (default: RAY_ADDRESS or local).")
    num_cpus: int | None = exec_only(None, gt=0, description="CPUs for a local Ray (default: all).")


class EngineConfig(Model):
    streaming: bool = exec_only(
        True, description="Start every stage at once, each shard as soon as the shards it reads are written "
                          "(docs/streaming.md); false: each stage after the last (the barrier build).")


class Recipe(Model):
    """A whole build: problems → candidates → verdicts → problem_stats → genselect → dataset."""

    name: Name
    seed: int = 0
    problems: ProblemsConfig
    decontaminate: DecontaminateConfig | None = Field(
        None, description="A `contamination` stage before sampling (see bonforge.stages.decontaminate).")
    teachers: list[TeacherConfig] = Field(min_length=1)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    score: ScoreConfig = Field(default_factory=ScoreConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    genselect: GenSelectConfig = Field(default_factory=GenSelectConfig)
    export: ExportConfig
    fusion: FusionConfig | None = None
    scorers: list[ScorerConfig] = added(
        [], description="Open-ended problems: what scores every candidate (`scores` stage).")
    bon: BonConfig | None = added(None, description="Open-ended problems: Best-of-N by a scorer (`bon` stage).")
    evaluate: EvaluateConfig | None = added(
        None, description="Open-ended problems: pairwise judge evaluation against a baseline (`pairwise` stage).")
    ray: RayConfig = Field(default_factory=RayConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    overrides: list[str] = exec_only(
        [], description="The `--set` overrides the recipe was read with (filled in by the loader; recorded in the "
        "run record and in the manifest of every dataset version it builds).")
    budget: float | None = exec_only(
        None, ge=0, strict=True, description="US dollars the build may spend on endpoints with token prices "
        "(`bonforge run --budget`, docs/cost.md): no request is sent that could take the spend over it; the build "
        "stops keeping every finished row, and a rerun with a larger budget pays only for what is new.")
    reuse: bool = exec_only(
        True, description="Take rows (samples, verdicts) whose content identity an earlier output in the store "
                          "holds, and skip committed stages. false (or `bonforge run --fresh`): recompute "
                          "every stage and every row.")

    @model_validator(mode="after")
    def _unique_teachers(self) -> "Recipe":
        names = [t.name for t in self.teachers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"teacher names must be unique; repeated: {', '.join(dup)}")
        if self.filter.early_stop and (self.problems.include_reference or self.problems.domain == "open"
                                       or any(isinstance(t, PoolTeacher) for t in self.teachers)):
            raise ValueError("filter.early_stop draws sampled teachers in rounds: not with pool teachers, "
                             "problems.include_reference or open-ended problems")
        batched = [t for t in self.teachers if isinstance(t, TransformersTeacher) and t.batch_size > 1]
        if self.filter.early_stop and batched:
            raise ValueError(f"teachers.{batched[0].name}.batch_size: filter.early_stop needs 1 with the transformers "
                             f"engine (got {batched[0].batch_size}): a batch's size moves every row's logits, so "
                             "sample k drawn in a round could differ from sample k drawn among all n; set it to 1 "
                             "(each sample generated alone)")
        if self.filter.early_stop and self.fusion and self.fusion.problems == "all":
            raise ValueError("fusion.problems: all fuses every problem from all its samples, but filter.early_stop "
                             "stops drawing a problem once it is certain to be dropped: set fusion.problems: kept "
                             "(exact: kept problems are drawn in full) or turn early_stop off")
        tools = [t.name for t in self.teachers if getattr(t, "python_tool", None)]
        if self.filter.early_stop and self.engine.streaming and tools:
            raise ValueError(f"teachers.{tools[0]}.python_tool: early stopping without rounds (engine.streaming) "
                             "does not run tool calls yet: set engine.streaming: false (rounds) or drop the tool")
        if self.filter.early_stop and not self.reuse:
            raise ValueError("filter.early_stop takes each round's earlier samples from the store: not with "
                             "reuse: false (--fresh)")
        if self.problems.include_reference and "reference" in names:
            raise ValueError("problems.include_reference adds a teacher named 'reference': rename yours")
        if self.fusion:
            unknown = sorted(set(self.fusion.teachers) - set(names))
            if unknown:
                raise ValueError(f"fusion.teachers: unknown teacher {', '.join(unknown)}; known: {', '.join(names)}")
            if self.fusion.fusor.name in names:
                raise ValueError(f"fusion.fusor.name {self.fusion.fusor.name!r} is already a teacher's name")
        return self._open_ended()

    @model_validator(mode="after")
    def _budget(self) -> "Recipe":
        """A budget counts endpoints with token prices, and must hold one request of the cheapest at worst."""
        if self.budget is None:
            return self
        priced = [(at, t) for at, t in endpoints(self) if t.prices and None not in (t.prices.input, t.prices.output)]
        if not priced:
            raise ValueError("budget: it counts what endpoints with token prices spend, and none states them: give "
                             "the teachers (or judges) `prices: {input: ..., output: ...}` (dollars per million "
                             "tokens)")
        floor, at, t = min((worst_case(t.prices, 1, t.max_tokens), at, t) for at, t in priced)
        if self.budget < floor:
            raise ValueError(f"budget: {self.budget:g} dollars is below what one request may cost (${floor:.6f}: {at}, "
                             f"max_tokens {t.max_tokens} at ${t.prices.output:g} per million output tokens): no "
                             "request could be sent")
        return self

    @model_validator(mode="after")
    def _distinct_datasets(self) -> "Recipe":
        """Each dataset the recipe publishes has a folder of its own under datasets/, also on a filesystem
        that ignores case (macOS, Windows)."""
        published = {"export.name": self.export.name, "export.rl.name": self.export.rl and self.export.rl.name,
                     "fusion.export.name": self.fusion and self.fusion.export.name,
                     "bon.preferences": self.bon and self.bon.preferences}
        seen: dict[str, str] = {}
        for where, name in ((w, n) for w, n in published.items() if n):
            if name.lower() in seen:
                raise ValueError(f"{where} {name!r} is the dataset {seen[name.lower()]} publishes (names that differ "
                                 "only in case are one folder on some filesystems): give each dataset its own name")
            seen[name.lower()] = where
        return self

    def _open_ended(self) -> "Recipe":
        scorers = {s.name: s for s in self.scorers}
        if len(scorers) != len(self.scorers):
            raise ValueError("scorers: names must be unique")
        if self.problems.domain != "open":
            if self.scorers or self.bon or self.evaluate:
                raise ValueError("scorers, bon and evaluate apply to open-ended problems (problems.domain: open)")
            return self
        if not self.scorers or not self.bon:
            raise ValueError("open-ended problems (domain: open) need scorers and bon (the Best-of-N pick that "
                             "export.name publishes)")
        if self.export.rl:
            raise ValueError("open-ended problems: export.rl is not available (it reads verdicts)")
        verdict_keys = self.fusion and (self.fusion.prefilter.drop_statuses or self.fusion.selector
                                        or self.fusion.problems == "kept"
                                        or "only_correct" in self.fusion.export.model_fields_set)
        if verdict_keys:
            raise ValueError("fusion.prefilter.drop_statuses, fusion.selector, fusion.problems: kept and "
                             "fusion.export.only_correct read verdicts; open-ended pools and fused answers are kept "
                             "by bon.filter (the hard filter)")
        named = {"bon.scorer": [self.bon.scorer], "bon.filter.min": list(self.bon.filter.min),
                 "bon.filter.language": [self.bon.filter.language] if self.bon.filter.language else []}
        for where, names in named.items():
            for n in names:
                if n not in scorers:
                    raise ValueError(f"{where}: no scorer named {n!r} (scorers: {', '.join(scorers)})")
        if self.evaluate:
            self._check_evaluate(scorers)
        if self.bon.filter.language and scorers[self.bon.filter.language].kind != "language_id":
            raise ValueError(f"bon.filter.language: scorer {self.bon.filter.language!r} is not a language_id one")
        return self

    def _check_evaluate(self, scorers: dict) -> None:
        ev = self.evaluate
        teachers = [t.name for t in self.teachers] + ["reference"] * self.problems.include_reference
        systems = ["bon"] + ["fused"] * bool(self.fusion)
        for where, name in [("evaluate.baseline", b) for b in ev.baselines] + [("evaluate.contenders", c)
                                                                              for c in ev.contenders]:
            if name not in systems and (not name.startswith("teacher:") or name[len("teacher:"):] not in teachers):
                raise ValueError(f"{where}: {name!r} is not {' or '.join(f'`{x}`' for x in systems)} or "
                                 f"`teacher:<name>` (teachers: {', '.join(teachers)})")
        if len(set(ev.contenders)) != len(ev.contenders) or len(set(ev.baselines)) != len(ev.baselines):
            raise ValueError("evaluate: each contender and each baseline once")
        if set(ev.contenders) <= set(ev.baselines):
            raise ValueError("evaluate.contenders: at least one that is not a baseline")
        selecting = {self.bon.scorer, *self.bon.filter.min}  # the picking scorer, and the hard filter's
        for s in (scorers[n] for n in sorted(selecting)):
            if s.kind == "judge" and s.judge.model == ev.judge.model and {"bon", "fused"} & {*ev.contenders,
                                                                                            *ev.baselines}:
                raise ValueError(f"evaluate.judge: model {ev.judge.model!r} is the judge that picked the Best-of-N "
                                 f"answers and filtered the fusion pools (scorer {s.name!r}): it would grade its own "
                                 "choices; take another judge")


# -- loading -------------------------------------------------------------------------------------------
def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML; list items by index) to a raw recipe dict. No
    space may stand around the ``=``: ``a = b`` is refused (in a shell it is three words), never guessed."""
    for item in overrides:
        path, eq, value = item.partition("=")
        parts = path.split(".")
        if not eq or not all(p and p.strip() == p for p in parts) or value[:1].isspace():
            raise ConfigError(f"--set {shown(item)}: expected KEY.PATH=VALUE with no space around '=' or in the "
                              "key (quote the whole option where VALUE holds spaces: --set 'a.b=x y')")
        if len(parts) > MAX_DEPTH:
            raise ConfigError(f"--set {shown(path)}: a key path of {len(parts)} parts (a recipe nests {MAX_DEPTH} "
                              "deep at most)")
        node: Any = raw
        for i, part in enumerate(parts[:-1]):
            node = _child(node, part, parts[: i + 1], create=True)
        last = parts[-1]
        parsed = parse_yaml(value, f"--set {shown(path)}") if value.strip() else None
        if not isinstance(node, (dict, list)):
            raise ConfigError(f"--set {shown(path)}: {shown('.'.join(parts[:-1]))} is a {type(node).__name__}, "
                              "not a mapping or a list")
        if isinstance(node, list):
            node[_index(node, last, parts)] = parsed
        else:
            node[last] = parsed
    return raw


def _index(node: list, part: str, path: list[str]) -> int:
    """A list item by index, or by name for lists of named items (``--set teachers.<name>.n=4``)."""
    names = [item.get("name") if isinstance(item, dict) else None for item in node]
    if part in names:
        return names.index(part)
    if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
        known = f" nor a name ({', '.join(map(str, names))})" if any(names) else ""
        raise ConfigError(f"--set {shown('.'.join(path))}: {shown(part)} is not an index of a list of {len(node)}"
                          f"{known}")
    return int(part)


def _child(node: Any, part: str, path: list[str], create: bool) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, path)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {shown('.'.join(path))}: cannot descend into a {type(node).__name__}")
    if part not in node:
        node[part] = {}
    return node[part]


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line for one problem, else a header and a line per problem."""
    problems = []
    for e in err.errors():
        loc = clip(".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and (p in ENGINES or p in SCORERS))),
                   120)  # a key of 2 MB is named, not echoed
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field" + _did_you_mean(e["loc"])
        elif "input" in e and not isinstance(e["input"], (dict, list)) and e["type"] != "value_error":
            msg += f" (got {shown(e['input'])})"
        msg = clip(msg, 600)  # a rule's message quoting a 2 MB value (a teacher named in fusion.teachers) is cut
        problems.append(f"{loc}: {msg}" if loc else msg)
    if len(problems) == 1:
        return f"{source}: invalid recipe: {problems[0]}"
    return "\n".join([f"{source}: invalid recipe ({len(problems)} problems)"] + [f"  {p}" for p in problems])


def _did_you_mean(loc: tuple) -> str:
    model: Any = Recipe
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:  # a union member tag like 'pool'
            model = ENGINES.get(part, SCORERS.get(part, model))
            continue
        ann = field.annotation
        model = next((a for a in _flatten(ann) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    names = list(getattr(model, "model_fields", {}) or {})
    close = difflib.get_close_matches(str(loc[-1])[:100], names, n=1)
    return f"; did you mean {close[0]!r}?" if close else (f"; allowed: {', '.join(names)}" if names else "")


def _flatten(ann: Any) -> list:
    args = getattr(ann, "__args__", None)
    if not args:
        return [ann]
    return [x for a in args for x in _flatten(a)]


def endpoints(model: BaseModel, at: str = "") -> list[tuple[str, SampledTeacher]]:
    """Every model that generates text in ``model`` (teachers, the fusor, selectors, judges), with its field
    path."""
    out = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, item in enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]:
            path = f"{at}.{name}" if at else name
            path = path if i is None else f"{path}.{i}"
            if isinstance(item, SampledTeacher):
                out.append((path, item))
            elif isinstance(item, BaseModel):
                out += endpoints(item, path)
    return out


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {path} does not exist")
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping, got {type(raw).__name__}")
    return recipe_from_dict(raw, overrides, path.parent, str(path))


def recipe_from_dict(raw: dict, overrides: list[str] | None = None, base: str | Path = ".",
                     source: str = "recipe") -> Recipe:
    """A recipe from its mapping (what a YAML file holds), with ``a.b=value`` overrides; local files it names
    are relative to ``base`` (a recipe file's folder); ``source`` names it in errors."""
    raw = apply_overrides(copy.deepcopy(raw), overrides or [])
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None
    recipe = _resolve_local_paths(recipe, Path(base)).model_copy(update={"overrides": list(overrides or [])})
    _check_judge_templates(recipe)
    return recipe


def check_installed(recipe: Recipe, store_root: str = "") -> None:
    """Fail before any work when a module the recipe's kinds (or an S3 store) need is not installed: one error
    naming the modules, what needs them, and the one command that installs all the recipe needs."""
    store = [Need("boto3", "s3", "--store"), Need("fsspec", "s3", "--store")] if store_root.startswith("s3://") else []
    needs = recipe.needs() + store
    missing: dict[str, list[str]] = {}
    for need in needs:
        if importlib.util.find_spec(need.module) is None:
            missing.setdefault(need.module, []).append(need.where)
    if missing:
        which = "; ".join(f"{m} ({', '.join(dict.fromkeys(where))})" for m, where in missing.items())
        raise MissingModules(f"not installed: {which}; the recipe's install command: "
                             f"{install_command(n.extra for n in needs)}")


def _check_judge_templates(recipe: Recipe) -> None:
    """A judge's template is read when the recipe is: a missing file or placeholder fails before any work."""
    from bonforge import templates

    for s in recipe.scorers:
        if s.kind == "judge":
            templates.load(s.template, "judge_pointwise.txt", ("{question}", "{answer}"), f"scorers.{s.name}.template")
    if recipe.evaluate:
        templates.load(recipe.evaluate.template, "judge_pairwise.txt", ("{question}", "{answer_a}", "{answer_b}"),
                       "evaluate.template")


def _resolve_local_paths(recipe: Recipe, base: Path) -> Recipe:
    """Local files a recipe names (templates, tokenizers, model directories) are relative to the recipe."""

    def fix(model: Model, names: tuple[str, ...]) -> Model:
        upd = {}
        for name in names:
            value = getattr(model, name, None)
            if isinstance(value, str) and value and not Path(value).is_absolute() and (base / value).exists():
                upd[name] = str((base / value).resolve())
        return model.model_copy(update=upd) if upd else model

    upd: dict = {
        "genselect": fix(recipe.genselect, ("template", "tokenizer")),
        "teachers": [fix(t, ("prompt_template", "model")) for t in recipe.teachers],
    }
    if recipe.scorers:
        upd["scorers"] = [fix(s, ("template",)).model_copy(update={"judge": fix(s.judge, ("prompt_template", "model"))})
                          if s.kind == "judge" else fix(s, ("model",)) if s.kind == "reward_model" else s
                          for s in recipe.scorers]
    if recipe.evaluate:
        upd["evaluate"] = fix(recipe.evaluate, ("template",)).model_copy(
            update={"judge": fix(recipe.evaluate.judge, ("prompt_template", "model"))})
    if recipe.fusion:
        upd["fusion"] = fix(recipe.fusion, ("template",)).model_copy(
            update={"fusor": fix(recipe.fusion.fusor, ("prompt_template", "model"))})
    return recipe.model_copy(update=upd)
