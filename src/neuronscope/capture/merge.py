"""One capture's trace from the segments it was recorded in (see :mod:`.session`).

* segments are concatenated: each event is in exactly one segment, so counted once;
* a ``neuronscope.region`` open across a yield was cut at the segment's end and re-entered
  when the session restarted: its pieces become one region again;
* a capture nested inside this one appears as a region named after it (its begin and end
  markers say where), as a nested ``record_function`` would;
* when the sessions recorded every thread but this capture asked only for its own, the
  other threads' events (and the device work they launched) are left out.

A pure function over trace models, so it is tested without running a profiler.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..trace.model import EventKind, Trace
from ..trace.kinds import MARKER_CAPTURE, MARKER_CAPTURE_END, MARKER_SEGMENT

__all__ = ["merge_segments"]

_STITCH_TOLERANCE_NS = 5_000_000  # a cut region ends within this of its segment's last event


def merge_segments(
    traces: Sequence[Trace],
    continued: Sequence[Sequence[str]],
    *,
    own_serial: int,
    only_own_thread: bool = False,
) -> Trace:
    """Merge a capture's segment traces. ``continued[k]``: the regions re-entered at the start
    of segment k (outermost first); ``own_serial``: the capture's serial (its markers)."""
    if len(traces) == 1 and not only_own_thread and not _has_inner_markers(traces[0], own_serial):
        return traces[0]
    trace = Trace.concat(list(traces))
    sizes = [len(t) for t in traces]
    seg_of = np.repeat(np.arange(len(traces)), sizes)
    name_of = np.array(trace.names, dtype=object)[trace.name_id] if len(trace) else np.array([], dtype=object)
    keep = np.ones(len(trace), dtype=bool)
    # 1. stitch regions cut by a yield back together
    dur = _stitch_regions(trace, seg_of, sizes, name_of, continued, keep)
    # 2. nested captures as regions
    extra, own_tid = _nested_captures(trace, name_of, own_serial)
    # 3. this capture's own thread only
    if only_own_thread and own_tid is not None:
        cpu = np.isin(trace.kind, [EventKind.OP, EventKind.REGION, EventKind.RUNTIME, EventKind.PYTHON, EventKind.OTHER])
        mine = cpu & (trace.thread == own_tid)
        launched = np.unique(trace.correlation_id[mine & (trace.correlation_id > 0)])
        device = np.isin(trace.kind, [EventKind.DEVICE, EventKind.DEVICE_ANNOTATION])
        keep &= mine | (device & np.isin(trace.linked_correlation_id, launched))
        extra = [e for e in extra if e[3] == own_tid]
    merged = Trace(
        names=trace.names,
        kind=trace.kind,
        name_id=trace.name_id,
        start_ns=trace.start_ns,
        duration_ns=dur,
        thread=trace.thread,
        correlation_id=trace.correlation_id,
        linked_correlation_id=trace.linked_correlation_id,
        device=trace.device,
        base_time_ns=trace.base_time_ns,
        metadata=dict(trace.metadata),
        category=trace.category,
        categories=trace.categories,
        inputs=trace.inputs,
        collectives=trace.collectives,
    ).select(keep)
    if extra:
        names, starts, durs, threads = (list(x) for x in zip(*extra))
        synthetic = Trace.from_columns(
            names=names,
            kind=[int(EventKind.REGION)] * len(names),
            start_ns=starts,
            duration_ns=durs,
            thread=threads,
            device=trace.device,
            base_time_ns=trace.base_time_ns,
            categories=["user_annotation"] * len(names),
        )
        merged = Trace.concat([merged, synthetic], metadata=merged.metadata)
    return merged


def _stitch_regions(
    trace: Trace, seg_of: np.ndarray, sizes: list[int], name_of: np.ndarray, continued: Sequence[Sequence[str]], keep: np.ndarray
) -> np.ndarray:
    """The durations with each region cut by a yield extended to where its continuation ends;
    the continuations are dropped from ``keep``."""
    dur = trace.duration_ns.copy()
    end = trace.start_ns + trace.duration_ns
    is_region = trace.kind == EventKind.REGION
    seg_end = [int(end[seg_of == k].max()) if sizes[k] else 0 for k in range(len(sizes))]
    consumed: set[int] = set()
    cut_seg = seg_of.copy()  # the segment whose end a (stitched) region reaches
    for k in range(1, len(sizes)):
        if not continued[k]:
            continue
        markers = np.flatnonzero((seg_of == k) & (name_of == MARKER_SEGMENT))
        if not markers.size:
            continue
        tid = int(trace.thread[markers[0]])
        before_pool = np.flatnonzero(is_region & (seg_of < k) & (trace.thread == tid))
        after_pool = np.flatnonzero(is_region & (seg_of == k) & (trace.thread == tid))
        # innermost first for the cut pieces (latest start), outermost first for the continuations
        befores: dict[int, int] = {}
        for depth, name in reversed(list(enumerate(continued[k]))):
            cands = [
                int(i)
                for i in before_pool
                if name_of[i] == name and int(i) not in consumed and int(end[i]) >= seg_end[cut_seg[i]] - _STITCH_TOLERANCE_NS
            ]
            if cands:
                pick = max(cands, key=lambda i: int(trace.start_ns[i]))
                befores[depth] = pick
                consumed.add(pick)
        for depth, name in enumerate(continued[k]):
            cands = [int(i) for i in after_pool if name_of[i] == name and int(i) not in consumed]
            if not cands or depth not in befores:
                continue
            after = min(cands, key=lambda i: int(trace.start_ns[i]))
            consumed.add(after)
            before = befores[depth]
            new_end = int(end[after])
            dur[before] = new_end - int(trace.start_ns[before])
            end[before] = new_end
            cut_seg[before] = k
            keep[after] = False
            consumed.discard(before)  # may be cut again at a later boundary
    return dur


def _nested_captures(trace: Trace, name_of: np.ndarray, own_serial: int) -> tuple[list[tuple[str, int, int, int]], int | None]:
    """(name, start, duration, thread) of each capture nested in this one, from its markers,
    and the thread this capture started on."""
    begins: dict[str, tuple[int, int, str]] = {}
    ends: dict[str, int] = {}
    own_tid: int | None = None
    for i in np.flatnonzero(trace.name_mask(lambda n: n.startswith(MARKER_CAPTURE))):
        label = str(name_of[i])
        serial, _, cname = label.partition("#")[2].partition(":")
        if label.startswith(MARKER_CAPTURE_END):
            ends[serial] = int(trace.start_ns[i])
        else:
            begins[serial] = (int(trace.start_ns[i]), int(trace.thread[i]), cname)
            if serial == str(own_serial):
                own_tid = int(trace.thread[i])
    last = int((trace.start_ns + trace.duration_ns).max()) if len(trace) else 0
    extra = [
        (cname, start, max(ends.get(serial, last) - start, 0), tid)
        for serial, (start, tid, cname) in begins.items()
        if serial != str(own_serial)
    ]
    return extra, own_tid


def _has_inner_markers(trace: Trace, own_serial: int) -> bool:
    own = f"{MARKER_CAPTURE}#{own_serial}:"
    return any(
        n.startswith(MARKER_CAPTURE) and not n.startswith(own) and not n.startswith(f"{MARKER_CAPTURE_END}#{own_serial}:")
        for n in trace.names
    )
