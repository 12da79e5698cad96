"""The sampling stage run on its own: a problems table committed as stage ``problems`` (key ``pk``), then
one teacher's ``candidates`` node computed (or resumed) against it."""

from __future__ import annotations

import pyarrow as pa

from bonforge.engine import run_node
from bonforge.stage import Ref
from bonforge.storage.store import StageStore
from bonforge.stages import sample


def sample_stage(store: StageStore, problems: pa.Table, teacher, engine=None) -> dict:
    if not store.exists("problems", "pk"):
        store.write_shard("problems", "pk", 0, problems)
        store.commit("problems", "pk", 1, version="1", config={}, upstream={})
    return run_node(store, sample.node(Ref("problems", "pk", store.manifest("problems", "pk")), teacher, engine))
