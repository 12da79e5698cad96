"""ordering.sort_by: Table.sort_by's rows, and an input already in order comes back as it is (not copied)."""

import numpy as np
import pyarrow as pa

from bonforge.tables.ordering import in_key_order, sort_by


def test_sort_by_equals_arrow_sort_and_keeps_an_ordered_table_as_it_is():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(0, 12))
        t = pa.table({"a": rng.choice(["x", "y", "z"], n).tolist(), "b": rng.integers(0, 3, n), "i": np.arange(n)})
        if rng.random() < 0.3:
            t = t.sort_by([("a", "ascending"), ("b", "ascending")])
        if rng.random() < 0.1 and n:
            t = t.set_column(0, "a", pa.array([None] + t.column("a").to_pylist()[1:], pa.string()))
        want = t.sort_by([("a", "ascending"), ("b", "ascending")])
        got = sort_by(t, ["a", "b"])
        assert got.equals(want)
        assert (got is t) == in_key_order(t, ["a", "b"])
        if t.column("a").null_count == 0:
            assert in_key_order(t, ["a", "b"]) == t.equals(want)
    chunked = pa.concat_tables([pa.table({"a": ["x", "y"]}), pa.table({"a": ["y", "z"]})])
    assert sort_by(chunked, ["a"]) is chunked
