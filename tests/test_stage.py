"""A stage's params are one typed object: the key config is derived from it, compute receives its fields, and a
params class that does not fit the compute, or a node bound with anything else, fails where it is declared."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import FilterConfig, ScoreConfig
from bonforge.stage import Params, Ref, Stage, unkeyed, whole_key
from bonforge.stages import problem_stats


def _compute(shard: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig) -> pa.Table:
    return shard


@dataclass(frozen=True)
class Misspelled(Params):
    score_cfg: ScoreConfig
    filtr_cfg: FilterConfig


@dataclass(frozen=True)
class Lacking(Params):
    score_cfg: ScoreConfig


def test_a_params_field_the_compute_does_not_take_fails_at_the_declaration_naming_stage_and_field():
    with pytest.raises(TypeError, match=r"stage 'demo': compute _compute\(\) takes no argument 'filtr_cfg' "
                                        r"\(a field of Misspelled\)"):
        Stage("demo", "1", params=Misspelled, compute=_compute)


def test_a_compute_argument_nothing_gives_fails_at_the_declaration_naming_stage_and_field():
    with pytest.raises(TypeError, match=r"stage 'demo': compute _compute\(\) needs 'filter_cfg', which neither its "
                                        r"params \(Lacking\) nor a context hook give"):
        Stage("demo", "1", params=Lacking, compute=_compute)


def test_binding_anything_but_the_declared_params_fails_naming_the_stage():
    with pytest.raises(TypeError, match=r"stage 'problem_stats': bind\(\) takes ScoreParams, got dict"):
        problem_stats.STAGE.bind({"score_cfg": ScoreConfig(), "filter_cfg": FilterConfig()}, {})
    demo = Stage("demo", "1", compute=lambda t: t)
    with pytest.raises(TypeError, match=r"stage 'demo' declares no params, got ScoreParams"):
        demo.bind(problem_stats.ScoreParams(ScoreConfig(), FilterConfig()), {})


@dataclass(frozen=True)
class Demo(Params):
    ks: list[int] | None
    cfg: FilterConfig
    folder: Path = unkeyed()


def test_the_key_config_is_derived_from_the_params_and_compute_gets_every_field():
    seen = {}

    def compute(shard, ks, cfg, folder):
        seen.update(ks=ks, cfg=cfg, folder=folder)
        return shard

    params = Demo([1, 4], FilterConfig(min_pass_rate=0.2), Path("/somewhere"))
    node = Stage("demo", "1", params=Demo, compute=compute).bind(params, {"v": Ref("v", "k")})
    assert node.config == {"ks": [1, 4], "cfg": FilterConfig(min_pass_rate=0.2).key_config()}  # folder: not keyed
    assert node.params is params
    node.stage.compute(pa.table({}), **node.params.compute_args())
    assert seen == {"ks": [1, 4], "cfg": params.cfg, "folder": Path("/somewhere")}
    moved = Stage("demo", "1", params=Demo, compute=compute).bind(Demo([1, 4], params.cfg, Path("/elsewhere")),
                                                                  {"v": Ref("v", "k")})
    assert moved.key == node.key


def test_a_stage_keyed_by_its_override_keeps_todays_key_shape():
    node = problem_stats.STAGE.bind(problem_stats.ScoreParams(ScoreConfig(), FilterConfig()), {"verdicts": []})
    assert node.config == {"score": ScoreConfig().key_config(), "filter": FilterConfig().key_config()}


@dataclass(frozen=True)
class Whole(Params):
    cfg: FilterConfig = whole_key()
    folder: Path = unkeyed()


@dataclass(frozen=True)
class WholeAndMore(Params):
    cfg: FilterConfig = whole_key()
    ks: list[int] = unkeyed()
    pool: bool = False


def test_a_whole_key_field_is_the_key_config_and_no_other_field_may_be_keyed():
    assert Whole(FilterConfig(min_candidates=3), Path("/x")).key_config() == FilterConfig(min_candidates=3).key_config()
    with pytest.raises(TypeError, match=r"WholeAndMore: 'cfg' is the whole key, so 'pool' must be unkeyed"):
        WholeAndMore(FilterConfig(), [1]).key_config()


def test_shortfalls_and_missing_rows_pickle_and_say_whether_a_retry_may_help():
    import pickle

    from bonforge.engine.shards import missing_rows
    from bonforge.errors import TransientError
    from bonforge.stage import RowsMissing, RowsMissingForNow, Shortfall

    short = pickle.loads(pickle.dumps(Shortfall(pa.table({"a": [1]}), 2, {"HTTP 429": 2}, True)))
    assert short.table.num_rows == 1 and (short.missing, short.why, short.retry) == (2, {"HTTP 429": 2}, True)
    late = missing_rows([short, Shortfall(pa.table({"a": [2]}), 1, {"HTTP 429": 1, "timed out": 0}, True)])
    assert isinstance(late, RowsMissingForNow) and isinstance(late, TransientError)
    assert str(late).startswith("3 rows missing (HTTP 429: 3, timed out: 0); every row received is kept")
    assert pickle.loads(pickle.dumps(late)).why == late.why
    never = missing_rows([short, Shortfall(pa.table({"a": [2]}), 1, {"HTTP 401": 1}, False)])
    assert type(never) is RowsMissing and not isinstance(never, TransientError)
