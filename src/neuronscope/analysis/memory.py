"""Memory: why is memory high — a pure, vectorised stage over the trace model.

Input: the trace model (ops, regions, python frames) and the allocator records
(:class:`~neuronscope.trace.memory.MemoryRecords`). Output: a
:class:`~.memory_model.MemoryReport` and the memory findings. No per-record Python:

* allocations are paired with their frees **by address** (sort by address, then time: a
  free pairs with the allocation just before it at that address); a free with no
  allocation before it is a block allocated before the window (its size is known, so the
  window's start level includes it and nothing goes negative);
* each record is attributed to the innermost CPU event around it on its thread (one
  ``searchsorted`` over the nesting order, then a few vectorised steps up the parents),
  and from there to the op the user's code called, the region path and the user's
  ``file:line``;
* steps are the diagnosis' steps (``ProfilerStep``, ``ns.step()``, repeated regions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace.kinds import EventKind
from ..trace.memory import DEVICE_TYPES, MemoryRecords
from ..trace.model import Trace
from .diagnosis.model import Finding
from .memory_findings import BEFORE, NO_OP, MemoryContext, memory_findings, oom_finding, peak_finding
from .memory_model import MemoryGroup, MemoryHolder, MemoryReport, MemoryStep

__all__ = ["analyse_memory", "memory_findings", "neuron_device_report"]

TOP_HOLDERS = 20
TOP_GROUPS = 50
TIMELINE_POINTS = 1000
MAX_STEPS_SAVED = 1000
_TIME_BITS = 44


def analyse_memory(
    trace: Trace,
    records: MemoryRecords,
    *,
    steps: tuple[str, np.ndarray, np.ndarray] | None = None,
    error: str | None = None,
    device_facts: dict[str, Any] | None = None,
) -> tuple[MemoryReport, list[Finding]]:
    """The memory report of one run and its findings. ``steps``: (source, starts, ends) as the
    diagnosis found them (found here when not given); ``error``: the exception type the
    profiled code raised (an out-of-memory error gets its own finding)."""
    facts = dict(device_facts or {})
    device, rec = _primary_device(trace, records)
    n = len(rec)
    notes: list[str] = []
    oom = _oom_facts(records, error, device)
    if n == 0:
        return _no_records(device, facts, oom)
    t, b = rec.time_ns, rec.bytes
    is_alloc = b > 0
    is_free = b < 0

    idx = np.arange(n, dtype=np.int64)
    free_of, orphan_free = _pair_frees(rec, idx, is_alloc, is_free)
    level, start, absolute = _allocated_level(rec, device, int(-b[orphan_free].sum()))
    k = int(np.argmax(level))
    peak, peak_at = int(level[k]), int(t[k])
    end = int(level[-1])

    # --- who: op / region / source of every record ---------------------------------------
    op_id, path_id, src_id, path_names, labels = _attribute(trace, rec)
    holders = _holders_at_peak(rec, k, peak, absolute, free_of, orphan_free, (op_id, path_id, src_id, labels, path_names))

    # --- by op / region ---------------------------------------------------------------------
    freed_alloc = is_alloc & (free_of >= 0)
    by_op = _groups(op_id, is_alloc, freed_alloc, b, lambda i: labels[i] if i >= 0 else NO_OP)
    by_region = _groups(path_id, is_alloc, freed_alloc, b, lambda i: path_names[i])

    # --- steps --------------------------------------------------------------------------------
    if steps is None:
        steps = _find_steps(trace)
    per_step = _per_step(steps, t, level, start)

    reserved = rec.total_reserved
    peak_reserved = int(reserved.max()) if device != "cpu" and reserved.size and int(reserved.max()) > 0 else None
    if not (trace.kind == EventKind.PYTHON).any():
        notes.append("no source lines: profile with with_stack=True to get file:line for what holds the memory")
    report = MemoryReport(
        device=device,
        peak_bytes=peak,
        peak_at_ns=peak_at,
        start_bytes=start,
        end_bytes=end,
        growth_bytes=end - start,
        at_peak=tuple(holders[:TOP_HOLDERS]),
        by_op=tuple(by_op[:TOP_GROUPS]),
        by_region=tuple(by_region[:TOP_GROUPS]),
        steps=tuple(per_step.saved),
        growth_per_step_bytes=per_step.growth_median,
        steps_source=per_step.source,
        timeline=_timeline(t, level, k, start, trace.start_time_ns, trace.end_time_ns),
        peak_reserved_bytes=peak_reserved,
        allocations=int(is_alloc.sum()),
        frees=int(is_free.sum()),
        device_facts=facts,
        oom=oom,
        notes=tuple(notes),
    )
    ctx = MemoryContext(
        rec, is_alloc, free_of, op_id, path_id, labels, path_names, per_step.starts, per_step.ends, per_step.growth, level
    )
    return report, memory_findings(report, ctx)


def _no_records(device: str, facts: dict[str, Any], oom: dict[str, Any] | None) -> tuple[MemoryReport, list[Finding]]:
    """The report of a run without allocator records (and the out-of-memory finding, if it ran out)."""
    empty = MemoryReport(
        device,
        peak_bytes=0,
        peak_at_ns=0,
        start_bytes=0,
        end_bytes=0,
        growth_bytes=0,
        device_facts=facts,
        oom=oom,
        notes=("no allocator records: was profile_memory on?",),
    )
    return empty, oom_finding(empty, [])


def _allocated_level(rec: MemoryRecords, device: str, pre_bytes: int) -> tuple[np.ndarray, int, bool]:
    """Allocated bytes after each record, the level before the first, and whether they are the
    allocator's own totals (which include what was allocated before the window)."""
    b = rec.bytes
    level = pre_bytes + np.cumsum(b)
    absolute = device != "cpu" and bool((rec.total_allocated >= 0).all()) and bool(rec.total_allocated.any())
    if absolute:  # the allocator's own total: includes what was allocated before the window
        level = rec.total_allocated.astype(np.int64)
        start = int(level[0] - b[0])
    else:
        start = pre_bytes
    return level, start, absolute


def _holders_at_peak(
    rec: MemoryRecords,
    k: int,
    peak: int,
    absolute: bool,
    free_of: np.ndarray,
    orphan_free: np.ndarray,
    who: tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]],
) -> list[MemoryHolder]:
    """What held the memory at the peak (record ``k``), largest first: by op, region and line,
    and what was allocated before the window."""
    op_id, path_id, src_id, labels, path_names = who
    b = rec.bytes
    idx = np.arange(len(rec), dtype=np.int64)
    alive = (b > 0) & (idx <= k) & ((free_of < 0) | (free_of > k))  # allocated by the peak, not yet freed
    holders = _group_holders(alive, b, op_id, path_id, src_id, labels, path_names)
    freed_later = orphan_free & (idx > k)  # allocated before the window, freed after the peak
    held_before = int(-b[freed_later].sum()) if not absolute else peak - int(b[alive].sum())
    if held_before > 0:
        holders.append(MemoryHolder(BEFORE, "", None, held_before, int(freed_later.sum())))
    holders.sort(key=lambda h: -h.bytes)
    return holders


# ---------------------------------------------------------------------------------------------
def _primary_device(trace: Trace, records: MemoryRecords) -> tuple[str, MemoryRecords]:
    """The accelerator's records when there are any, else the host's."""
    if not len(records):
        return (trace.device, records)
    types = np.unique(records.device_type)
    accel = [int(x) for x in types.tolist() if x not in (0, -1)]
    if not accel:
        return ("cpu", records)
    code = max(accel, key=lambda c: int((records.device_type == c).sum()))
    return (
        DEVICE_TYPES.get(code, trace.device if trace.device != "cpu" else f"device{code}"),
        records.select(records.device_type == code),
    )


def _pair_frees(rec: MemoryRecords, idx: np.ndarray, is_alloc: np.ndarray, is_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Allocations and frees paired by address: each allocation's free (-1: not freed in the
    window), and the frees of memory allocated before the window."""
    n = len(rec)
    by_addr = np.lexsort((idx, rec.addr))
    prev, cur = by_addr[:-1], by_addr[1:]
    pair = (rec.addr[prev] == rec.addr[cur]) & is_alloc[prev] & is_free[cur]
    free_of = np.full(n, -1, dtype=np.int64)  # alloc -> its free
    free_of[prev[pair]] = cur[pair]
    freed_pair = np.zeros(n, dtype=bool)
    freed_pair[cur[pair]] = True
    orphan_free = is_free & ~freed_pair  # allocated before the window
    return free_of, orphan_free


@dataclass(frozen=True)
class _PerStep:
    """Allocated bytes step by step: each step's start, end and growth (all of them), the steps
    saved in the report (the highest peaks, in order), and the median growth."""

    source: str | None
    starts: np.ndarray
    ends: np.ndarray
    growth: np.ndarray
    saved: list[MemoryStep]
    growth_median: int | None


def _per_step(steps: tuple[str, np.ndarray, np.ndarray] | None, t: np.ndarray, level: np.ndarray, start: int) -> _PerStep:
    empty = np.zeros(0, dtype=np.int64)
    if steps is None or not len(steps[1]):
        return _PerStep(None, empty, empty, empty, [], None)
    n = level.size
    steps_source, s_start, s_end = steps[0], np.asarray(steps[1], np.int64), np.asarray(steps[2], np.int64)
    padded = np.concatenate(([start], level))
    lo = np.searchsorted(t, s_start, side="left")
    hi = np.searchsorted(t, s_end, side="right")
    before, after = padded[lo], padded[hi]
    s_growth = after - before
    s_peak = before.copy()
    nonempty = hi > lo
    if nonempty.any():
        red = np.maximum.reduceat(level, np.minimum(lo, n - 1))
        s_peak = np.where(nonempty, np.maximum(before, red), before)
    keep = np.arange(s_start.size)
    if keep.size > MAX_STEPS_SAVED:
        keep = np.sort(np.argsort(-s_peak, kind="stable")[:MAX_STEPS_SAVED])
    saved = [MemoryStep(int(i), int(s_start[i]), int(s_peak[i]), int(s_growth[i])) for i in keep.tolist()]
    return _PerStep(steps_source, s_start, s_end, s_growth, saved, int(np.median(s_growth)))


def _user_frames(names: Sequence[str], py_name_ids: np.ndarray) -> dict[int, str]:
    """``file.py:12 (func)`` of the Python frames among ``py_name_ids`` that are user code."""
    from .diagnosis.categories import user_frame

    out: dict[int, str] = {}
    for nid in np.unique(py_name_ids).tolist():
        f = user_frame(names[nid])
        if f is not None:
            out[nid] = f
    return out


def _attribute(trace: Trace, rec: MemoryRecords) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """Per record: op label id (-1: none), region path id (0: none), source label id (-1).
    Returns the ids and the two string tables (labels: ops and sources; path_names)."""
    from .nesting import nest_kinds

    n = len(rec)
    none = np.full(n, -1, dtype=np.int64)
    path_names = [""]
    # The summary's tree (ops, regions, runtime calls: computed once, shared) plus the Python
    # frames when stacks were recorded; runtime calls are transparent (they sit inside an op).
    kinds = [int(EventKind.OP), int(EventKind.REGION), int(EventKind.RUNTIME)]
    if (trace.kind == int(EventKind.PYTHON)).any():
        kinds.append(int(EventKind.PYTHON))
    pos, nst = nest_kinds(trace, tuple(kinds))
    if not pos.size:
        return none, np.zeros(n, dtype=np.int64), none, path_names, []
    order, parent, depth = nst.order, nst.parent, nst.depth
    o_pos = pos[order]
    start = trace.start_ns[o_pos]  # in nesting order from here on
    end = start + trace.duration_ns[o_pos]
    thread = trace.thread[o_pos]
    kind = trace.kind[o_pos]
    name = trace.name_id[o_pos]
    names = trace.names
    is_step = np.array([nm.startswith("ProfilerStep#") for nm in names], dtype=bool)[name]
    is_region = (kind == int(EventKind.REGION)) & ~is_step
    is_op = kind == int(EventKind.OP)
    is_py = kind == int(EventKind.PYTHON)
    frame_of_name = _user_frames(names, name[is_py])
    user_py = is_py & np.isin(name, list(frame_of_name)) if frame_of_name else np.zeros(name.size, dtype=bool)
    name_label, frame_label, labels = _label_tables(names, name[is_op], frame_of_name)
    node_label = _NodeLabels(name, names, is_region, is_op, user_py, name_label, frame_label)
    path_of, top_op, src = _node_attribution(parent, depth, node_label, path_names)
    ok, jj = _innermost_node(rec, start, end, thread, parent, depth)
    op_id = np.where(ok, top_op[jj], -1)
    path_id = np.where(ok, path_of[jj], 0)
    src_id = np.where(ok, src[jj], -1)
    return op_id, path_id, src_id, path_names, labels


def _label_tables(
    names: Sequence[str], op_names: np.ndarray, frame_of_name: dict[int, str]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """One label table for the ops' names and the user frames: (label of each op name id, label
    of each frame name id, the labels in order)."""
    label_id: dict[str, int] = {}

    def label(s: str) -> int:
        return label_id.setdefault(s, len(label_id))

    name_label = np.full(len(names), -1, dtype=np.int64)
    for nid in np.unique(op_names).tolist():
        name_label[nid] = label(names[nid])
    frame_label = np.full(len(names), -1, dtype=np.int64)
    for nid, f in frame_of_name.items():
        frame_label[nid] = label(f)
    return name_label, frame_label, list(label_id)


@dataclass(frozen=True)
class _NodeLabels:
    """Per node of the nesting tree (in nesting order): its name and what it is; per name id its labels."""

    name: np.ndarray
    names: Sequence[str]
    is_region: np.ndarray
    is_op: np.ndarray
    user_py: np.ndarray
    name_label: np.ndarray
    frame_label: np.ndarray


def _node_attribution(
    parent: np.ndarray, depth: np.ndarray, nodes: _NodeLabels, path_names: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, walking down the tree a level at a time: its region path id (new paths appended
    to ``path_names``), the outermost op's label, the innermost user frame's label."""
    name, names, is_region, is_op = nodes.name, nodes.names, nodes.is_region, nodes.is_op
    m = name.size
    path_of = np.zeros(m, dtype=np.int64)
    top_op = np.full(m, -1, dtype=np.int64)
    src = np.full(m, -1, dtype=np.int64)
    path_index: dict[tuple[int, int], int] = {}
    for d in range(int(depth.max()) + 1 if m else 0):
        lvl = np.flatnonzero(depth == d)
        par = parent[lvl]
        has_par = par >= 0
        pp = np.where(has_par, path_of[np.maximum(par, 0)], 0)
        pt = np.where(has_par, top_op[np.maximum(par, 0)], -1)
        ps = np.where(has_par, src[np.maximum(par, 0)], -1)
        # regions open a new path and reset the op; ops keep the outermost op; frames set the source
        reg = is_region[lvl]
        new_path = pp.copy()
        if reg.any():
            keys = pp[reg] * len(names) + name[lvl][reg]
            uniq, inv = np.unique(keys, return_inverse=True)
            ids = []
            for key in uniq.tolist():
                parent_path, nid = divmod(key, len(names))
                pk = (parent_path, nid)
                if pk not in path_index:
                    base = path_names[parent_path]
                    path_index[pk] = len(path_names)
                    path_names.append(f"{base}/{names[nid]}" if base else names[nid])
                ids.append(path_index[pk])
            new_path[reg] = np.asarray(ids, dtype=np.int64)[inv.reshape(-1)]
        path_of[lvl] = new_path
        op_here = is_op[lvl]
        top_op[lvl] = np.where(reg, -1, np.where(op_here & (pt < 0), nodes.name_label[name[lvl]], pt))
        src[lvl] = np.where(nodes.user_py[lvl], nodes.frame_label[name[lvl]], ps)
    return path_of, top_op, src


def _innermost_node(
    rec: MemoryRecords, start: np.ndarray, end: np.ndarray, thread: np.ndarray, parent: np.ndarray, depth: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The innermost node around each record on its thread: (found, its node), by one
    searchsorted over (thread, start), then steps up the parents while the node ended before it."""
    m = start.size
    threads = np.unique(thread)
    if threads.size == 1:  # the usual case: no key arithmetic on threads
        d_nodes = np.zeros(m, dtype=np.int64)
        d_rec = np.where(rec.thread == threads[0], 0, 1).astype(np.int64)
    else:
        d_nodes = np.searchsorted(threads, thread).astype(np.int64)
        d_rec = np.searchsorted(threads, rec.thread).astype(np.int64)
        d_rec[threads[np.minimum(d_rec, threads.size - 1)] != rec.thread] = threads.size  # a thread with no events
    t0 = int(min(int(start.min()), int(rec.time_ns.min())))
    key_nodes = (d_nodes << _TIME_BITS) + (start - t0)
    key_rec = (d_rec << _TIME_BITS) + (rec.time_ns - t0)
    j = np.searchsorted(key_nodes, key_rec, side="right") - 1
    o_end = end
    ok = j >= 0
    jj = np.maximum(j, 0)
    ok &= d_nodes[jj] == d_rec
    for _ in range(int(depth.max()) + 2 if m else 0):
        outside = ok & (o_end[jj] < rec.time_ns)
        if not outside.any():
            break
        up = parent[jj[outside]]
        jj[outside] = np.maximum(up, 0)
        ok[np.flatnonzero(outside)[up < 0]] = False
    return ok, jj


def _group_holders(mask, b, op_id, path_id, src_id, labels, path_names) -> list[MemoryHolder]:
    sel = np.flatnonzero(mask)
    if not sel.size:
        return []
    n_lab = len(labels) + 1
    key = ((op_id[sel] + 1) * len(path_names) + path_id[sel]) * n_lab + (src_id[sel] + 1)
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    total = np.bincount(inv, weights=b[sel].astype(np.float64))
    count = np.bincount(inv)
    out = []
    for u, tb, c in zip(uniq.tolist(), total.tolist(), count.tolist()):
        rest, s = divmod(u, n_lab)
        o, p = divmod(rest, len(path_names))
        out.append(
            MemoryHolder(labels[o - 1] if o > 0 else NO_OP, path_names[p], labels[s - 1] if s > 0 else None, int(tb), int(c))
        )
    return out


def _groups(ids, is_alloc, freed_alloc, b, name_of) -> list[MemoryGroup]:
    sel = np.flatnonzero(is_alloc)
    if not sel.size:
        return []
    uniq, inv = np.unique(ids[sel], return_inverse=True)
    inv = inv.reshape(-1)
    alloc = np.bincount(inv, weights=b[sel].astype(np.float64))
    freed = np.bincount(inv, weights=np.where(freed_alloc[sel], b[sel], 0).astype(np.float64), minlength=uniq.size)
    count = np.bincount(inv)
    out = [
        MemoryGroup(name_of(int(u)), int(a), int(f), int(a - f), int(c))
        for u, a, f, c in zip(uniq.tolist(), alloc.tolist(), freed.tolist(), count.tolist())
    ]
    out.sort(key=lambda g: (-g.net_bytes, -g.allocated_bytes))
    return out


def neuron_device_report(
    host: MemoryReport, host_findings: list[Finding], facts: dict[str, Any], *, error: str | None, start_ns: int, end_ns: int
) -> tuple[MemoryReport, list[Finding]]:
    """The report of a Neuron run whose profile holds no device allocator records: from the
    device allocator's totals at the start and the end (``torch.neuron.memory_stats()``) and,
    after an out-of-memory error, the runtime's HBM table by category. What the host allocated
    (the records) stays in ``device_facts["host"]`` and its findings are kept."""
    stats = facts.get("neuron_memory_stats") or {}
    s0, s1 = stats.get("start") or {}, stats.get("end") or {}
    cur = "allocated_bytes.all.current"
    start, end = int(s0.get(cur, 0)), int(s1.get(cur, 0))
    peak_start, peak_end = int(s0.get("allocated_bytes.all.peak", start)), int(s1.get("allocated_bytes.all.peak", end))
    notes = [
        "device memory from torch.neuron.memory_stats() at the start and the end of the profile: "
        "TorchNeuron recorded no device allocations, so nothing is attributed to ops"
    ]
    # the allocator's peak is process-wide: it is this window's only when it rose during it
    peak = peak_end if peak_end > peak_start else max(start, end)
    if peak_end <= peak_start:
        notes.append("the device peak did not rise during the profile: peak_bytes is the larger of the start and end levels")
    table = facts.get("neuron_oom_table") if isinstance(facts.get("neuron_oom_table"), dict) else None
    holders: list[MemoryHolder] = []
    if table is not None and table.get("categories"):
        # who holds the HBM: the runtime's categories (tensors, model code, scratchpad, ...)
        holders = [MemoryHolder(f"HBM: {c}", "", None, int(v), 1) for c, v in table["categories"].items() if v]
        holders.sort(key=lambda h: -h.bytes)
        peak = max(peak, int(table.get("total_bytes") or 0))
    res = s1.get("reserved_bytes.all.peak")
    device_facts = dict(facts)
    device_facts["host"] = {
        "peak_bytes": host.peak_bytes,
        "growth_bytes": host.growth_bytes,
        "headline": host.headline(),
        "at_peak": [h.to_dict() for h in host.at_peak[:5]],
    }
    oom = host.oom
    if table is not None and error:
        failed = table.get("failed_allocation") or {}
        oom = {
            "error": error,
            "device": "neuron",
            "device_id": table.get("device"),
            "requested_bytes": failed.get("bytes"),
            "usage": failed.get("usage"),
            "where": failed.get("where"),
        }
    report = MemoryReport(
        device="neuron",
        peak_bytes=peak,
        peak_at_ns=end_ns,
        start_bytes=start,
        end_bytes=end,
        growth_bytes=end - start,
        at_peak=tuple(holders),
        timeline=((start_ns, start), (end_ns, end)),
        device_facts=device_facts,
        oom=oom,
        peak_reserved_bytes=None if res is None else int(res),
        notes=tuple(notes),
    )
    kept = [f for f in host_findings if f.rule not in ("memory_peak", "out_of_memory")]
    return report, kept + peak_finding(report) + oom_finding(report, kept)


def _find_steps(trace: Trace) -> tuple[str, np.ndarray, np.ndarray] | None:
    from .diagnosis.steps import find_steps

    if not len(trace):
        return None
    ops = trace.kind == int(EventKind.OP)
    threads = trace.thread[ops] if ops.any() else trace.thread
    vals, counts = np.unique(threads, return_counts=True)
    main = int(vals[np.argmax(counts)])
    found = find_steps(trace, trace.start_time_ns, trace.end_time_ns, main)
    if found is None:
        return None
    return found[0], found[2], found[3]


def _timeline(t: np.ndarray, level: np.ndarray, k: int, start: int, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """(time, allocated) at most TIMELINE_POINTS + 4 points: the level before the first record
    (at the window's start), the peak of each time bin, the peak itself, the end."""
    ends = []
    if lo and lo < int(t[0]):
        ends.append((int(lo), int(start)))
    if hi and hi > int(t[-1]):
        ends.append((int(hi), int(level[-1])))
    return tuple(sorted(set(_binned(t, level, k)) | set(ends)))


def _binned(t: np.ndarray, level: np.ndarray, k: int) -> tuple[tuple[int, int], ...]:
    n = t.size
    if n <= TIMELINE_POINTS:
        return tuple(zip(t.tolist(), level.tolist()))
    edges = np.linspace(int(t[0]), int(t[-1]) + 1, TIMELINE_POINTS + 1).astype(np.int64)
    starts = np.unique(np.searchsorted(t, edges[:-1]))
    starts = starts[starts < n]
    peaks = np.maximum.reduceat(level, starts)
    pts = list(zip(t[starts].tolist(), peaks.tolist()))
    pts.append((int(t[k]), int(level[k])))
    pts.append((int(t[-1]), int(level[-1])))
    return tuple(sorted(set(pts)))


def _oom_facts(records: MemoryRecords, error: str | None, device: str) -> dict[str, Any] | None:
    oom_error = error is not None and ("OutOfMemory" in error or "OOM" in error.upper())
    if not (oom_error or records.oom):
        return None
    facts: dict[str, Any] = {"error": error}
    if records.oom:
        at, asked, dtype, did = records.oom[0]
        facts.update(at_ns=int(at), requested_bytes=int(asked) or None, device=DEVICE_TYPES.get(dtype, device), device_id=did)
    return facts
