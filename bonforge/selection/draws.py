"""GenSelect's candidate draws for many problems at once, in numpy, equal to drawing each problem on its
own with ``random.Random`` (``stages.assemble._draws``: choice of a size, choice of a number correct,
``sample`` of the correct and of the wrong candidates, ``shuffle``).

Each problem has its own generator (seeded by its name), so the problems can advance side by side: a
step draws one number below ``n`` for every problem that needs one, from each problem's own stream of
32-bit outputs, as ``Random._randbelow`` does (the top ``n.bit_length()`` bits of the next output, again
while not below ``n``). ``Random.sample`` of at most 21 items takes its pool branch (``pool[j]`` then the
pool's last unused item moved into ``j``), ``shuffle`` swaps from the end. A problem whose pools are
larger is left to the caller (``SMALL``).
"""

from __future__ import annotations

import random

import numpy as np

SMALL = 21  # random.Random.sample takes its pool branch for populations up to this size
_WORDS = 192  # 32-bit outputs taken from each generator at a time
_FEW = 50  # the side-by-side draws stop once fewer than 1 in _FEW problems lack draws
_SHIFT = np.array([32 - n.bit_length() for n in range(1 << 10)], dtype=np.int64)


class _Streams:
    """Each problem's stream of 32-bit outputs, drawn ``below`` numbers at a time."""

    def __init__(self, seeds: list[str]):
        self.rngs = [random.Random(s) for s in seeds]
        self.words = np.zeros((len(seeds), 0), dtype=np.int64)
        self.cur = np.zeros(len(seeds), dtype=np.int64)
        self._more()

    def _more(self) -> None:
        block = b"".join(r.getrandbits(32 * _WORDS).to_bytes(4 * _WORDS, "little") for r in self.rngs)
        more = np.frombuffer(block, "<u4").reshape(len(self.rngs), _WORDS).astype(np.int64)
        self.words = np.hstack([self.words, more])
        self.width, self.flat = self.words.shape[1], self.words.ravel()

    def below(self, n: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """For each problem of ``rows``, ``Random._randbelow(n)`` of its generator."""
        shift, cur = _SHIFT[n], self.cur[rows]
        todo = np.arange(len(rows))
        r = np.empty(len(rows), dtype=np.int64)
        while len(todo):
            if cur[todo].max() >= self.width:
                self._more()
            r[todo] = self.flat[rows[todo] * self.width + cur[todo]] >> shift[todo]
            cur[todo] += 1
            todo = todo[r[todo] >= n[todo]]
        self.cur[rows] = cur
        return r


def _menus(shapes: list[tuple[int, int]], menu) -> tuple[np.ndarray, ...]:
    """Per pool shape (n_correct, n_wrong): its sizes (padded), their number, and per size the numbers of
    correct candidates (padded) and their number."""
    sizes = np.zeros((len(shapes), 2 * SMALL + 1), dtype=np.int64)
    n_sizes = np.zeros(len(shapes), dtype=np.int64)
    counts = np.zeros((len(shapes), 2 * SMALL + 1, SMALL + 1), dtype=np.int64)
    n_counts = np.zeros((len(shapes), 2 * SMALL + 1), dtype=np.int64)
    for s, shape in enumerate(shapes):
        ms, by_m = menu(*shape)
        sizes[s, :len(ms)], n_sizes[s] = ms, len(ms)
        for m in ms:
            counts[s, m, :len(by_m[m])], n_counts[s, m] = by_m[m], len(by_m[m])
    return sizes, n_sizes, counts, n_counts


def draw_many(seeds: list[str], good: np.ndarray, bad: np.ndarray, nc: np.ndarray, nw: np.ndarray, menu,
              tries: int, want: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each problem (its generator's seed; its correct and wrong row numbers, the first ``nc`` and ``nw``
    of each row of ``good`` and ``bad``, at most SMALL of each; a non-empty ``menu(nc, nw)``, which is
    ``assemble._menu``): its first distinct draws (distinct as sets), as many as it takes ``want`` of them
    or ``tries`` draws; once few problems are left, the rest stop early (their generators' later draws are
    the caller's: they are few). Returns the draws' row numbers in prompt order (problem x draw x place, -1
    past a draw's size), how many draws each problem found and how many it took."""
    p = len(seeds)
    if not p:
        return np.zeros((0, want, 1), dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    streams = _Streams(seeds)
    shapes, shape = np.unique(np.stack([nc, nw], axis=1), axis=0, return_inverse=True)
    menus = _menus([tuple(s) for s in shapes.tolist()], menu)
    width = int(menus[0].max(initial=1))
    place = np.arange(SMALL)
    # candidates as codes: correct ones 0.., wrong ones SMALL..; a set of codes is a bit mask
    codes_good = np.where(place < nc[:, None], place, -1)
    codes_bad = np.where(place < nw[:, None], SMALL + place, -1)
    drawn = np.full((p, want, width), -1, dtype=np.int64)
    keys = np.full((p, want), -1, dtype=np.int64)
    found, used = np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64)
    active = np.arange(p)
    while len(active):
        chosen = _draw(streams, active, shape[active], nc[active], nw[active], codes_good[active],
                       codes_bad[active], menus)
        key = np.where(chosen >= 0, np.left_shift(1, np.maximum(chosen, 0)), 0).sum(axis=1)
        used[active] += 1
        new = ~(keys[active] == key[:, None]).any(axis=1)
        g = active[new]
        keys[g, found[g]] = key[new]
        drawn[g, found[g], :chosen.shape[1]] = chosen[new]
        found[g] += 1
        active = active[(found[active] < want) & (used[active] < tries)]
        if len(active) * _FEW < p:
            break
    rows = np.where(drawn < SMALL, np.take_along_axis(good, np.clip(drawn, 0, SMALL - 1).reshape(p, -1), 1)
                    .reshape(drawn.shape),
                    np.take_along_axis(bad, np.clip(drawn - SMALL, 0, SMALL - 1).reshape(p, -1), 1)
                    .reshape(drawn.shape))
    return np.where(drawn >= 0, rows, -1), found, used


def _draw(streams: _Streams, rows, shape, nc, nw, good, bad, menus) -> np.ndarray:
    """One draw of each problem of ``rows``: its codes in prompt order (-1 past its size)."""
    sizes, n_sizes, counts, n_counts = menus
    at = np.arange(len(rows))
    m = sizes[shape, streams.below(n_sizes[shape], rows)]
    c = counts[shape, m, streams.below(n_counts[shape, m], rows)]
    chosen = np.full((len(rows), max(int(m.max(initial=0)), 1)), -1, dtype=np.int64)
    for pool, n, k, first in ((good.copy(), nc, c, np.zeros_like(c)), (bad.copy(), nw, m - c, c)):  # sample
        for i in range(int(k.max(initial=0))):
            a = at[k > i]
            j = streams.below(n[a] - i, rows[a])
            chosen[a, first[a] + i] = pool[a, j]
            pool[a, j] = pool[a, n[a] - i - 1]
    for i in range(chosen.shape[1] - 1, 0, -1):  # Random.shuffle
        a = at[m - 1 >= i]
        j = streams.below(np.full(len(a), i + 1), rows[a])
        held = chosen[a, i].copy()
        chosen[a, i] = chosen[a, j]
        chosen[a, j] = held
    return chosen
