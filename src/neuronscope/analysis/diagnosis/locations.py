"""Where in the user's code an op was called from: ``file:line (func)``, from the Python events of a
trace recorded with ``with_stack=True``. The line is the one that made the call (:mod:`..callsite`),
not the first line of its function; :class:`PythonIndex` makes each lookup a ``searchsorted`` slice."""

from __future__ import annotations

import weakref

import numpy as np

from ...trace.kinds import EventKind
from ...trace.model import Trace
from ..callsite import frame_line, with_line
from .categories import user_frame

__all__ = ["PythonIndex", "call_site", "source_of"]


def source_of(trace: Trace, positions: np.ndarray, limit: int = 3) -> list[str]:
    """``file:line (func)`` of the innermost user Python frame around each op (needs with_stack),
    the line being the one that made the call (:mod:`..callsite`), most frequent first, at most
    ``limit``."""
    if not positions.size:
        return []
    index = PythonIndex.of(trace)
    if index is None:
        return []
    counts: dict[str, int] = {}
    for p in positions[:200].tolist():
        inner = index.innermost_user_frame(int(p))
        if inner is not None:
            where = call_site(index, inner, int(p))
            counts[where] = counts.get(where, 0) + 1
    return [f for f, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]]


class PythonIndex:
    """The Python events of a trace (with_stack) by thread, sorted by start, and the ops by
    (name, thread): each lookup :func:`call_site` makes per op is a ``searchsorted`` slice, not
    a scan of the whole trace (a diagnosis locates up to 200 ops per rule)."""

    def __init__(self, trace: Trace, py: np.ndarray) -> None:
        self._trace = weakref.ref(trace)  # the cache below must not keep a finished trace alive
        self.end = trace.start_ns + trace.duration_ns
        self.py = py[np.lexsort((trace.start_ns[py], trace.thread[py]))]
        self.py_thread, self.py_start = trace.thread[self.py], trace.start_ns[self.py]
        user_names = np.array([user_frame(n) is not None for n in trace.names], dtype=bool)
        self.user = self.py[user_names[trace.name_id[self.py]]]  # still sorted by (thread, start)
        self.user_thread, self.user_start = trace.thread[self.user], trace.start_ns[self.user]
        self._ops: dict[tuple[int, int], np.ndarray] = {}

    @property
    def trace(self) -> Trace:
        trace = self._trace()
        assert trace is not None  # callers hold the trace they ask about
        return trace

    @classmethod
    def of(cls, trace: Trace) -> PythonIndex | None:
        """The index of ``trace``, built once per trace and dropped with it (None: no user
        Python frames)."""
        if trace in _INDEXES:
            return _INDEXES[trace]
        py = np.flatnonzero(trace.kind == EventKind.PYTHON)
        index = cls(trace, py) if py.size else None
        if index is not None and not index.user.size:
            index = None
        _INDEXES[trace] = index
        return index

    def innermost_user_frame(self, p: int) -> int | None:
        """The latest-starting user frame on ``p``'s thread that was running when ``p`` began."""
        trace = self.trace
        s, t = int(trace.start_ns[p]), int(trace.thread[p])
        lo, hi = np.searchsorted(self.user_thread, t, "left"), np.searchsorted(self.user_thread, t, "right")
        upto = lo + int(np.searchsorted(self.user_start[lo:hi], s, "right"))  # frames that started by s
        cands = self.user[lo:upto]
        around = cands[self.end[cands] >= s]
        return int(around[-1]) if around.size else None

    def python_within(self, t: int, after_ns: int, until_ns: int) -> np.ndarray:
        """Python events on thread ``t`` that start in (after_ns, until_ns] and end by until_ns."""
        lo, hi = np.searchsorted(self.py_thread, t, "left"), np.searchsorted(self.py_thread, t, "right")
        starts = self.py_start[lo:hi]
        a = lo + int(np.searchsorted(starts, after_ns, "right"))
        b = lo + int(np.searchsorted(starts, until_ns, "right"))
        inside = self.py[a:b]
        return inside[self.end[inside] <= until_ns]

    def ops_between(self, name_id: int, t: int, after_ns: int, before_ns: int) -> int:
        """How many events named ``name_id`` on thread ``t`` start in (after_ns, before_ns)."""
        key = (name_id, t)
        starts = self._ops.get(key)
        if starts is None:
            trace = self.trace
            starts = self._ops[key] = np.sort(trace.start_ns[(trace.name_id == name_id) & (trace.thread == t)])
        return int(np.searchsorted(starts, before_ns, "left") - np.searchsorted(starts, after_ns, "right"))


_INDEXES: weakref.WeakKeyDictionary[Trace, PythonIndex | None] = weakref.WeakKeyDictionary()


def call_site(index: PythonIndex, frame: int, p: int) -> str:
    """``file:line (func)`` of the line in Python frame ``frame`` that made the call leading to
    the event at ``p``: the frame's child call around ``p`` (or ``p`` itself, an op called by an
    operator), matched with the source; the frame's own first line where that cannot be told."""
    trace, end = index.trace, index.end
    name = trace.names[int(trace.name_id[frame])]
    fs, fe, t = int(trace.start_ns[frame]), int(end[frame]), int(trace.thread[frame])
    s = int(trace.start_ns[p])
    mine = index.python_within(t, fs, fe)
    around = mine[(trace.start_ns[mine] <= s) & (end[mine] >= s)]
    if around.size:
        callee = int(around[np.argmin(trace.start_ns[around])])
        before = int(((trace.name_id[mine] == trace.name_id[callee]) & (trace.start_ns[mine] < trace.start_ns[callee])).sum())
    else:
        callee = p
        before = index.ops_between(int(trace.name_id[p]), t, fs, s)
    line = frame_line(name, trace.names[int(trace.name_id[callee])], before)
    if line is None:
        return user_frame(name) or name
    return with_line(name, line)
