"""Stage ``contamination``: the problems to drop before sampling, each with why.

* **Benchmark overlap.** A problem whose normalised question shares an n-gram of ``ngram`` words (13 by
  default, as lm-eval's decontamination) with a benchmark item, or whose whole normalised question equals
  a benchmark item's (this catches items shorter than ``ngram`` words), is dropped with reason
  ``benchmark``, the benchmark's name, the matched item's id and the overlapping words.
* **Duplicates.** Of the problems whose normalised questions are equal, the first (in load order) stays;
  the others are dropped with reason ``duplicate`` and the kept one's id.
* **Near duplicates** (``near_duplicates``, off by default). Of the problems left, one whose normalised
  question is a near duplicate of another's (``bonforge.tables.near_duplicates``: Jaccard similarity of
  word and word-pair sets at least ``threshold``, equal numbers) is dropped with reason ``near_duplicate``
  and the id of the problem it duplicates: the earliest kept one in ``problem_id`` order.

Normalisation: NFKC, lower case, every run of characters that are neither letters nor digits becomes one
space (so whitespace, case, punctuation and LaTeX markup changes do not hide an overlap). ASCII texts take
a byte-map fast path with the same result.

One pass, vectorised: every word of the problems and benchmarks is dictionary-encoded together, each
window of ``ngram`` codes is hashed (64-bit, numpy), the problems' hashes are looked up in the sorted
benchmark hashes, and every hit is confirmed word by word (a hash collision never drops a problem).

``decontaminate`` is a plain function of Arrow tables: ``problems`` (``problem_id``, ``question``) and
benchmark tables (``id``, ``text``) in, ``CONTAMINATION`` out. The stage (a source stage: it loads the
problems as ``problems`` would, and the benchmark lists) runs before ``problems``, which then leaves out
the rows named here; its manifest keeps the counts (``dropped``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.sources import data
from bonforge.config import Benchmark, DecontaminateConfig, NearDuplicatesConfig, ProblemsConfig, Recipe
from bonforge.errors import DataError
from bonforge.tables.near_duplicates import near_duplicates
from bonforge.tables.records import dataset_files, get_field, read_records, require_str
from bonforge.schema import CONTAMINATION
from bonforge.sources.problems import load_problems
from bonforge.stage import Node, Params, Stage, unkeyed

VERSION = "2"  # 2: keyed by the content of the problems' and the benchmarks' sources (a digest cached by stat),
# not their paths: a benchmark list or problem file edited in place is a new input

# One odd 64-bit multiplier per window position (fixed: part of the stage's code, as the version is).
_MULT = np.random.default_rng(0x5EED).integers(1, 2**63, size=64, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _ascii_table() -> np.ndarray:
    """Byte map of the normalisation for ASCII text: letters lower-cased, digits kept, the rest a space."""
    table = np.full(256, ord(" "), dtype=np.uint8)
    for chars in (b"abcdefghijklmnopqrstuvwxyz", b"0123456789"):
        table[list(chars)] = list(chars)
    table[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")] = list(b"abcdefghijklmnopqrstuvwxyz")
    return table


_ASCII = _ascii_table()


def normalized_words(texts: pa.Array) -> pa.ListArray:
    """Each text as its list of normalised words. ASCII texts (NFKC leaves them as they are) go through
    one byte map; the others through NFKC, Unicode lower case and Unicode letter/digit classes."""
    texts = texts.cast(pa.string())
    validity, offsets, data = texts.buffers()
    mapped = pa.py_buffer(_ASCII[np.frombuffer(data or b"", np.uint8)])
    folded = pa.StringArray.from_buffers(len(texts), offsets, mapped, validity, texts.null_count, texts.offset)
    unicode = pc.invert(pc.string_is_ascii(texts)).fill_null(False)
    if pc.any(unicode).as_py():
        other = pc.utf8_lower(pc.utf8_normalize(texts.filter(unicode), "NFKC"))
        folded = pc.replace_with_mask(folded, unicode, pc.replace_substring_regex(other, r"[^\p{L}\p{N}]+", " "))
    spaced = pc.utf8_trim_whitespace(folded)
    return pc.if_else(pc.equal(spaced, ""), pa.scalar([], pa.list_(pa.string())), pc.utf8_split_whitespace(spaced))


def decontaminate(problems: pa.Table, benchmarks: dict[str, pa.Table], ngram: int = 13, dedup: bool = True,
                  near: NearDuplicatesConfig | None = None) -> pa.Table:  # fmt: skip
    """The ``CONTAMINATION`` rows of ``problems`` against ``benchmarks`` (name -> table of ``id``, ``text``)."""
    if not 1 <= ngram <= len(_MULT):
        raise ValueError(f"ngram must be in 1..{len(_MULT)}, got {ngram}")
    ids = problems.column("problem_id").to_pylist()
    bench_names = [name for name, t in benchmarks.items() for _ in range(t.num_rows)]
    bench_ids = [str(i) for t in benchmarks.values() for i in t.column("id").to_pylist()]
    texts = pa.chunked_array([problems.column("question").cast(pa.string())]
                             + [t.column("text").cast(pa.string()) for t in benchmarks.values()]).combine_chunks()
    words = normalized_words(texts)
    n_prob = problems.num_rows
    rows: dict[int, dict] = {}

    def drop(p: int, reason: str, bench: int | None, overlap: str | None, matched: str | None = None) -> None:
        rows.setdefault(p, {"problem_id": ids[p], "reason": reason, "benchmark": bench_names[bench] if bench is not
                            None else None, "matched_id": matched or bench_ids[bench], "overlap": overlap})  # fmt: skip

    for p, b, start in _ngram_hits(words, n_prob, ngram):
        drop(p, "benchmark", b, " ".join(words.values.slice(words.offsets[p].as_py() + start, ngram).to_pylist()))
    joined = pc.binary_join(words, " ")
    problem_text, bench_text = joined.slice(0, n_prob), joined.slice(n_prob)
    equal = pc.index_in(problem_text, value_set=bench_text)
    for p in np.flatnonzero(pc.and_(pc.is_valid(equal), pc.greater(pc.utf8_length(problem_text), 0)).to_numpy(
            zero_copy_only=False)):  # fmt: skip
        drop(int(p), "benchmark", equal[int(p)].as_py(), problem_text[int(p)].as_py())
    if dedup:
        first: dict[str, int] = {}
        for p, text in enumerate(problem_text.to_pylist()):
            if p in rows or not text:
                continue
            if text in first:
                drop(p, "duplicate", None, None, matched=ids[first[text]])
            else:
                first[text] = p
    if near:
        left = np.setdiff1d(np.arange(n_prob), np.fromiter(rows, int, len(rows)))
        for p, kept, _ in near_duplicates(pa.array(ids).take(left), words.take(left), near.threshold, near.num_perm):
            drop(int(left[p]), "near_duplicate", None, None, matched=ids[left[kept]])
    out = [rows[p] for p in sorted(rows)]
    return pa.Table.from_pylist(out, schema=CONTAMINATION)


def _ngram_hits(words: pa.ListArray, n_prob: int, n: int) -> list[tuple[int, int, int]]:
    """``(problem row, benchmark row, word offset in the problem)`` of each problem's first n-gram that
    some benchmark item also has (the first such item in table order). Problems' words come first in
    ``words``, the benchmarks' after them."""
    offsets = words.offsets.to_numpy()
    if len(words.values) < n:
        return []
    codes = pc.dictionary_encode(words.values).indices.to_numpy().astype(np.uint64) + np.uint64(1)
    h = np.zeros(len(codes) - n + 1, dtype=np.uint64)  # the hash of the window starting at each word
    for k in range(n):
        h += codes[k : k + len(h)] * _MULT[k]
    split = offsets[n_prob]  # the first benchmark word
    b_docs = np.arange(n_prob, len(offsets) - 1)
    b_len = np.diff(offsets[n_prob:])
    b_start = np.arange(split, offsets[-1])
    b_start = b_start[b_start + n <= np.repeat(offsets[b_docs + 1], b_len)]  # windows inside one item
    if not len(b_start) or split == 0:
        return []
    b_hash = h[b_start]
    order = np.argsort(b_hash, kind="stable")  # stable: equal hashes keep the first benchmark item first
    b_hash, b_start = b_hash[order], b_start[order]
    p_hash = h[: min(split, len(h))]
    bits = np.zeros(1 << 24, dtype=bool)  # a one-hash Bloom filter: most problem windows stop here
    bits[b_hash & np.uint64((1 << 24) - 1)] = True
    p_start = np.flatnonzero(bits[p_hash & np.uint64((1 << 24) - 1)])
    at = np.minimum(np.searchsorted(b_hash, p_hash[p_start]), len(b_hash) - 1)
    hit = b_hash[at] == p_hash[p_start]
    p_start, b_start = p_start[hit], b_start[at[hit]]
    p_doc = np.searchsorted(offsets, p_start, side="right") - 1
    window = np.arange(n)
    inside = (p_doc >= 0) & (p_start + n <= offsets[p_doc + 1])  # inside one problem's words
    same = inside & (codes[p_start[:, None] + window] == codes[b_start[:, None] + window]).all(axis=1)
    p_start, b_start, p_doc = p_start[same], b_start[same], p_doc[same]
    _, first = np.unique(p_doc, return_index=True)  # p_start ascends: the first hit of each problem
    b_doc = np.searchsorted(offsets, b_start[first], side="right") - 1 - n_prob
    return [(int(p_doc[i]), int(b), int(p_start[i] - offsets[p_doc[i]])) for i, b in zip(first, b_doc)]


def benchmark_table(bench: Benchmark, path: Path) -> pa.Table:
    """A benchmark's items as ``(id, text)``: ``bench.field`` holds the question, ``bench.id`` the id (else
    ``<name>/<row>``)."""
    ids, texts = [], []
    for file in dataset_files(path, bench.files, bench.split):
        src = str(file)
        for n, rec in read_records(file, bench.source.byte_limits()):
            where = f"{'row' if file.suffix in ('.parquet', '.arrow') else 'line'} {n}"
            texts.append(require_str(get_field(rec, bench.field, source=src, record=where), source=src, record=where,
                                     field=bench.field))  # fmt: skip
            ids.append(str(get_field(rec, bench.id, source=src, record=where)) if bench.id
                       else f"{bench.name}/{len(ids):05d}")  # fmt: skip
    if not ids:
        raise DataError("the benchmark has no items", str(path), field=bench.name)
    return pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string())})


def _compute(_: pa.Table, problems: ProblemsConfig, cfg: DecontaminateConfig, recipe_dir: Path,
             contents: dict) -> pa.Table:  # fmt: skip
    loaded = load_problems(problems, data.resolve(problems.source, recipe_dir))
    benches = {b.name: benchmark_table(b, data.resolve(b.source, recipe_dir)) for b in cfg.benchmarks}
    for src, content in zip([problems.source] + [b.source for b in cfg.benchmarks], contents["sources"]):
        data.unchanged(src, recipe_dir, content)
    return decontaminate(loaded.select(["problem_id", "question"]), benches, cfg.ngram, cfg.dedup, cfg.near_duplicates)


def summary(table: pa.Table) -> dict:
    """Counts for the manifest and the report: dropped problems per benchmark, duplicates and near duplicates."""
    counts: dict[str, int] = {}
    for reason, bench in zip(table.column("reason").to_pylist(), table.column("benchmark").to_pylist()):
        key = bench if reason == "benchmark" else reason
        counts[key] = counts.get(key, 0) + 1
    return {"dropped": dict(sorted(counts.items()))}


@dataclass(frozen=True)
class DecontaminateParams(Params):
    problems: ProblemsConfig
    cfg: DecontaminateConfig
    recipe_dir: Path = unkeyed()
    contents: dict = unkeyed()  # {"sources": [the problems' content key, each benchmark's]} (``data.content_key``)

    def key_config(self) -> dict:
        problems, *benches = self.contents["sources"]
        cfg = self.cfg.key_config()
        cfg["benchmarks"] = [data.keyed(b, c) for b, c in zip(self.cfg.benchmarks, benches)]
        return {"problems": data.keyed(self.problems, problems), "decontaminate": cfg}


STAGE = Stage("contamination", VERSION, params=DecontaminateParams, schema=CONTAMINATION, compute=_compute, early=True,
              summary=lambda w: summary(w.read(["reason", "benchmark"])))


def node(recipe: Recipe, recipe_dir: Path) -> Node:
    """Keyed by the content of the problems' and benchmarks' sources, the mapping and the settings."""
    sources = [recipe.problems.source] + [b.source for b in recipe.decontaminate.benchmarks]
    contents = {"sources": [data.content_key(s, recipe_dir) for s in sources]}
    return STAGE.bind(DecontaminateParams(recipe.problems, recipe.decontaminate, recipe_dir, contents), {})
