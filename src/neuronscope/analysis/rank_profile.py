"""One rank of a distributed job: what its run keeps for the cross-rank comparison (``rank.json``).

:func:`rank_profile` runs once per profiled run of a distributed job (on the analysis worker, or
later from a saved trace). It keeps what :mod:`.ranks`' comparison needs and the run directory
would otherwise only hold in the (optional) trace: the collectives as they ran, and per step where
the time went *outside* them (compute, host, data, compile). Pure (numpy; never torch).

**Which events are collectives.** The event that *executes* the collective: gloo's
``gloo:all_reduce`` (CPU, on gloo's worker threads), NCCL's ``ncclDevKernel_*`` /
``ncclKernel_*`` kernels on CUDA, device ops named like a collective on other devices
(``AllReduce``, ``all-gather``...). Only when a trace has none of those: NCCL's CPU-side
``nccl:*`` annotations, then the ``c10d::*`` ops that issue them. The issue-side ops last
microseconds (they enqueue); the executing event lasts until every rank has joined.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .diagnosis.communication import COLLECTIVE_KERNEL, collective_kind

__all__ = ["MAX_COLLECTIVES", "RANK_FILE", "RANK_FILE_SCHEMA_VERSION", "rank_profile"]

RANK_FILE = "rank.json"
RANK_FILE_SCHEMA_VERSION = 1
MAX_COLLECTIVES = 200_000  #: kept per run in rank.json (a long profile of a DDP job has many)


def _collective_positions(trace: Any) -> tuple[np.ndarray, str]:
    """Positions of the events that execute collectives, and which kind of events they are."""
    from ..trace.kinds import EventKind

    kind = trace.kind
    device = (kind == EventKind.DEVICE) & trace.name_mask(lambda n: bool(COLLECTIVE_KERNEL.search(n)))
    gloo = trace.name_mask(lambda n: n.startswith("gloo:"))
    executing = device | gloo
    if executing.any():
        source = "+".join(s for s, m in (("device", device), ("gloo", gloo)) if m.any())
        return np.flatnonzero(executing), source
    nccl_cpu = trace.name_mask(lambda n: n.startswith("nccl:"))
    if nccl_cpu.any():
        return np.flatnonzero(nccl_cpu), "nccl_cpu"
    c10d = (kind == EventKind.OP) & trace.name_mask(lambda n: n.startswith("c10d::"))
    return np.flatnonzero(c10d), "c10d" if c10d.any() else "none"


def _intersect(as_: np.ndarray, ae: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ∩ B for two sets of disjoint intervals: where both are covered."""
    if not as_.size or not bs.size:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    t = np.concatenate((as_, ae, bs, be)).astype(np.int64)
    d = np.concatenate((np.ones(as_.size), -np.ones(ae.size), np.ones(bs.size), -np.ones(be.size))).astype(np.int64)
    order = np.lexsort((d, t))  # at one instant, ends before starts: half-open intervals
    t, depth = t[order], np.cumsum(d[order])
    inside = depth[:-1] == 2
    s, e = t[:-1][inside], t[1:][inside]
    keep = e > s
    return s[keep], e[keep]


def _breakdown(
    tl: Any, cs: np.ndarray, ce: np.ndarray, starts: np.ndarray, ends: np.ndarray, exposed: tuple[np.ndarray, np.ndarray]
) -> dict[str, list[float]]:
    """Per window: µs in collectives (and of those, exposed: no compute beside them), and
    outside them computing / on the host / data / compile."""
    from .diagnosis.timeline import CLASS_INDEX
    from .intervals import overlap_with

    def outside(us_: np.ndarray, ue: np.ndarray) -> np.ndarray:
        inter_s, inter_e = _intersect(us_, ue, cs, ce)
        remaining: np.ndarray = overlap_with(starts, ends, us_, ue) - overlap_with(starts, ends, inter_s, inter_e)
        return remaining

    out = {
        "collective_us": overlap_with(starts, ends, cs, ce),
        "exposed_us": overlap_with(starts, ends, *exposed),
        "compute_us": outside(tl.busy_s, tl.busy_e),
    }
    # the device idle outside collectives: host-side and device-side waits alike are "host" here
    # (what the rank did instead of computing), data and compilation apart
    groups = {"host_us": ("host_wait", "launch", "sync", "stream_wait"), "data_us": ("data",), "compile_us": ("compile",)}
    for key, classes in groups.items():
        total = np.zeros(starts.size, dtype=np.int64)
        for c in classes:
            sel = tl.gap_cls == CLASS_INDEX[c]
            if sel.any():
                total += outside(tl.gap_s[sel], tl.gap_e[sel])
        out[key] = total
    return {k: [round(float(v) / 1e3, 3) for v in arr.tolist()] for k, arr in out.items()}


def rank_profile(trace: Any, *, serial: int | None = None, gap_threshold_us: float = 50.0) -> dict[str, Any]:
    """What :func:`compare_ranks` needs from one run of one rank (JSON-ready; ``rank.json``)."""
    from .diagnosis.steps import find_steps
    from .diagnosis.timeline import build_timeline
    from ..trace.kinds import EventKind
    from .intervals import subtract, union

    tl = build_timeline(trace, serial=serial, threshold_us=gap_threshold_us)
    pos, source = _collective_positions(trace)
    starts = trace.start_ns[pos]
    ends = starts + trace.duration_ns[pos]
    inside = (starts >= tl.lo) & (starts < tl.hi) if tl.hi > tl.lo else np.ones(pos.size, dtype=bool)
    pos, starts, ends = pos[inside], starts[inside], ends[inside]
    order = np.argsort(starts, kind="stable")
    pos, starts, ends = pos[order], starts[order], ends[order]
    dropped = max(int(pos.size) - MAX_COLLECTIVES, 0)
    pos, starts, ends = pos[:MAX_COLLECTIVES], starts[:MAX_COLLECTIVES], ends[:MAX_COLLECTIVES]
    names = [trace.names[i] for i in trace.name_id[pos].tolist()]
    cs, ce = union(starts, ends)
    # exposed: collective time while no other device work ran (CPU collectives: all of it)
    others = np.setdiff1d(np.flatnonzero(trace.kind == EventKind.DEVICE), pos)
    ks, ke = union(trace.start_ns[others], trace.start_ns[others] + trace.duration_ns[others])
    exposed = subtract(cs, ce, ks, ke)
    window = _breakdown(tl, cs, ce, np.array([tl.lo]), np.array([tl.hi]), exposed)
    found = find_steps(trace, tl.lo, tl.hi, tl.main_thread)
    steps = None
    if found is not None and found[2].size > 1:
        s_start, s_end = found[2].astype(np.int64), found[3].astype(np.int64)
        steps = {"source": found[0], "name": found[1], "start_ns": s_start.tolist(), "end_ns": s_end.tolist()}
        steps.update(_breakdown(tl, cs, ce, s_start, s_end, exposed))
    window_ns = max(tl.hi - tl.lo, 0)
    return {
        "schema_version": RANK_FILE_SCHEMA_VERSION,
        "device": trace.device,
        "window_ns": [int(tl.lo), int(tl.hi)],
        "device_busy_pct": round(100.0 * tl.busy_ns / window_ns, 2) if window_ns else 0.0,
        "collective_events": source,
        "collectives": {
            "kind": [collective_kind(n) for n in names],
            "name": names,
            "start_ns": starts.tolist(),
            "end_ns": ends.tolist(),
        },
        "collectives_dropped": dropped,
        "window": {k: v[0] for k, v in window.items()},
        "steps": steps,
    }
