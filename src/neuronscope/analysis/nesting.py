"""Who-contains-whom for CPU events, computed without a per-event Python loop.

torch builds the op tree with a per-thread stack over ``FunctionEvent`` objects. We get the
same parent for every event from sorted int64 columns (numpy):

* sort each thread's events by (start, -end), as torch does;
* depth(i) = number of earlier events of the thread still open when i starts
  (= i's thread-local position minus the earlier events that ended by then);
* parent(i) = the last earlier event at depth(i) - 1 — with properly nested intervals that
  is exactly the innermost enclosing one.

Partially overlapping intervals on one thread (never produced by the dispatcher for
synchronous ops) would be attributed slightly differently from torch; everything else,
including zero-length events and events that touch end-to-start, matches.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Nesting", "nest", "nest_kinds"]

# Thread index and relative time share one int64 sort key: 2**44 ns ≈ 4.9 h of profile per
# thread, up to 2**19 distinct threads.
_TIME_BITS = 44


@dataclass(frozen=True)
class Nesting:
    """Result of :func:`nest`, all tensors aligned with the ``order`` passed back."""

    order: np.ndarray  #: positions into the input columns, sorted by (thread, start, -end)
    parent: np.ndarray  #: parent as a position into ``order`` (-1 for roots)
    depth: np.ndarray


def nest(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> Nesting:
    """Compute parent and depth of each interval, per thread."""
    thread = np.asarray(thread, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = int(start.size)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return Nesting(empty, empty, empty)
    _, dense_thread = np.unique(thread, return_inverse=True)
    dense_thread = dense_thread.reshape(-1).astype(np.int64)
    t0 = int(start.min())
    rel_start = start - t0
    rel_end = end - t0
    if int(rel_end.max()) >= 1 << _TIME_BITS:
        raise ValueError("a single profile longer than 4.9 hours is not supported")

    # Sort by (thread, start, -end) with two stable sorts -- unless the events already come in
    # that order (a single-threaded Kineto trace usually does), which one pass checks.
    thread_base = dense_thread << _TIME_BITS
    key_start = thread_base + rel_start
    step = key_start[1:] - key_start[:-1]
    if bool(((step > 0) | ((step == 0) & (rel_end[1:] <= rel_end[:-1]))).all()):
        order = np.arange(n, dtype=np.int64)
    else:
        order = np.argsort(-rel_end, kind="stable")
        order = order[np.argsort(key_start[order], kind="stable")]
        key_start = key_start[order]
    key_end_sorted = np.sort((thread_base + rel_end)[order])
    t_sorted = thread_base[order]
    s_sorted = rel_start[order]
    e_sorted = rel_end[order]

    pos = np.arange(n, dtype=np.int64)
    first_of_thread = np.searchsorted(key_start, t_sorted)  # key_start of a thread starts at t<<bits
    local = pos - first_of_thread
    ended_by_start = np.searchsorted(key_end_sorted, key_start, side="right") - first_of_thread
    # Zero-length events at the same instant sort after i and "end" by i's start without
    # preceding it; they must not be subtracted.
    zero = s_sorted == e_sorted
    zero_keys = key_start[zero]
    zero_at_start = np.searchsorted(zero_keys, key_start, side="right") - np.searchsorted(zero_keys, key_start)
    last_same_start = np.searchsorted(key_start, key_start, side="right") - 1
    zero_after = np.where(zero, last_same_start - pos + 1, zero_at_start)
    depth = np.maximum(local - (ended_by_start - zero_after), 0)

    # parent = last earlier position with depth - 1 (searching keys depth * n + pos).
    depth_order = np.argsort(depth * n + pos, kind="stable")
    depth_key = (depth * n + pos)[depth_order]
    query = (depth - 1) * n + pos
    hit = np.searchsorted(depth_key, query) - 1
    hit_ok = (depth > 0) & (hit >= 0)
    hit = np.maximum(hit, 0)
    cand = depth_order[hit]
    parent = np.where(hit_ok & (depth[cand] == depth - 1), cand, -1)
    # Guard against malformed (partially overlapping) input: a parent must be on the same thread.
    parent = np.where((parent >= 0) & (t_sorted[np.maximum(parent, 0)] != t_sorted), -1, parent)
    depth = np.where(parent < 0, 0, depth)
    return Nesting(order=order, parent=parent, depth=depth)


# The last trace's nestings by kinds: the summary nests the CPU events and the memory stage
# needs the same tree right after (one slot, so at most one trace's arrays stay alive).
_last: tuple[Any, dict[tuple[int, ...], tuple[np.ndarray, Nesting]]] = (None, {})
_lock = threading.Lock()


def nest_kinds(trace: Any, kinds: tuple[int, ...]) -> tuple[np.ndarray, Nesting]:
    """The positions of ``trace``'s events of ``kinds`` and their :func:`nest` (of start and
    start + duration per thread), computed once per trace and kinds. Read-only arrays."""
    key = tuple(sorted(int(k) for k in kinds))
    with _lock:
        ref, found = _last
        if ref is not None and ref() is trace and key in found:
            return found[key]
    pos = np.flatnonzero(np.isin(trace.kind, key))
    start = trace.start_ns[pos]
    nesting = nest(trace.thread[pos], start, start + trace.duration_ns[pos])
    for a in (pos, nesting.order, nesting.parent, nesting.depth):
        a.flags.writeable = False
    with _lock:
        _set(trace, key, (pos, nesting))
    return pos, nesting


def _set(trace: Any, key: tuple[int, ...], value: tuple[np.ndarray, Nesting]) -> None:
    global _last
    ref, found = _last
    if ref is None or ref() is not trace:
        try:
            ref, found = weakref.ref(trace), {}
        except TypeError:  # not weak-referenceable: not kept
            return
    found[key] = value
    _last = (ref, found)
