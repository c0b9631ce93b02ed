"""Interval arithmetic on int64 ns columns: unions, complements, overlaps, time bins.

Everything is half-open ``[start, end)`` and vectorised with numpy; no per-interval Python
loop, so it stays linear (plus one sort) in the number of events.
"""

from __future__ import annotations

import numpy as np

__all__ = ["busy_bins", "clip", "complement", "overlap_with", "subtract", "union"]


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint, sorted ones (touching intervals merge)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    keep = end > start
    start, end = start[keep], end[keep]
    if start.size == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # a new merged interval starts where an interval begins after everything before it ended
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def clip(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to ``[lo, hi)``; empty ones dropped."""
    s = np.maximum(start, lo)
    e = np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


def complement(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ``[lo, hi)`` that disjoint sorted intervals (from :func:`union`) leave uncovered."""
    s, e = clip(start, end, lo, hi)
    gap_s = np.concatenate(([lo], e))
    gap_e = np.concatenate((s, [hi]))
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def subtract(start: np.ndarray, end: np.ndarray, cut_s: np.ndarray, cut_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals minus other disjoint sorted intervals (both from :func:`union`)."""
    if cut_s.size == 0 or start.size == 0:
        return start, end
    # sweep: +1 where a kept interval opens, -1 where it closes; -1 where a cut opens, +1 where it
    # closes; what stays is where the running sum is 1. At equal times, closings go first.
    times = np.concatenate((start, end, cut_s, cut_e))
    delta = np.concatenate((np.ones_like(start), -np.ones_like(end), -np.ones_like(cut_s), np.ones_like(cut_e)))
    order = np.lexsort((delta, times))
    t, depth = times[order], np.cumsum(delta[order])
    on = depth == 1
    # an interval of the result runs from each step that reaches 1 to the next step
    s, e = t[:-1][on[:-1]], t[1:][on[:-1]]
    return union(s, e)


def overlap_with(qs: np.ndarray, qe: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """For each query interval, how much of it disjoint sorted intervals ``[us, ue)`` cover."""
    qs = np.asarray(qs, dtype=np.int64)
    qe = np.asarray(qe, dtype=np.int64)
    if us.size == 0 or qs.size == 0:
        return np.zeros(qs.size, dtype=np.int64)
    # covered(t) = measure of the union in (-inf, t): a prefix sum evaluated at any t
    lengths = ue - us
    cum = np.concatenate(([0], np.cumsum(lengths)))

    def covered(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        base = cum[np.maximum(i - 1, 0)]
        inside = np.where(i > 0, np.minimum(t, ue[np.maximum(i - 1, 0)]) - us[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, base + np.maximum(inside, 0), 0)

    return covered(qe) - covered(qs)


def busy_bins(start: np.ndarray, end: np.ndarray, t0: int, span: int, n: int) -> np.ndarray:
    """Fraction of each of ``n`` equal bins of ``[t0, t0+span)`` covered by the intervals
    (overlapping intervals may add up past 1; the result is clipped to 0..1)."""
    out = np.zeros(n, dtype=np.float64)
    if start.size == 0 or n <= 0 or span <= 0:
        return out
    s = (np.asarray(start) - t0).astype(np.float64) / span * n
    e = (np.asarray(end) - t0).astype(np.float64) / span * n
    s, e = np.clip(s, 0, n), np.clip(e, 0, n)
    b0 = np.clip(np.floor(s).astype(np.int64), 0, n - 1)
    b1 = np.clip(np.floor(e).astype(np.int64), 0, n - 1)
    same = b0 == b1
    np.add.at(out, b0[same], (e - s)[same])
    many = ~same
    np.add.at(out, b0[many], (b0[many] + 1) - s[many])
    np.add.at(out, b1[many], e[many] - b1[many])
    cover = np.zeros(n + 1, dtype=np.float64)  # bins strictly inside an interval are full
    np.add.at(cover, b0[many] + 1, 1.0)
    np.add.at(cover, b1[many], -1.0)
    out += np.cumsum(cover)[:n]
    return np.clip(out, 0.0, 1.0)
