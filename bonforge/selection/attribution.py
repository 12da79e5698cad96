"""Which teacher wrote which part of a fused answer.

Every character of the fused text is attributed to the source whose text contains the longest matching
span (a substring of the fused text found verbatim in that source) covering the character. Spans shorter
than ``min_span`` characters do not count: short strings (" the ", "= 4") occur everywhere and prove
nothing. A character whose longest covering span is shared by several sources is ``multiple``; one
covered by no span of at least ``min_span`` characters is ``unmatched``.

The longest match ending at each position is found with a suffix automaton of the source (linear time);
only right-maximal matches are painted onto the characters they cover.
"""

from __future__ import annotations

import numpy as np

MULTIPLE, UNMATCHED = "multiple", "unmatched"


class _SuffixAutomaton:
    def __init__(self, text: str):
        self.next: list[dict[str, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        last = 0
        for ch in text:
            cur = len(self.next)
            self.next.append({})
            self.length.append(self.length[last] + 1)
            self.link.append(0)
            p = last
            while p != -1 and ch not in self.next[p]:
                self.next[p][ch] = cur
                p = self.link[p]
            if p != -1:
                q = self.next[p][ch]
                if self.length[p] + 1 == self.length[q]:
                    self.link[cur] = q
                else:
                    clone = len(self.next)
                    self.next.append(dict(self.next[q]))
                    self.length.append(self.length[p] + 1)
                    self.link.append(self.link[q])
                    while p != -1 and self.next[p].get(ch) == q:
                        self.next[p][ch] = clone
                        p = self.link[p]
                    self.link[q] = self.link[cur] = clone
            last = cur

    def match_lengths(self, text: str) -> np.ndarray:
        """``out[j]`` = length of the longest substring of ``text`` ending at ``j`` found in the source."""
        out = np.zeros(len(text), dtype=np.int64)
        state, length = 0, 0
        for j, ch in enumerate(text):
            while state and ch not in self.next[state]:
                state = self.link[state]
                length = self.length[state]
            if ch in self.next[state]:
                state = self.next[state][ch]
                length += 1
            else:
                state, length = 0, 0
            out[j] = length
        return out


def coverage(fused: str, source: str, min_span: int) -> np.ndarray:
    """For each character of ``fused``, the longest span (>= min_span) from ``source`` covering it, else 0."""
    cover = np.zeros(len(fused), dtype=np.int64)
    if not fused or not source:
        return cover
    ends = _SuffixAutomaton(source).match_lengths(fused)
    right_maximal = np.ones(len(fused), dtype=bool)
    right_maximal[:-1] = ends[1:] != ends[:-1] + 1
    for j in np.flatnonzero(right_maximal & (ends >= min_span)):
        length = ends[j]
        seg = cover[j - length + 1 : j + 1]
        np.maximum(seg, length, out=seg)
    return cover


def attribute(fused: str, sources: list[tuple[str, str]], min_span: int = 16) -> list[str]:
    """The owner of each character of ``fused`` given ``(owner, text)`` sources (an owner may have several
    texts): an owner name, ``multiple`` or ``unmatched``."""
    owners = sorted({o for o, _ in sources})
    if not fused:
        return []
    best = np.zeros((len(owners), len(fused)), dtype=np.int64)
    for owner, text in sources:
        row = best[owners.index(owner)]
        np.maximum(row, coverage(fused, text, min_span), out=row)
    top = best.max(axis=0) if owners else np.zeros(len(fused), dtype=np.int64)
    winners = (best == top) & (top > 0)
    n_win = winners.sum(axis=0)
    out = []
    for i in range(len(fused)):
        if n_win[i] == 0:
            out.append(UNMATCHED)
        elif n_win[i] > 1:
            out.append(MULTIPLE)
        else:
            out.append(owners[int(np.argmax(winners[:, i]))])
    return out


def counts(labels: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for label in labels:
        out[label] = out.get(label, 0) + 1
    return out
