"""The device's busy/idle timeline and why each idle interval happened.

Busy is the union of device-op intervals on the device lanes (kernels, copies, NeuronCore
executions; device-side markers excluded). On a CPU-only run there is no device: busy is
the union of the CPU ops of the main thread (the thread with the most op time), less the time
spent compiling (torch.compile runs aten ops itself while it traces), and idle is the time that
thread spent between ops — Python, sleeps, data loading, compilation.

Every idle interval ("gap") of the run window gets exactly one class, first match wins:

1. ``compile``   compilation events (torch.compile, Neuron) cover >= half of it;
2. ``data``      data-loading regions (``enumerate(DataLoader)#...``, ...) cover >= half of it;
3. ``sync``      it began while, or right as, the host finished a host-device sync
                 (``.item()``, ``.cpu()``, ``*Synchronize``): the sync drained the queue;
4. ``other``     (device runs, at or above the gap threshold) the next device op had been
                 launched before the gap began: the device waited on something else
                 (a dependency, another stream);
5. ``launch``    shorter than the gap threshold: back-to-back ops, per-op launch/dispatch cost;
6. ``host_wait`` otherwise: the host was busy elsewhere (Python, other ops) and queued nothing.

Everything is vectorised over the gaps (a 400k-event CPU profile has ~10^5 of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...trace.kinds import MARKER_CAPTURE, MARKER_CAPTURE_END, EventKind
from ...trace.model import Trace
from ..intervals import clip, complement, overlap_with, subtract, union
from .categories import ASYNC_COPY, ELEMENTWISE, REDUCTIONS, SYNC_OPS, SYNC_RUNTIME, is_compile, is_data, user_frame

__all__ = ["CLASS_INDEX", "Timeline", "blocking_calls", "build_timeline"]

CLASSES = ("host_wait", "launch", "sync", "data", "compile", "other")
CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
_HOST, _LAUNCH, _SYNC, _DATA, _COMPILE, _OTHER = range(6)
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
    if serial is None:
        # a saved trace: the outermost capture's markers (the earliest begin)
        begins = trace.name_mask(lambda n: n.startswith(MARKER_CAPTURE + "#"))
        if begins.any():
            first = np.flatnonzero(begins)[np.argmin(trace.start_ns[begins])]
            label = trace.names[int(trace.name_id[first])]
            serial = label[len(MARKER_CAPTURE) + 1 :].split(":", 1)[0]
    if serial is not None:
        begin = f"{MARKER_CAPTURE}#{serial}:"
        end = f"{MARKER_CAPTURE_END}#{serial}:"
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
    kind = trace.kind
    end = trace.start_ns + trace.duration_ns
    lo, hi = _window(trace, serial)
    threshold_ns = int(threshold_us * 1000)
    is_op = kind == EventKind.OP
    # main thread: the CPU thread with the most op time
    op_threads = trace.thread[is_op]
    if op_threads.size:
        threads, inv = np.unique(op_threads, return_inverse=True)
        main = int(threads[np.argmax(np.bincount(inv.reshape(-1), weights=trace.duration_ns[is_op]))])
    else:
        main = int(trace.thread[0]) if len(trace) else 0
    device_events = np.flatnonzero(kind == EventKind.DEVICE)
    device_mode = trace.device != "cpu"
    host_threads = [main]
    if device_mode:
        host_threads = sorted({main, *np.unique(trace.thread[kind == EventKind.RUNTIME]).tolist()})

    # top-level ops of the main thread
    mine = np.flatnonzero(is_op & (trace.thread == main))
    top = mine[_top_level(trace.start_ns[mine], end[mine])] if mine.size else mine
    top = top[np.argsort(trace.start_ns[top], kind="stable")]

    # host-side category intervals
    host_mask = np.isin(trace.thread, host_threads)
    cpu_side = np.isin(kind, [EventKind.OP, EventKind.REGION, EventKind.RUNTIME, EventKind.PYTHON]) & host_mask
    comp = cpu_side & trace.name_mask(is_compile)
    data = cpu_side & trace.name_mask(is_data)
    cs, ce = union(trace.start_ns[comp], end[comp])
    ds, de = union(trace.start_ns[data], end[data])

    if device_mode:
        bs, be = union(trace.start_ns[device_events], end[device_events])
    else:
        bs, be = union(trace.start_ns[top], end[top])
        # torch.compile runs aten ops itself while it traces (fake tensors, inductor): on a CPU
        # run they would count as the model's busy time; compilation is idle time of its own
        bs, be = subtract(bs, be, cs, ce)
    bs, be = clip(bs, be, lo, hi)
    gs, ge = complement(bs, be, lo, hi)

    # which top-level ops synchronise: value reads (``.item()``, ``nonzero``) by name, and any op
    # holding a runtime call that blocked the host (not the polls: see blocking_calls)
    top_is_sync = trace.name_mask(lambda n: n in SYNC_OPS)[top] if top.size else np.zeros(0, dtype=bool)
    blocking = blocking_calls(trace, end)
    if blocking.size and top.size:
        top_s, top_e = trace.start_ns[top], end[top]
        i = np.searchsorted(top_s, trace.start_ns[blocking], side="right") - 1
        ok = (i >= 0) & (trace.thread[blocking] == main)
        i = i[ok]
        inside = end[blocking[ok]] <= top_e[np.maximum(i, 0)]
        top_is_sync[i[inside]] = True

    # device time under each top-level op (CPU run: the op's own time)
    if device_mode:
        top_dev = _device_time_under(trace, top, end)
    else:
        top_dev = trace.duration_ns[top].copy()

    cls = np.full(gs.size, _HOST, dtype=np.int64)
    if gs.size:
        glen = ge - gs
        cls[glen < threshold_ns] = _LAUNCH
        if device_mode:
            queued = _launched_before(trace, device_events, end, gs, ge)
            cls[queued & (glen >= threshold_ns)] = _OTHER  # short ones are kernel-to-kernel launch latency
        # sync: the gap starts while (or right as) a synchronising top-level op ends
        if top.size and top_is_sync.any():
            ts, te = trace.start_ns[top], end[top]
            i = np.searchsorted(ts, gs, side="right") - 1
            valid = i >= 0
            ii = np.maximum(i, 0)
            after_sync = valid & top_is_sync[ii] & (te[ii] >= gs - _SYNC_TOLERANCE_NS)
            cls[after_sync] = _SYNC
        if ds.size:
            cls[overlap_with(gs, ge, ds, de) * 2 >= glen] = _DATA
        if cs.size:
            cls[overlap_with(gs, ge, cs, ce) * 2 >= glen] = _COMPILE
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
    )


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
    ops = np.flatnonzero((trace.kind == EventKind.OP) & (trace.correlation_id > 0))
    if not ops.size or not device_events.size:
        return np.full(device_events.size, -1, dtype=np.int64)
    order = np.argsort(trace.correlation_id[ops], kind="stable")
    corr_sorted = trace.correlation_id[ops][order]
    linked = trace.linked_correlation_id[device_events]
    hit = np.minimum(np.searchsorted(corr_sorted, linked), corr_sorted.size - 1)
    found = (linked > 0) & (corr_sorted[hit] == linked)
    return np.where(found, ops[order[hit]], -1)


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


def _launched_before(trace: Trace, device_events: np.ndarray, end: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """Gaps whose next device op had already been launched (its runtime call ended) when the gap began."""
    if not device_events.size:
        return np.zeros(gs.size, dtype=bool)
    order = np.argsort(trace.start_ns[device_events], kind="stable")
    dev_sorted = device_events[order]
    dstart = trace.start_ns[dev_sorted]
    nxt = np.searchsorted(dstart, ge)  # the first device op starting at the gap's end
    has = nxt < dstart.size
    nxt = np.minimum(nxt, dstart.size - 1)
    # its launch: the runtime event sharing its launching op's id
    runtime = np.flatnonzero(trace.kind == EventKind.RUNTIME)
    if not runtime.size:
        return np.zeros(gs.size, dtype=bool)
    r_order = np.argsort(trace.linked_correlation_id[runtime], kind="stable")
    r_link = trace.linked_correlation_id[runtime][r_order]
    link = trace.linked_correlation_id[dev_sorted[nxt]]
    hit = np.minimum(np.searchsorted(r_link, link), r_link.size - 1)
    found = has & (link > 0) & (r_link[hit] == link)
    launch_end = end[runtime[r_order[hit]]]
    return found & (launch_end <= gs)


def gap_details(tl: Timeline, k: int) -> tuple[tuple[tuple[str, float], ...], str | None, str | None, str | None]:
    """(top host activity, source file:line, device op before, device op after) of gap ``k``."""
    trace = tl.trace
    a, b = int(tl.gap_s[k]), int(tl.gap_e[k])
    end = trace.start_ns + trace.duration_ns
    host = np.isin(trace.thread, tl.host_threads)
    cand = np.flatnonzero(
        host
        & np.isin(trace.kind, [EventKind.OP, EventKind.REGION, EventKind.PYTHON])
        & (trace.start_ns < b)
        & (end > a)
    )
    overlaps: dict[str, int] = {}
    source = None
    best_start = -1
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
                source, best_start = frame, int(trace.start_ns[i])
            continue
        overlaps[name] = overlaps.get(name, 0) + ov
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


def source_of(trace: Trace, positions: np.ndarray, limit: int = 3) -> list[str]:
    """``file:line (func)`` of the innermost user Python frame around each op (needs with_stack),
    most frequent first, at most ``limit``."""
    py = np.flatnonzero(trace.kind == EventKind.PYTHON)
    if not py.size or not positions.size:
        return []
    frames = np.array([user_frame(n) is not None for n in trace.names], dtype=bool)[trace.name_id[py]]
    py = py[frames]
    if not py.size:
        return []
    end = trace.start_ns + trace.duration_ns
    counts: dict[str, int] = {}
    for p in positions[:2000].tolist():
        s, t = int(trace.start_ns[p]), int(trace.thread[p])
        around = py[(trace.thread[py] == t) & (trace.start_ns[py] <= s) & (end[py] >= s)]
        if around.size:
            inner = int(around[np.argmax(trace.start_ns[around])])
            frame = user_frame(trace.names[int(trace.name_id[inner])])
            if frame:
                counts[frame] = counts.get(frame, 0) + 1
    return [f for f, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]]
