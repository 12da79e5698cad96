"""Near-duplicate texts: MinHash over word shingles, LSH banding, every candidate pair checked exactly.

A text is its normalised words (the caller's normalisation); its **shingles** are its pairs of adjacent
words (a one-word text: its word), each hashed to 64 bits (a stable hash of the word, so the result never
depends on the input's order or on the process). Pairs keep word order (``a gives b`` is not ``b gives
a``) and a one-word rewording of a 40-word question near 0.9 (n words: (n - 3) / (n + 1)); words and pairs
together gave about the same similarities (0.92 for 0.90 on a 44-word question) for twice the hashing.

**Numbers are the point** of a maths problem: two texts are near duplicates only if their multisets of
words with a digit are equal (``17 + 25`` and ``18 + 25``, ``2x + 3`` and ``5x + 3`` never are, however long
the rest); this gate is part of every band's key, so a table of one template with a million different
numbers yields no candidate pair.

MinHash: ``num_perm`` hash functions ``(a·x + b) mod 2**32`` (``a`` odd: a permutation of the 32-bit
values) over the shingles' 32-bit hashes, vectorised in blocks that fit the cache. LSH: ``bands`` ×
``rows`` from the threshold (the split that minimises the missed and the extra candidate areas under the
S-curve). Candidates: each text in a bucket with the bucket's earliest text. Each candidate pair's Jaccard
is computed exactly on the 64-bit shingle sets; a pair below ``threshold`` is never merged.

Which text stays: texts are taken in ``ids`` order; a text is dropped in favour of the earliest kept text it
is a verified near duplicate of (if its candidate was itself dropped, the one that one was dropped for is
checked), so every drop names a kept text and the result does not depend on the rows' order. Texts with
equal words are grouped first (one MinHash each). Empty texts are never near duplicates.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Fixed odd multipliers (part of the code, as a stage's version is): word, pair (two), number.
_MULT = np.random.default_rng(0x5EED_D0C).integers(1, 2**63, size=4, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
_BLOCK = 1024  # shingles per MinHash block: (block, num_perm) uint32 stays in the cache
_CHUNK = 1 << 18  # shingles per chunk of texts a thread takes


def bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimising the area of missed pairs (similarity
    above ``threshold``, never a candidate) weighted 0.97 plus the area of extra candidates (below it) weighted
    0.03: an extra candidate costs one exact check, a missed one a duplicate kept. At 0.85 and 128: 14 × 9, a
    pair at the threshold is a candidate with probability 0.975, at 0.87 0.991, at 0.7 0.44, at 0.6 0.13."""
    s = np.linspace(0, 1, 1001)
    best = None
    for b in range(1, num_perm + 1):
        r = num_perm // b
        p = 1 - (1 - s**r) ** b
        cost = np.trapezoid(np.where(s < threshold, 0.03 * p, 0.97 * (1 - p)), s)
        if best is None or cost < best[0]:
            best = (cost, b, r)
    return best[1], best[2]


def _word_hashes(words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Each word's stable 64-bit hash and whether it holds a digit (``17``, ``2x``, ``x2`` for ``x²``)."""
    enc = pc.dictionary_encode(words)
    vocab = enc.dictionary.to_pylist()
    h = np.array([int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") for w in vocab],
                 dtype=np.uint64)  # fmt: skip
    digit = pc.match_substring_regex(enc.dictionary, r"\p{N}").to_numpy(zero_copy_only=False)
    codes = enc.indices.to_numpy()
    return h[codes], digit[codes]


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (splitmix64's), in place: spreads every input bit over the output."""
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        x ^= x >> np.uint64(shift)
        x *= np.uint64(mult)
    x ^= x >> np.uint64(31)
    return x


class _Texts:
    """The shingles of texts (``offsets`` into ``shingles``, grouped by text) and each text's number key."""

    def __init__(self, words: pa.ListArray):
        lengths = pc.list_value_length(words).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        tok, is_num = _word_hashes(pc.list_flatten(words))
        ends = np.cumsum(lengths)
        at = np.flatnonzero(is_num)
        self.numbers = np.zeros(len(words), np.uint64)  # the sum of the number words' mixed hashes: a multiset key
        np.add.at(self.numbers, np.searchsorted(ends, at, side="right"), _mix(tok[at] ^ _MULT[3]))
        sh = np.empty(len(tok), np.uint64)  # the pair each word starts; a one-word text: its word
        pair = tok[:-1] * _MULT[1]
        pair += tok[1:] * _MULT[2]
        sh[:-1] = _mix(pair)
        del pair
        last = ends[lengths > 0] - 1  # the last word of a text starts no pair
        alone = last[lengths[lengths > 0] == 1]
        sh[alone] = _mix(tok[alone] * _MULT[0])
        keep = np.ones(len(sh), bool)
        keep[last] = False
        keep[alone] = True
        self.shingles = sh[keep]
        self.offsets = np.concatenate([[0], np.cumsum(lengths - (lengths > 1))])

    def sets(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sorted distinct shingles of ``docs``: ``(offsets, values)``."""
        starts, ends = self.offsets[docs], self.offsets[docs + 1]
        owner = np.repeat(np.arange(len(docs)), ends - starts)
        values = self.shingles[_ranges(starts, ends)]
        order = np.lexsort((values, owner))
        owner, values = owner[order], values[order]
        new = np.ones(len(values), bool)
        new[1:] = (owner[1:] != owner[:-1]) | (values[1:] != values[:-1])
        counts = np.bincount(owner[new], minlength=len(docs))
        return np.concatenate([[0], np.cumsum(counts)]), values[new]


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, e)`` for each pair."""
    lengths = ends - starts
    idx = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return idx + np.repeat(starts, lengths)


def _signatures(texts: _Texts, lo: int, hi: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The MinHash signatures (``hi - lo`` × ``num_perm``, uint32) of texts ``lo..hi``."""
    sig = np.full((hi - lo, len(a)), np.iinfo(np.uint32).max, np.uint32)
    first, last = texts.offsets[lo], texts.offsets[hi]
    x = (texts.shingles[first:last] >> np.uint64(32)).astype(np.uint32)
    starts = texts.offsets[lo:hi] - first
    buf = np.empty((_BLOCK, len(a)), np.uint32)
    for at in range(0, len(x), _BLOCK):
        block = x[at : at + _BLOCK]
        out = buf[: len(block)]
        np.multiply(block[:, None], a, out=out)
        np.add(out, b, out=out)
        # segments: the texts that start inside the block, and the one running into it
        seg = np.unique(np.concatenate([[0], starts[(starts > at) & (starts < at + len(block))] - at]))
        owner = np.searchsorted(starts, seg + at, side="right") - 1
        sig[owner] = np.minimum(sig[owner], np.minimum.reduceat(out, seg, axis=0))
    return sig


def _band_keys(texts: _Texts, n_bands: int, rows: int, num_perm: int) -> np.ndarray:
    """Each text's key in each band (texts × bands, uint64): its band of the signature and its numbers."""
    rng = np.random.default_rng(0xB0B)
    used = n_bands * rows  # the functions past the last whole band are never read: not computed
    a = (rng.integers(0, 2**31, num_perm) * 2 + 1).astype(np.uint32)[:used]
    b = rng.integers(0, 2**32, num_perm, dtype=np.uint64).astype(np.uint32)[:used]
    mult = rng.integers(1, 2**63, size=rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    n = len(texts.offsets) - 1
    cuts = [0]  # chunks of texts of about _CHUNK shingles (a longer text alone)
    while cuts[-1] < n:
        cuts.append(max(cuts[-1] + 1, int(np.searchsorted(texts.offsets, texts.offsets[cuts[-1]] + _CHUNK))))
        cuts[-1] = min(cuts[-1], n)
    keys = np.empty((n, n_bands), np.uint64)

    def run(lo: int, hi: int) -> None:
        sig = _signatures(texts, lo, hi, a, b).reshape(hi - lo, n_bands, rows)
        k = (sig.astype(np.uint64) * mult).sum(axis=2, dtype=np.uint64)
        keys[lo:hi] = _mix(k + np.arange(n_bands, dtype=np.uint64) * _MULT[0] + texts.numbers[lo:hi, None])

    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        list(pool.map(lambda c: run(*c), zip(cuts[:-1], cuts[1:])))
    return keys


def _candidates(keys: np.ndarray, live: np.ndarray) -> np.ndarray:
    """``(later, earlier)`` pairs of texts sharing a bucket in some band: each with its bucket's first."""
    docs = np.flatnonzero(live)
    pairs = []
    for band in keys[docs].T:
        order = np.argsort(band, kind="stable")
        sorted_keys = band[order]
        start = np.ones(len(order), bool)
        start[1:] = sorted_keys[1:] != sorted_keys[:-1]
        leader = order[np.maximum.accumulate(np.where(start, np.arange(len(order)), 0))]
        member = ~start
        pairs.append(np.stack([docs[order[member]], docs[leader[member]]], axis=1))
    code = np.unique(np.concatenate([p[:, 0] * len(keys) + p[:, 1] for p in pairs] or [np.empty(0, np.int64)]))
    return np.stack([code // len(keys), code % len(keys)], axis=1)


def _jaccard(texts: _Texts, pairs: np.ndarray) -> np.ndarray:
    """The exact Jaccard similarity of each pair's shingle sets."""
    out = np.empty(len(pairs))
    step = max(1, _CHUNK // 64)
    for at in range(0, len(pairs), step):
        chunk = pairs[at : at + step]
        docs, inverse = np.unique(chunk, return_inverse=True)
        offsets, values = texts.sets(docs)
        left, right = inverse.reshape(-1, 2).T
        size_l, size_r = np.diff(offsets)[left], np.diff(offsets)[right]
        owner = np.concatenate([np.repeat(np.arange(len(chunk)), size_l), np.repeat(np.arange(len(chunk)), size_r)])
        vals = np.concatenate([values[_ranges(offsets[left], offsets[left + 1])],
                               values[_ranges(offsets[right], offsets[right + 1])]])  # fmt: skip
        order = np.lexsort((vals, owner))
        owner, vals = owner[order], vals[order]
        both = (owner[1:] == owner[:-1]) & (vals[1:] == vals[:-1])
        inter = np.bincount(owner[1:][both], minlength=len(chunk))
        out[at : at + len(chunk)] = inter / (size_l + size_r - inter)
    return out


def near_duplicates(ids: pa.Array, words: pa.ListArray, threshold: float = 0.85,
                    num_perm: int = 128) -> list[tuple[int, int, float]]:  # fmt: skip
    """``(row, kept row, Jaccard)`` for each row of ``words`` (normalised texts, ``ids`` beside them) that
    is a near duplicate of a kept row, in row order."""
    if len(words) == 0:
        return []
    by_id = pa.table({"id": ids, "row": np.arange(len(ids))})
    rank = pc.sort_indices(by_id, [("id", "ascending"), ("row", "ascending")]).to_numpy()
    group = pc.dictionary_encode(pc.binary_join(words, " ").take(rank)).indices.to_numpy()  # by id order
    _, first = np.unique(group, return_index=True)
    first = np.sort(first)  # one text per group of equal words, the earliest: the texts, in id order
    text = np.empty(len(first), np.int64)
    text[group[first]] = np.arange(len(first))
    text = text[group]  # each position's text
    texts = _Texts(words.take(rank[first]))
    live = np.diff(texts.offsets) > 0
    n_bands, rows = bands(threshold, num_perm)
    pairs = _candidates(_band_keys(texts, n_bands, rows, num_perm), live)
    sim = _jaccard(texts, pairs)
    ok = (sim >= threshold) & (texts.numbers[pairs[:, 0]] == texts.numbers[pairs[:, 1]])
    partners: dict[int, list[tuple[int, float]]] = {}
    for p, q, s in zip(pairs[ok, 0].tolist(), pairs[ok, 1].tolist(), sim[ok].tolist()):
        partners.setdefault(p, []).append((q, s))
    kept_for: dict[int, tuple[int, float]] = {}  # dropped text -> (the kept text, Jaccard)
    for p in sorted(partners):
        for q, s in sorted(partners[p]):
            if q not in kept_for:
                kept_for[p] = (q, s)
                break
        else:
            for r in sorted({kept_for[q][0] for q, _ in partners[p]}):
                s = float(_jaccard(texts, np.array([[p, r]]))[0])
                if s >= threshold and texts.numbers[p] == texts.numbers[r]:
                    kept_for[p] = (r, s)
                    break
    kept = np.arange(len(first))  # each text's kept text
    sims = np.ones(len(first))
    for t, (k, s) in kept_for.items():
        kept[t], sims[t] = k, s
    kept_rows = rank[first[kept[text]]]
    dropped = np.flatnonzero(live[text] & (rank != kept_rows))
    order = np.argsort(rank[dropped])
    return list(zip(rank[dropped][order].tolist(), kept_rows[dropped][order].tolist(),
                    sims[text[dropped]][order].tolist()))
