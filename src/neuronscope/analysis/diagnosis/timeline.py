"""The device's busy/idle timeline and why each idle interval happened.

Busy is the union of device-op intervals on the device lanes (kernels, copies, NeuronCore
executions; device-side markers excluded). On a CPU-only run there is no device: busy is
the union of the CPU ops of the main thread (the thread with the most op time), less the time
spent compiling (torch.compile runs aten ops itself while it traces), and idle is the time that
thread spent between ops — Python, sleeps, data loading, compilation.

Every idle interval ("gap") of the run window is split at the moment its next device work was
launched (the start of the runtime call that queued the op that ends the gap). Before that moment
the device waited on the host; after it, on itself. Each piece gets one class, first match wins:

host side (before the launch; the whole gap where the launch is unknown, and on a CPU run):

1. ``compile``   compilation events (torch.compile, Neuron) cover >= half of it;
2. ``data``      data-loading regions (``enumerate(DataLoader)#...``, ...) cover >= half of it
                 (a host piece is first cut where such a region starts or ends well inside it:
                 a step's Python, then the loader's wait, are two pieces);
3. ``sync``      (device runs) it began while, or right as, the host finished a host-device sync
                 (``.item()``, ``.cpu()``, ``*Synchronize``): the sync drained the queue; or
                 the host was blocked in a synchronising call for >= half of it (time blocked
                 in a sync is never ``host_wait``);
4. ``launch``    shorter than the gap threshold: back-to-back ops, per-op launch/dispatch cost;
5. ``host_wait`` otherwise: the host was busy elsewhere (Python, other ops) and queued nothing.

device side (after the launch: work was queued and the device did not run it):

6. ``stream_wait`` at or above the threshold, and the stream was told to wait (a
                 ``*StreamWaitEvent``/``*StreamWaitValue`` call since the last busy period began,
                 or a device-side wait record, CUPTI's ``Stream Wait Event``, over >= half of
                 it), or the work had been queued while the device was still busy and it went
                 idle anyway (a dependency: an event, another stream, a graph's wait node);
7. ``launch``    otherwise: kernel or graph launch latency.

Everything is vectorised over the gaps (a 400k-event CPU profile has ~10^5 of them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...trace.kinds import MARKER_CAPTURE, MARKER_CAPTURE_END, EventKind
from ...trace.model import Trace
from ..intervals import clip, complement, overlap_with, subtract, union
from .categories import (
    ASYNC_COPY,
    ELEMENTWISE,
    REDUCTIONS,
    SYNC_OPS,
    SYNC_RUNTIME,
    is_compile,
    is_data,
    user_frame,
)
from .locations import PythonIndex, call_site

__all__ = ["CLASS_INDEX", "Timeline", "blocking_calls", "build_timeline"]

CLASSES = ("host_wait", "launch", "sync", "data", "compile", "stream_wait")
CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
_HOST, _LAUNCH, _SYNC, _DATA, _COMPILE, _STREAM_WAIT = range(6)
#: runtime calls that make a stream wait on an event or a value (not the host: see SYNC_RUNTIME)
STREAM_WAIT_CALL = re.compile(r"StreamWait(?:Event|Value)", re.IGNORECASE)
#: device-side wait records (CUPTI's cuda_sync activity: "Stream Wait Event")
_DEVICE_WAIT_RECORD = re.compile(r"wait", re.IGNORECASE)
GRAPH_LAUNCH = re.compile(r"^(?:cuda|hip|cu)GraphLaunch", re.IGNORECASE)
_SYNC_TOLERANCE_NS = 2_000  # a gap that starts within 2 us of a sync's end follows from it


@dataclass
class Timeline:
    """Busy intervals, gaps and their classes, plus the host-side views the rules reuse."""

    trace: Trace
    mode: str  # "device" | "cpu_main_thread"
    lo: int
    hi: int
    busy_s: np.ndarray
    busy_e: np.ndarray
    gap_s: np.ndarray
    gap_e: np.ndarray
    gap_cls: np.ndarray
    threshold_ns: int
    main_thread: int
    host_threads: list[int]
    # top-level ops of the main thread, by start: positions into the trace
    top_ops: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    top_dev_ns: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # device time under each
    top_is_sync: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=bool))
    compile_s: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    compile_e: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    data_s: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    data_e: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    facts: dict[str, Any] = field(default_factory=dict)
    #: per gap piece: the stream-wait call that explains a ``stream_wait`` piece (trace position, -1)
    gap_wait: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: intervals where a host thread was blocked in a synchronising runtime call
    blocked_s: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    blocked_e: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def busy_ns(self) -> int:
        return int((self.busy_e - self.busy_s).sum())

    @property
    def window_ns(self) -> int:
        return max(self.hi - self.lo, 0)

    def gap_ns(self) -> np.ndarray:
        return self.gap_e - self.gap_s


def _window(trace: Trace, serial: int | None) -> tuple[int, int]:
    """The capture's own markers when present (exact, in the trace's clock), else the extent
    of the events."""
    marker = None if serial is None else str(serial)  # the capture's number, as its markers write it
    if marker is None:
        # a saved trace: the outermost capture's markers (the earliest begin)
        begins = trace.name_mask(lambda n: n.startswith(MARKER_CAPTURE + "#"))
        if begins.any():
            first = np.flatnonzero(begins)[np.argmin(trace.start_ns[begins])]
            label = trace.names[int(trace.name_id[first])]
            marker = label[len(MARKER_CAPTURE) + 1 :].split(":", 1)[0]
    if marker is not None:
        begin = f"{MARKER_CAPTURE}#{marker}:"
        end = f"{MARKER_CAPTURE_END}#{marker}:"
        b = trace.name_mask(lambda n: n.startswith(begin))
        e = trace.name_mask(lambda n: n.startswith(end))
        if b.any() and e.any():
            return int(trace.start_ns[b].min()), int(trace.start_ns[e].max())
    real = trace.kind != EventKind.OTHER
    if not real.any():
        return 0, 0
    ends = trace.start_ns + trace.duration_ns
    return int(trace.start_ns[real].min()), int(ends[real].max())


def _top_level(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Positions (into the given arrays, sorted by start) not contained in an earlier interval."""
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    top = np.ones(s.size, dtype=bool)
    top[1:] = s[1:] >= reach[:-1]
    return order[top]


def build_timeline(
    trace: Trace,
    *,
    serial: int | None = None,
    threshold_us: float = 50.0,
    facts: dict[str, Any] | None = None,
) -> Timeline:
    """The busy/idle timeline of the run window, each gap split at its launch and classified."""
    kind = trace.kind
    end = trace.start_ns + trace.duration_ns
    lo, hi = _window(trace, serial)
    threshold_ns = int(threshold_us * 1000)
    is_op = kind == EventKind.OP
    main = _main_thread(trace, is_op)
    device_events = np.flatnonzero(kind == EventKind.DEVICE)
    device_mode = trace.device != "cpu"
    host_threads = [main]
    if device_mode:
        host_threads = sorted({main, *np.unique(trace.thread[kind == EventKind.RUNTIME]).tolist()})

    # top-level ops of the main thread
    mine = np.flatnonzero(is_op & (trace.thread == main))
    top = mine[_top_level(trace.start_ns[mine], end[mine])] if mine.size else mine
    top = top[np.argsort(trace.start_ns[top], kind="stable")]

    cs, ce, ds, de = _category_intervals(trace, end, host_threads)
    bs, be = _busy(trace, end, device_events if device_mode else None, top, cs, ce)
    bs, be = clip(bs, be, lo, hi)
    gs, ge = complement(bs, be, lo, hi)

    blocking = blocking_calls(trace, end)
    top_is_sync = _sync_ops(trace, end, top, blocking, main)

    # device time under each top-level op (CPU run: the op's own time)
    if device_mode:
        top_dev = _device_time_under(trace, top, end)
    else:
        top_dev = trace.duration_ns[top].copy()

    blocked_s, blocked_e = _blocked(trace, blocking, end, host_threads)
    gaps = _GapInputs(top, top_is_sync, threshold_ns, ds, de, cs, ce, blocked_s, blocked_e)
    gs, ge, cls, wait = _classified_gaps(trace, end, device_events if device_mode else None, bs, be, gs, ge, gaps)
    return Timeline(
        trace=trace,
        mode="device" if device_mode else "cpu_main_thread",
        lo=lo,
        hi=hi,
        busy_s=bs,
        busy_e=be,
        gap_s=gs,
        gap_e=ge,
        gap_cls=cls,
        threshold_ns=threshold_ns,
        main_thread=main,
        host_threads=host_threads,
        top_ops=top,
        top_dev_ns=top_dev,
        top_is_sync=top_is_sync,
        compile_s=cs,
        compile_e=ce,
        data_s=ds,
        data_e=de,
        facts=dict(facts or {}),
        gap_wait=wait,
        blocked_s=blocked_s,
        blocked_e=blocked_e,
    )


def _main_thread(trace: Trace, is_op: np.ndarray) -> int:
    """The CPU thread with the most op time (the first event's thread when there are no ops)."""
    op_threads = trace.thread[is_op]
    if op_threads.size:
        threads, inv = np.unique(op_threads, return_inverse=True)
        return int(threads[np.argmax(np.bincount(inv.reshape(-1), weights=trace.duration_ns[is_op]))])
    return int(trace.thread[0]) if len(trace) else 0


def _category_intervals(
    trace: Trace, end: np.ndarray, host_threads: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The host-side compilation and data-loading intervals (compile starts, ends, data starts, ends)."""
    kind = trace.kind
    host_mask = np.isin(trace.thread, host_threads)
    cpu_side = np.isin(kind, [EventKind.OP, EventKind.REGION, EventKind.RUNTIME, EventKind.PYTHON]) & host_mask
    comp = cpu_side & trace.name_mask(is_compile)
    data = cpu_side & trace.name_mask(is_data)
    cs, ce = union(trace.start_ns[comp], end[comp])
    ds, de = union(trace.start_ns[data], end[data])
    return cs, ce, ds, de


def _busy(
    trace: Trace, end: np.ndarray, device_events: np.ndarray | None, top: np.ndarray, cs: np.ndarray, ce: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Busy intervals: the device events' union, or on a CPU run (no device events) the main thread's top-level ops'."""
    if device_events is not None:
        return union(trace.start_ns[device_events], end[device_events])
    bs, be = union(trace.start_ns[top], end[top])
    # torch.compile runs aten ops itself while it traces (fake tensors, inductor): on a CPU
    # run they would count as the model's busy time; compilation is idle time of its own
    return subtract(bs, be, cs, ce)


def _sync_ops(trace: Trace, end: np.ndarray, top: np.ndarray, blocking: np.ndarray, main: int) -> np.ndarray:
    """Which top-level ops synchronise: value reads (``.item()``, ``nonzero``) by name, and any op
    holding a runtime call that blocked the host (not the polls: see blocking_calls)."""
    top_is_sync = trace.name_mask(lambda n: n in SYNC_OPS)[top] if top.size else np.zeros(0, dtype=bool)
    if blocking.size and top.size:
        top_s, top_e = trace.start_ns[top], end[top]
        i = np.searchsorted(top_s, trace.start_ns[blocking], side="right") - 1
        ok = (i >= 0) & (trace.thread[blocking] == main)
        i = i[ok]
        inside = end[blocking[ok]] <= top_e[np.maximum(i, 0)]
        top_is_sync[i[inside]] = True
    return top_is_sync


@dataclass
class _GapInputs:
    """What classifying the host side of the gaps reads besides the gaps."""

    top: np.ndarray
    top_is_sync: np.ndarray
    threshold_ns: int
    ds: np.ndarray
    de: np.ndarray
    cs: np.ndarray
    ce: np.ndarray
    blocked_s: np.ndarray
    blocked_e: np.ndarray


def _classified_gaps(
    trace: Trace,
    end: np.ndarray,
    device_events: np.ndarray | None,
    bs: np.ndarray,
    be: np.ndarray,
    gs: np.ndarray,
    ge: np.ndarray,
    g: _GapInputs,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gaps split where their next device work was launched (host side before, device side
    after; a CPU run has only the host side), and each piece's class and stream-wait call."""
    device_mode = device_events is not None
    split = _launch_moments(trace, device_events, end, gs, ge) if device_events is not None else ge.copy()
    split = np.clip(split, gs, ge)
    hs, he = _cut_at_data(gs, split, g.ds, g.de, g.threshold_ns)  # host pieces
    # on a CPU there is no queue for a value read to drain: the time after .item() is host work
    sync_top = g.top_is_sync if device_mode else np.zeros_like(g.top_is_sync)
    cls = _host_classes(trace, hs, he, g.top, sync_top, end, g.threshold_ns, g.ds, g.de, g.cs, g.ce, g.blocked_s, g.blocked_e)
    wait = np.full(hs.size, -1, dtype=np.int64)
    if not device_mode:
        return hs, he, cls, wait
    dev_cls, dev_wait = _device_classes(trace, bs, be, split, ge, g.threshold_ns, end, queued=split <= gs)
    gs = np.concatenate((hs, split))
    ge = np.concatenate((he, ge))
    cls = np.concatenate((cls, dev_cls))
    wait = np.concatenate((wait, dev_wait))
    keep = ge > gs
    order = np.argsort(gs[keep], kind="stable")
    return gs[keep][order], ge[keep][order], cls[keep][order], wait[keep][order]


def _cut_at_data(
    s: np.ndarray, e: np.ndarray, ds: np.ndarray, de: np.ndarray, threshold_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """The host pieces ``[s, e)`` (sorted, disjoint) cut where a data-loading region of at least
    ``threshold_ns`` starts or ends inside one, at least ``threshold_ns`` from its ends: a step's
    Python (or sleep) followed by the DataLoader's wait is two pieces, data and host, not one
    classed by whichever covers half of it (the first item's load fell into the step's host
    time: 24 of 96 ms in 6 steps, measured)."""
    big = (de - ds) >= threshold_ns
    if not s.size or not big.any():
        return s, e
    points = np.unique(np.concatenate((ds[big], de[big])))
    i = np.maximum(np.searchsorted(s, points, side="right") - 1, 0)
    # a cut within the threshold of a piece's end would only split off a dispatch-sized sliver
    cuts = points[(points - s[i] >= threshold_ns) & (e[i] - points >= threshold_ns)]
    if not cuts.size:
        return s, e
    # disjoint sorted pieces: each cut ends one piece and starts the next
    return np.sort(np.concatenate((s, cuts))), np.sort(np.concatenate((e, cuts)))


def blocking_calls(trace: Trace, end: np.ndarray | None = None) -> np.ndarray:
    """Positions of the runtime calls that blocked the host: ``*Synchronize``, synchronous
    copies/memsets, and asynchronous copies the host still waited for (the call lasted until
    its copy on the device had ended — a device-to-host copy into pageable memory)."""
    if end is None:
        end = trace.start_ns + trace.duration_ns
    runtime = trace.kind == EventKind.RUNTIME
    blocking = runtime & trace.name_mask(lambda n: bool(SYNC_RUNTIME.search(n)))
    copies = np.flatnonzero(runtime & trace.name_mask(lambda n: bool(ASYNC_COPY.search(n))) & (trace.correlation_id > 0))
    if copies.size:
        dev = np.flatnonzero((trace.kind == EventKind.DEVICE) & (trace.correlation_id > 0))
        if dev.size:
            order = np.argsort(trace.correlation_id[dev], kind="stable")
            corr_sorted = trace.correlation_id[dev][order]
            hit = np.minimum(np.searchsorted(corr_sorted, trace.correlation_id[copies]), corr_sorted.size - 1)
            found = corr_sorted[hit] == trace.correlation_id[copies]
            copy_end = end[dev[order[hit]]]
            waited = found & (end[copies] + _SYNC_TOLERANCE_NS >= copy_end)
            blocking[copies[waited]] = True
    return np.flatnonzero(blocking)


def launcher_positions(trace: Trace, device_events: np.ndarray) -> np.ndarray:
    """For each device event, the trace position of the op that launched it (-1 if none)."""
    from ..launches import device_launches

    launches = device_launches(trace)
    if not device_events.size:
        return np.full(0, -1, dtype=np.int64)
    where = np.searchsorted(launches.device, device_events)
    where = np.minimum(where, max(launches.device.size - 1, 0))
    ok = launches.device.size > 0
    found = (launches.device[where] == device_events) if ok else np.zeros(device_events.size, dtype=bool)
    return np.where(found, launches.op[where] if ok else -1, -1)


def _device_time_under(trace: Trace, top: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Device time launched from inside each top-level op (its own kernels and its children's)."""
    out = np.zeros(top.size, dtype=np.int64)
    dev = np.flatnonzero(trace.kind == EventKind.DEVICE)
    if not dev.size or not top.size:
        return out
    launcher = launcher_positions(trace, dev)
    ok = launcher >= 0
    if not ok.any():
        return out
    ls = trace.start_ns[launcher[ok]]
    ts, te = trace.start_ns[top], end[top]
    i = np.searchsorted(ts, ls, side="right") - 1
    good = (i >= 0) & (ls <= te[np.maximum(i, 0)]) & (trace.thread[launcher[ok]] == trace.thread[top[0]])
    np.add.at(out, i[good], trace.duration_ns[dev[ok]][good])
    return out


def _launch_moments(trace: Trace, device_events: np.ndarray, end: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """Per gap: when the device work that ends it was launched (the start of its runtime call;
    the earliest among the ops starting at the gap's end), or the gap's end when unknown."""
    from ..launches import device_launches

    out = ge.copy()
    if not device_events.size or not gs.size:
        return out
    launches = device_launches(trace)
    order = np.argsort(trace.start_ns[launches.device], kind="stable")
    dstart = trace.start_ns[launches.device][order]
    call = launches.runtime[order]
    call_start = np.where(call >= 0, trace.start_ns[np.maximum(call, 0)], np.iinfo(np.int64).max)
    lo = np.searchsorted(dstart, ge, side="left")
    hi = np.searchsorted(dstart, ge, side="right")
    has = hi > lo
    if not has.any():
        return out
    # the min over each run [lo, hi) of device ops starting exactly at the gap's end: values
    # outside every run masked, then one reduceat from each run's first index (gaps are sorted)
    runs = np.flatnonzero(has)
    cover = np.zeros(call_start.size + 1, dtype=np.int64)
    np.add.at(cover, lo[runs], 1)
    np.add.at(cover, hi[runs], -1)
    masked = np.where(np.cumsum(cover)[:-1] > 0, call_start, np.iinfo(np.int64).max)
    earliest = np.minimum.reduceat(masked, lo[runs])
    known = earliest != np.iinfo(np.int64).max
    out[runs[known]] = earliest[known]
    return out


def _blocked(trace: Trace, blocking: np.ndarray, end: np.ndarray, host_threads: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Where a host thread was blocked in a synchronising runtime call (union of the calls)."""
    if not blocking.size:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    mine = blocking[np.isin(trace.thread[blocking], host_threads)]
    return union(trace.start_ns[mine], end[mine])


def _host_classes(
    trace: Trace,
    gs: np.ndarray,
    ge: np.ndarray,
    top: np.ndarray,
    top_is_sync: np.ndarray,
    end: np.ndarray,
    threshold_ns: int,
    ds: np.ndarray,
    de: np.ndarray,
    cs: np.ndarray,
    ce: np.ndarray,
    blocked_s: np.ndarray,
    blocked_e: np.ndarray,
) -> np.ndarray:
    """The class of each host-side piece (first match wins, from the bottom up here)."""
    cls = np.full(gs.size, _HOST, dtype=np.int64)
    if not gs.size:
        return cls
    glen = ge - gs
    cls[glen < threshold_ns] = _LAUNCH
    # sync: the piece starts while (or right as) a synchronising top-level op ends
    if top.size and top_is_sync.any():
        ts, te = trace.start_ns[top], end[top]
        i = np.searchsorted(ts, gs, side="right") - 1
        valid = i >= 0
        ii = np.maximum(i, 0)
        after_sync = valid & top_is_sync[ii] & (te[ii] >= gs - _SYNC_TOLERANCE_NS)
        cls[after_sync] = _SYNC
    if blocked_s.size:  # the host blocked in a synchronising call: never host_wait
        cls[(overlap_with(gs, ge, blocked_s, blocked_e) * 2 >= glen) & (glen > 0)] = _SYNC
    if ds.size:
        cls[overlap_with(gs, ge, ds, de) * 2 >= glen] = _DATA
    if cs.size:
        cls[overlap_with(gs, ge, cs, ce) * 2 >= glen] = _COMPILE
    return cls


def _device_classes(
    trace: Trace,
    bs: np.ndarray,
    be: np.ndarray,
    gs: np.ndarray,
    ge: np.ndarray,
    threshold_ns: int,
    end: np.ndarray,
    *,
    queued: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The class of each device-side piece (work queued, device idle) and the stream-wait call
    that explains it (-1). ``stream_wait`` when the stream was told to wait, or when the work
    was already queued while the device was still busy and it went idle anyway (a dependency:
    an event, another stream, a graph's own wait node); else ``launch`` (launch latency)."""
    cls = np.full(gs.size, _LAUNCH, dtype=np.int64)
    wait = np.full(gs.size, -1, dtype=np.int64)
    long_ = (ge - gs) >= threshold_ns
    if not long_.any():
        return cls, wait
    cls[long_ & queued] = _STREAM_WAIT
    calls = np.flatnonzero((trace.kind == EventKind.RUNTIME) & trace.name_mask(lambda n: bool(STREAM_WAIT_CALL.search(n))))
    if calls.size:
        calls = calls[np.argsort(trace.start_ns[calls], kind="stable")]
        cstart = trace.start_ns[calls]
        # since the busy period before the gap began (a wait queued behind running work counts)
        prev = np.searchsorted(be, gs, side="right") - 1
        since = np.where(prev >= 0, bs[np.maximum(prev, 0)], np.iinfo(np.int64).min)
        last = np.searchsorted(cstart, gs, side="right") - 1  # the latest call issued by the launch
        ok = long_ & (last >= 0) & (cstart[np.maximum(last, 0)] >= since)
        cls[ok] = _STREAM_WAIT
        wait[ok] = calls[np.maximum(last, 0)][ok]
    records = (
        (trace.kind != EventKind.DEVICE)
        & trace.category_mask("cuda_sync")
        & trace.name_mask(lambda n: bool(_DEVICE_WAIT_RECORD.search(n)))
    )
    if records.any():
        rs, re_ = union(trace.start_ns[records], end[records])
        cls[long_ & (overlap_with(gs, ge, rs, re_) * 2 >= (ge - gs))] = _STREAM_WAIT
    return cls, wait


def graph_launches(trace: Trace, busy_s: np.ndarray, busy_e: np.ndarray) -> tuple[int, list[float]]:
    """How many graph launches (``cudaGraphLaunch``...) and, for each whose work is in the trace,
    its launch latency in µs: the device's idle time from the call's start to its first kernel
    (time the device spent on earlier work in between is queueing, not latency)."""
    from ..launches import device_launches

    calls = np.flatnonzero((trace.kind == EventKind.RUNTIME) & trace.name_mask(lambda n: bool(GRAPH_LAUNCH.search(n))))
    if not calls.size:
        return 0, []
    launches = device_launches(trace)
    mine = np.isin(launches.runtime, calls)  # device work a graph launch queued
    if not mine.any():
        return int(calls.size), []
    seen, where = np.unique(launches.runtime[mine], return_inverse=True)
    b = np.full(seen.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(b, where.reshape(-1), trace.start_ns[launches.device[mine]])  # each launch's first kernel
    a = trace.start_ns[seen]
    idle = (b - a) - overlap_with(a, np.maximum(a, b), busy_s, busy_e)
    return int(calls.size), [float(x) / 1e3 for x in np.maximum(idle, 0).tolist()]


def gap_details(tl: Timeline, k: int) -> tuple[tuple[tuple[str, float], ...], str | None, str | None, str | None]:
    """(top host activity, source file:line, device op before, device op after) of gap ``k``."""
    trace = tl.trace
    a, b = int(tl.gap_s[k]), int(tl.gap_e[k])
    end = trace.start_ns + trace.duration_ns
    host = np.isin(trace.thread, tl.host_threads)
    cand = np.flatnonzero(
        host & np.isin(trace.kind, [EventKind.OP, EventKind.REGION, EventKind.PYTHON]) & (trace.start_ns < b) & (end > a)
    )
    overlaps: dict[str, int] = {}
    source = None
    best_start = best = -1
    span = max(b - a, 1)
    for i in cand.tolist():
        name = trace.names[int(trace.name_id[i])]
        ov = min(int(end[i]), b) - max(int(trace.start_ns[i]), a)
        if ov <= 0:
            continue
        if int(trace.kind[i]) == EventKind.PYTHON:
            frame = user_frame(name)
            # the innermost user frame that was running for most of the gap
            if frame is not None and 2 * ov >= span and int(trace.start_ns[i]) > best_start:
                source, best_start, best = frame, int(trace.start_ns[i]), i
            continue
        overlaps[name] = overlaps.get(name, 0) + ov
    if best >= 0:
        # the line of that frame that made the call running through most of the gap
        inside = cand[(trace.start_ns[cand] > trace.start_ns[best]) & (end[cand] <= end[best])]
        if inside.size:
            ov_in = np.minimum(end[inside], b) - np.maximum(trace.start_ns[inside], a)
            child = int(inside[np.argmax(ov_in)])
            index = PythonIndex.of(trace)
            if ov_in.max() > 0 and index is not None:
                source = call_site(index, best, child)
    top = tuple((n, ns / 1e3) for n, ns in sorted(overlaps.items(), key=lambda kv: -kv[1])[:3])
    before = after = None
    dev = np.flatnonzero(trace.kind == EventKind.DEVICE) if tl.mode == "device" else tl.top_ops
    if dev.size:
        ends = end[dev]
        prev = dev[ends <= a]
        if prev.size:
            before = trace.names[int(trace.name_id[prev[np.argmax(end[prev])]])]
        nxt = dev[trace.start_ns[dev] >= b]
        if nxt.size:
            after = trace.names[int(trace.name_id[nxt[np.argmin(trace.start_ns[nxt])]])]
    return top, source, before, after


def elementwise_mask(trace: Trace, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is elementwise, is reduction) for the ops at ``positions``."""
    ew = trace.name_mask(lambda n: n in ELEMENTWISE)
    red = trace.name_mask(lambda n: n in REDUCTIONS)
    return ew[positions], red[positions]
