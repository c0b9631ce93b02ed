"""Cross-rank analysis: per-rank step time, busy share, collective time, clock skew, the straggler.

Two halves, both pure (numpy; never torch):

* :func:`rank_profile` runs once per profiled run of a distributed job (on the analysis
  worker, or later from a saved trace). It keeps what the comparison needs and the run
  directory would otherwise only hold in the (optional) trace: the collectives as they ran,
  and per step where the time went *outside* them (compute, host, data, compile). Saved as
  ``rank.json`` next to ``summary.json``.
* :func:`compare_ranks` reads the run directories of every rank and lines them up.

**Which events are collectives.** The event that *executes* the collective: gloo's
``gloo:all_reduce`` (CPU, on gloo's worker threads), NCCL's ``ncclDevKernel_*`` /
``ncclKernel_*`` kernels on CUDA, device ops named like a collective on other devices
(``AllReduce``, ``all-gather``...). Only when a trace has none of those: NCCL's CPU-side
``nccl:*`` annotations, then the ``c10d::*`` ops that issue them. The issue-side ops last
microseconds (they enqueue); the executing event lasts until every rank has joined.

**Clock alignment.** Ranks leave a symmetric collective (all_reduce, all_gather,
reduce_scatter, all_to_all, barrier) together, whatever their clocks say. The j-th
collective of a kind in a step is the same collective on every rank (torch.distributed
requires every rank to issue them in the same order), so a rank's clock offset is
``δ_r = median_j(end_r,j − median_r' end_r',j)``; aligned times are ``t − δ_r``. Reported
relative to the lowest rank; on one host it is the collective's own exit jitter.

**Straggler.** In each step every rank's *lateness* is the sum over the step's collectives of
its aligned arrival (the collective's start) minus the median arrival of the other ranks:
its extra work since the ranks were last together. A rank is the straggler when it has the
largest lateness in at least half the steps *and* its median lateness is at least
``max(100 µs, 2 % of the median step)`` and three times the noise: how much the *other* ranks
differ from each other, step by step (pairwise, 1.4826 × the median absolute deviation / √2),
so a rank late by chance or by the scheduler on a busy machine is not flagged, while one whose
delay varies still is. With two
ranks there is no third to measure the noise on: it must be late by more than its own
scatter, and by the floor in 80 % of the steps. A balanced job has none (never "the top k",
as HTA's finder). Its lead cause is the
largest excess, per step and against the median of the other ranks, of its time outside
collectives spent computing (device busy), on the host (idle, no data loading), loading data,
compiling, or waiting in other collectives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import TraceLoadError
from .diagnosis.communication import COLLECTIVE_KERNEL, collective_kind
from .units import format_us

__all__ = [
    "CAUSES",
    "COLLECTIVE_KINDS",
    "RANK_COLUMNS",
    "RANK_FILE",
    "RANK_HEADER",
    "RankColumn",
    "RankComparison",
    "RankRow",
    "StepRow",
    "Straggler",
    "collective_kind",
    "compare_rank_runs",
    "rank_label",
    "rank_profile",
]

RANK_FILE = "rank.json"
RANK_FILE_SCHEMA_VERSION = 1
COMPARISON_SCHEMA_VERSION = 1
MAX_COLLECTIVES = 200_000  #: kept per run in rank.json (a long profile of a DDP job has many)
#: normalised collective kinds
COLLECTIVE_KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "barrier",
    "reduce",
    "gather",
    "scatter",
    "send_recv",
    "send",
    "recv",
    "other",
)
#: kinds every rank leaves together: their ends anchor the clock alignment
SYMMETRIC_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
#: what the straggler's extra time went to (outside collectives), and waiting in other collectives
CAUSES = ("compute", "host", "data", "compile", "collective_wait")
STRAGGLER_MIN_US = 100.0
STRAGGLER_STEP_SHARE = 0.02
STRAGGLER_LAST_SHARE = 0.5
#: with 3+ ranks the straggler must be late by this many times the other ranks' scatter
STRAGGLER_NOISE_FACTOR = 3.0
#: with 2 ranks: late by the floor in this share of the steps
STRAGGLER_CONSISTENT_SHARE = 0.8

# -- one rank: what its run keeps ----------------------------------------------------------------


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


# -- the comparison ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankRow:
    """One rank, over the matched steps. Times per step are medians over the steps."""

    rank: int
    host: str | None
    local_rank: int | None
    path: str | None  #: the rank's directory (or its one run / trace file)
    runs: int
    steps: int
    step_p50_us: float  #: wall time of a step, on the rank's own clock
    step_max_us: float
    device_busy_pct: float
    collective_us: float  #: time inside collectives per step
    collective_wait_us: float  #: of which waiting for the last rank to arrive
    compute_us: float  #: outside collectives: device busy
    host_us: float  #: outside collectives: device idle, host-side (not data, not compile)
    data_us: float
    compile_us: float
    late_us: float  #: median lateness per step vs the other ranks (aligned clocks)
    last_arrival_pct: float  #: share of matched collectives this rank arrived at last
    clock_offset_us: float | None  #: its clock minus the lowest rank's (None: not estimated)
    #: of ``collective_us``: time no compute ran beside (what overlap could win); 0 in rank.json
    #: files written before it was recorded
    exposed_us: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON row: ``rank``, the table's columns in the table's order, then the rest."""
        d = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}
        first = {k: d.pop(k) for k in ("rank", *(c.key for c in RANK_COLUMNS))}
        return first | d


@dataclass(frozen=True)
class RankColumn:
    """A column of the per-rank table. ``str(comparison)``, ``neuronscope ranks`` and the HTML
    report draw :data:`RANK_COLUMNS` in order; ``key`` is the :class:`RankRow` field and the
    key of ``--json`` / ``to_dict()``, so the three and the JSON cannot drift apart."""

    key: str
    header: str
    unit: Literal["us", "signed_us", "pct", "text"]
    priority: int  #: on a narrow terminal the highest goes first

    def value(self, row: RankRow) -> Any:
        return getattr(row, self.key)

    def text(self, row: RankRow) -> str:
        """The cell as every table shows it ("-": not known)."""
        v = self.value(row)
        if v is None or v == "":
            return "-"
        if self.unit == "us":
            return format_us(v)
        if self.unit == "signed_us":
            return _signed(v)
        return f"{v:.1f}" if self.unit == "pct" else str(v)


#: the first column: "rank N", marked " *" on the straggler (:func:`rank_label`)
RANK_HEADER = "Rank"
#: the per-rank table, per step (medians over the steps); docs/distributed.md explains each
RANK_COLUMNS: tuple[RankColumn, ...] = (
    RankColumn("step_p50_us", "Step p50", "us", 1),
    RankColumn("device_busy_pct", "Busy %", "pct", 2),
    RankColumn("collective_us", "Collective", "us", 1),
    RankColumn("exposed_us", "Exposed", "us", 4),
    RankColumn("collective_wait_us", "Wait", "us", 1),
    RankColumn("compute_us", "Compute", "us", 3),
    RankColumn("host_us", "Host", "us", 3),
    RankColumn("data_us", "Data", "us", 4),
    RankColumn("compile_us", "Compile", "us", 5),
    RankColumn("late_us", "Late", "signed_us", 1),
    RankColumn("last_arrival_pct", "Last %", "pct", 5),
    RankColumn("clock_offset_us", "Clock", "signed_us", 5),
    RankColumn("host", "Host name", "text", 6),
)


def rank_label(comparison: RankComparison, row: RankRow) -> str:
    straggler = comparison.straggler is not None and comparison.straggler.rank == row.rank
    return f"rank {row.rank}" + (" *" if straggler else "")


@dataclass(frozen=True)
class Straggler:
    """The rank that makes the others wait, by how much and why."""

    rank: int
    late_us: float  #: its median extra time per step (lateness at the collectives)
    late_pct_of_step: float
    last_share_pct: float  #: share of steps in which it was the latest
    cause: str  #: one of CAUSES, or "unknown"
    cause_us: float  #: its excess of ``cause`` per step vs the median of the other ranks
    deltas_us: dict[str, float]  #: every cause's excess per step
    others_wait_us: float  #: what the other ranks wait per step in collectives (mean over them)
    message: str

    def to_dict(self) -> dict[str, Any]:
        d = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}
        d["deltas_us"] = {k: round(v, 3) for k, v in self.deltas_us.items()}
        return d


@dataclass(frozen=True)
class StepRow:
    """One step across ranks: its wall time on each rank, who arrived last, how late."""

    key: str  #: ``<call index>`` or ``<call index>.<step>``
    wall_us: dict[int, float]
    late_us: dict[int, float]
    last_rank: int | None
    collectives: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "wall_us": {str(r): round(v, 3) for r, v in self.wall_us.items()},
            "late_us": {str(r): round(v, 3) for r, v in self.late_us.items()},
            "last_rank": self.last_rank,
            "collectives": self.collectives,
        }


@dataclass(frozen=True)
class RankComparison:
    """The ranks of one job side by side (``neuronscope ranks``, ``ns.compare_ranks``)."""

    job_id: str | None
    name: str  #: the profile compared
    world_size: int | None
    ranks: tuple[RankRow, ...]
    steps: tuple[StepRow, ...]
    straggler: Straggler | None
    clock: dict[str, Any]  #: method, anchors, offsets_us by rank, max_skew_us
    step_skew: float  #: slowest rank's median step / the median step
    collectives: int  #: matched collectives (per rank)
    collective_events: str  #: which events they are (gloo, device, nccl_cpu, c10d)
    threshold_us: float  #: the lateness a straggler must reach: max(100 µs, 2 % of the median step)
    noise_us: float = 0.0  #: how much the ranks' lateness scatters by chance (1.4826 × MAD, per step)
    required_us: float = 0.0  #: the median lateness a straggler had to reach here
    warnings: tuple[str, ...] = ()
    other_names: tuple[str, ...] = ()  #: other profiles present on every rank
    lanes: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)  #: for the HTML lane view

    def rank(self, r: int) -> RankRow:
        for row in self.ranks:
            if row.rank == r:
                return row
        raise KeyError(f"rank {r} is not in this comparison (ranks: {[x.rank for x in self.ranks]})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "job_id": self.job_id,
            "name": self.name,
            "world_size": self.world_size,
            "ranks": [r.to_dict() for r in self.ranks],
            "straggler": None if self.straggler is None else self.straggler.to_dict(),
            "clock": self.clock,
            "step_skew": round(self.step_skew, 4),
            "collectives": self.collectives,
            "collective_events": self.collective_events,
            "threshold_us": round(self.threshold_us, 3),
            "noise_us": round(self.noise_us, 3),
            "required_us": round(self.required_us, 3),
            "steps": [s.to_dict() for s in self.steps],
            "warnings": list(self.warnings),
            "other_names": list(self.other_names),
        }

    def headline(self) -> list[str]:
        n = len(self.ranks)
        lines = [f"{self.name}: {n} ranks, {len(self.steps)} steps compared, {self.collectives} collectives matched per rank"]
        if self.straggler is not None:
            lines.append(self.straggler.message)
        else:
            lines.append(f"no straggler: no rank is consistently late (by {format_us(self.required_us)} or more in most steps)")
        skew = self.clock.get("max_skew_us")
        if skew is not None:
            c = self.clock
            spread = f"collective exits spread {format_us(c.get('exit_spread_us') or 0.0)}"
            if c.get("hosts") == 1:
                est = c.get("estimated_us") or {}
                rng = (max(est.values()) - min(est.values())) if est else 0.0
                lines.append(
                    f"clock: one host, one clock (no offset applied); the estimate from {c.get('anchors', 0)} collective "
                    f"ends scatters {format_us(rng)} across its ranks ({spread})"
                )
            else:
                lines.append(
                    f"clock skew between hosts: {format_us(skew)} (from {c.get('anchors', 0)} collective ends; {spread})"
                )
        else:
            lines.append(f"clock skew: not estimated ({self.clock.get('reason', 'no collectives')})")
        return lines

    def __str__(self) -> str:
        head = (RANK_HEADER, *(c.header for c in RANK_COLUMNS))
        body = [(rank_label(self, r), *(c.text(r) for c in RANK_COLUMNS)) for r in self.ranks]
        left = {0} | {i + 1 for i, c in enumerate(RANK_COLUMNS) if c.unit == "text"}
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(head)]
        table = [
            "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in (head, *body)
        ]
        return "\n".join([*self.headline(), "", *table, *(f"warning: {w}" for w in self.warnings)])


def _signed(us: float) -> str:
    return ("+" if us > 0 else "-" if us < 0 else "") + format_us(abs(us))


@dataclass
class RankRun:
    """One profiled run of one rank, as the comparison needs it: identity and timing from its
    manifest, and its rank profile (rank.json's dict). Read by sinks/jobdir.py; small enough
    to travel back from a worker process or a cluster."""

    rank: int
    path: Path | None
    name: str
    key: tuple[int, int]  #: (call index, window)
    start_ns: int
    end_ns: int
    host: str | None
    pid: int | None
    local_rank: int | None
    job_id: str | None
    world_size: int | None
    profile: dict[str, Any] | None
    busy_pct: float | None
    origin: Path | None = None  # the rank directory it was found in


def _latest_launch(runs: list[RankRun], warnings: list[str]) -> list[RankRun]:
    """Only the most recent process of each rank: a re-run of the job adds its runs next to the old ones."""
    out: list[RankRun] = []
    by_rank: dict[int, list[RankRun]] = {}
    for r in runs:
        by_rank.setdefault(r.rank, []).append(r)
    relaunched = []
    for rank, rs in sorted(by_rank.items()):
        launches: dict[tuple[Any, Any], list[RankRun]] = {}
        for r in rs:
            launches.setdefault((r.host, r.pid), []).append(r)
        if len(launches) > 1:
            relaunched.append(rank)
        out.extend(max(launches.values(), key=lambda g: max(x.start_ns for x in g)))
    if relaunched:
        warnings.append(f"ranks {relaunched} hold runs of several launches of the job; compared the latest of each")
    return out


def _median(x: Any) -> float:
    a = np.asarray(x, dtype=np.float64)
    return float(np.median(a)) if a.size else 0.0


def compare_rank_runs(
    runs: Sequence[RankRun], *, name: str | None = None, warnings: Sequence[str] = (), source: str = "the runs given"
) -> RankComparison:
    """Compare the ranks of a distributed job (pure: the runs are already read, see
    ``neuronscope.compare_ranks`` for paths): per rank the step wall time, device busy %, time
    in collectives and waiting in them, where the rest went; the clock skew; the straggler.
    ``name``: the profile to compare, when the job has several (default: the one with the most
    steps on every rank)."""
    warnings = list(warnings)
    runs = list(runs)
    runs = _latest_launch(runs, warnings)
    ranks = sorted({r.rank for r in runs})
    if len(ranks) < 2:
        raise TraceLoadError(f"found runs of {len(ranks)} rank ({ranks}) under {source}: compare_ranks needs two or more")
    # the profile name to compare: present on every rank, most runs
    names_by_rank = [{r.name for r in runs if r.rank == k} for k in ranks]
    common = set.intersection(*names_by_rank)
    if name is not None:
        if name not in common:
            raise TraceLoadError(f"no profile named {name!r} on every rank; profiles on every rank: {sorted(common) or 'none'}")
        chosen = name
    else:
        if not common:
            shown = [sorted(n) for n in names_by_rank[:4]]
            raise TraceLoadError(f"no profile name is present on every rank ({shown}{' ...' if len(ranks) > 4 else ''})")
        chosen = max(sorted(common), key=lambda n: min(sum(1 for r in runs if r.rank == k and r.name == n) for k in ranks))
    mine = [r for r in runs if r.name == chosen]
    return _compare(chosen, ranks, mine, warnings, tuple(sorted(common - {chosen})))


def _keyed(runs: list[RankRun]) -> dict[tuple[int, int], RankRun]:
    """Runs by (call index, window); runs without a call index by their order."""
    if all(r.key[0] >= 0 for r in runs):
        return {r.key: r for r in runs}
    ordered = sorted(runs, key=lambda r: r.start_ns)
    return {(i, 0): r for i, r in enumerate(ordered)}


@dataclass
class _Step:
    key: str
    start_ns: int
    end_ns: int
    parts: dict[str, float]
    coll_kind: list[str]
    coll_start: np.ndarray
    coll_end: np.ndarray


def _steps_of(run: RankRun, key: tuple[int, int], use_substeps: bool) -> list[_Step]:
    prof = run.profile or {}
    coll = prof.get("collectives") or {"kind": [], "start_ns": [], "end_ns": []}
    kinds = list(coll.get("kind", []))
    cstart = np.asarray(coll.get("start_ns", []), dtype=np.int64)
    cend = np.asarray(coll.get("end_ns", []), dtype=np.int64)
    label = str(key[0]) if key[1] == 0 else f"{key[0]}w{key[1]}"
    parts_keys = ("collective_us", "exposed_us", "compute_us", "host_us", "data_us", "compile_us")
    steps = prof.get("steps")
    if use_substeps and steps:
        out = []
        for i, (s, e) in enumerate(zip(steps["start_ns"], steps["end_ns"])):
            sel = (cstart >= s) & (cstart < e)
            out.append(
                _Step(
                    f"{label}.{i}",
                    int(s),
                    int(e),
                    {k: float(steps[k][i]) if k in steps else 0.0 for k in parts_keys},
                    [k for k, m in zip(kinds, sel.tolist()) if m],
                    cstart[sel],
                    cend[sel],
                )
            )
        return out
    lo, hi = (prof.get("window_ns") or [run.start_ns, run.end_ns])[:2]
    window = prof.get("window") or {}
    parts = {k: float(window.get(k, 0.0)) for k in parts_keys}
    if not window and run.busy_pct is not None:
        parts["compute_us"] = (hi - lo) / 1e3 * run.busy_pct / 100.0
    return [_Step(label, int(lo), int(hi), parts, kinds, cstart, cend)]


def _match_collectives(
    steps: dict[int, list[_Step]], ranks: list[int], n_steps: int, warnings: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Match collectives across ranks — the j-th of each kind in each step — as (starts R x C,
    ends R x C, step of each, kind of each)."""
    s_cols, e_cols, step_of, kind_of = [], [], [], []
    mismatch = 0
    for si in range(n_steps):
        by_kind: list[dict[str, np.ndarray]] = []
        for k in ranks:
            st = steps[k][si]
            kinds = np.asarray(st.coll_kind, dtype=object)
            by_kind.append({kd: np.flatnonzero(kinds == kd) for kd in set(st.coll_kind)})
        for kd in sorted(set().union(*(set(b) for b in by_kind))):
            counts = [b.get(kd, np.empty(0, dtype=np.int64)).size for b in by_kind]
            n = min(counts)
            mismatch += max(counts) - n
            for j in range(n):
                s_cols.append([int(steps[k][si].coll_start[by_kind[i][kd][j]]) for i, k in enumerate(ranks)])
                e_cols.append([int(steps[k][si].coll_end[by_kind[i][kd][j]]) for i, k in enumerate(ranks)])
                step_of.append(si)
                kind_of.append(kd)
    if mismatch:
        warnings.append(
            f"{mismatch} collectives could not be matched across ranks (different counts per kind in a step: subgroups, "
            "or uneven work); the matched ones are compared in order"
        )
    R, C = len(ranks), len(s_cols)
    S = np.asarray(s_cols, dtype=np.int64).T.reshape(R, C)
    E = np.asarray(e_cols, dtype=np.int64).T.reshape(R, C)
    return S, E, np.asarray(step_of, dtype=np.int64), kind_of


def _compare(
    name: str, ranks: list[int], runs: list[RankRun], warnings: list[str], other_names: tuple[str, ...]
) -> RankComparison:
    per_rank = {k: _keyed([r for r in runs if r.rank == k]) for k in ranks}
    keys = sorted(set.intersection(*(set(d) for d in per_rank.values())))
    missing = {k: len(d) - len(keys) for k, d in per_rank.items() if len(d) > len(keys)}
    if missing:
        warnings.append(
            f"{sum(missing.values())} runs of {name!r} are not on every rank (sampled on some ranks only?) and were left out: "
            + ", ".join(f"rank {k}: {n}" for k, n in missing.items())
        )
    if not keys:
        raise TraceLoadError(
            f"no run of {name!r} was profiled on every rank; profile the same calls on every rank (every=N, or seed=)"
        )
    no_profile = sorted({k for k, d in per_rank.items() for key in keys if d[key].profile is None})
    if no_profile:
        warnings.append(
            f"ranks {no_profile}: runs without rank.json or trace: collectives and the time breakdown are missing "
            "(profile with neuronscope >= this version, or save_trace=True)"
        )
    # steps: the runs' own steps when every rank has the same number, else one step per run
    steps: dict[int, list[_Step]] = {k: [] for k in ranks}
    for key in keys:
        counts = {len(((per_rank[k][key].profile or {}).get("steps") or {}).get("start_ns", [])) for k in ranks}
        use_sub = len(counts) == 1 and counts.pop() > 1
        for k in ranks:
            steps[k].extend(_steps_of(per_rank[k][key], key, use_sub))
    n_steps = len(steps[ranks[0]])
    R = len(ranks)

    S, E, step_idx, kind_of = _match_collectives(steps, ranks, n_steps, warnings)
    C = S.shape[1]

    hosts = [per_rank[k][keys[0]].host or f"rank{k}" for k in ranks]  # unknown host: its own clock
    clock, delta = _clock(ranks, hosts, S, E, kind_of)

    wall = np.array([[(st.end_ns - st.start_ns) / 1e3 for st in steps[k]] for k in ranks])  # R x steps, µs
    wait = np.zeros((R, n_steps))
    last_count = np.zeros(R)
    if C:
        base = S.min(axis=0)
        arrivals = ((S - base).astype(np.float64) - delta[:, None]) / 1e3  # aligned, µs from the earliest
        dur = (E - S).astype(np.float64)
        wait = _per_step((dur - dur.min(axis=0)) / 1e3, step_idx, n_steps)
        last_count = np.bincount(np.argmax(arrivals, axis=0), minlength=R).astype(np.float64)
    else:  # nothing to align on: a step's wall time is its lateness
        arrivals, step_idx = wall, np.arange(n_steps)
    late = np.zeros((R, n_steps))
    for i in range(R):
        late[i] = _per_step(arrivals[i] - np.median(np.delete(arrivals, i, axis=0), axis=0), step_idx, n_steps)
    median_step = _median(wall)
    threshold = max(STRAGGLER_MIN_US, STRAGGLER_STEP_SHARE * median_step)
    med_late = np.median(late, axis=1)
    latest = np.argmax(late, axis=0)
    last_share = np.bincount(latest, minlength=R) / max(n_steps, 1)

    parts = {
        key: np.array([[st.parts[f"{key}_us"] for st in steps[k]] for k in ranks])
        for key in ("collective", "exposed", "compute", "host", "data", "compile")
    }
    rows = []
    for i, k in enumerate(ranks):
        rs = [per_rank[k][key] for key in keys]
        busy = [r.busy_pct for r in rs if r.busy_pct is not None]
        windows = [max(r.end_ns - r.start_ns, 1) for r in rs if r.busy_pct is not None]
        origin = rs[0].origin or rs[0].path
        rows.append(
            RankRow(
                rank=k,
                host=rs[0].host,
                local_rank=rs[0].local_rank,
                path=None if origin is None else str(origin),
                runs=len(rs),
                steps=n_steps,
                step_p50_us=_median(wall[i]),
                step_max_us=float(wall[i].max()),
                device_busy_pct=float(np.average(busy, weights=windows)) if busy else 0.0,
                collective_us=_median(parts["collective"][i]),
                collective_wait_us=_median(wait[i]),
                compute_us=_median(parts["compute"][i]),
                host_us=_median(parts["host"][i]),
                data_us=_median(parts["data"][i]),
                compile_us=_median(parts["compile"][i]),
                late_us=float(med_late[i]),
                last_arrival_pct=round(100.0 * float(last_count[i]) / C, 2) if C else 0.0,
                clock_offset_us=clock["offsets_us"].get(k) if C else None,
                exposed_us=_median(parts["exposed"][i]),
            )
        )

    straggler = None
    cand = int(np.argmax(med_late))
    noise, required, consistent = _noise(arrivals, step_idx, n_steps, cand, late[cand], threshold)
    if last_share[cand] >= STRAGGLER_LAST_SHARE and med_late[cand] >= required and consistent:
        straggler = _straggler(ranks, cand, med_late, last_share, parts, wait, median_step, threshold)
    step_rows = tuple(
        StepRow(
            key=steps[ranks[0]][si].key,
            wall_us={k: float(wall[i, si]) for i, k in enumerate(ranks)},
            late_us={k: float(late[i, si]) for i, k in enumerate(ranks)},
            last_rank=int(ranks[int(latest[si])]) if R else None,
            collectives=int((step_idx == si).sum()) if C else 0,
        )
        for si in range(n_steps)
    )
    first = runs[0]
    medians = np.median(wall, axis=1)
    sources = sorted({str((r.profile or {}).get("collective_events", "none")) for r in runs})
    lanes = {
        k: {
            "steps": [(st.start_ns - int(delta[i]), st.end_ns - int(delta[i])) for st in steps[k]],
            "collectives": (
                [
                    (int(s) - int(delta[i]), int(e) - int(delta[i]), kd, float(wt))
                    for s, e, kd, wt in zip(S[i], E[i], kind_of, (E[i] - S[i]) - (E - S).min(axis=0))
                ]
                if C
                else []
            ),
        }
        for i, k in enumerate(ranks)
    }
    return RankComparison(
        job_id=first.job_id,
        name=name,
        world_size=first.world_size,
        ranks=tuple(rows),
        steps=step_rows,
        straggler=straggler,
        clock=clock,
        step_skew=float(medians.max() / median_step) if median_step > 0 else 1.0,
        collectives=C,
        collective_events="+".join(s for s in sources if s != "none") or "none",
        threshold_us=threshold,
        noise_us=noise,
        required_us=required,
        warnings=tuple(warnings),
        other_names=other_names,
        lanes=lanes,
    )


def _per_step(values: np.ndarray, step_idx: np.ndarray, n_steps: int) -> np.ndarray:
    """Sum the columns of ``values`` (one per collective) by step."""
    if values.ndim == 1:
        return np.bincount(step_idx, weights=values, minlength=n_steps)[:n_steps]
    return np.stack([np.bincount(step_idx, weights=row, minlength=n_steps)[:n_steps] for row in values])


def _mad_sigma(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64).ravel()
    return 1.4826 * float(np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def _noise(
    arrivals: np.ndarray, step_idx: np.ndarray, n_steps: int, cand: int, cand_late: np.ndarray, threshold: float
) -> tuple[float, float, bool]:
    """(noise, the lateness the candidate must reach, whether it is late consistently enough).

    With three ranks or more, the noise is how much the *other* ranks differ from each other,
    step by step: every pair's difference of arrivals per step, robustly (1.4826 × MAD / √2, the
    scale of one rank). It holds their step-to-step jitter and their steady differences (on an
    oversubscribed machine some rank always gets a core last), but not the candidate's own
    variation: a straggler whose delay varies is still late. The candidate must be late by three
    times that. With two ranks there is no third to measure the noise on: the candidate must be
    late by more than its own scatter, and by the floor in 80 % of the steps.
    """
    R = arrivals.shape[0]
    if R >= 3:
        per_step = _per_step(np.delete(arrivals, cand, axis=0), step_idx, n_steps)  # x steps
        i, j = np.triu_indices(per_step.shape[0], k=1)
        pairs = per_step[i] - per_step[j]
        noise = 1.4826 * float(np.median(np.abs(pairs))) / np.sqrt(2.0)
        return noise, max(threshold, STRAGGLER_NOISE_FACTOR * noise), True
    noise = _mad_sigma(cand_late)
    return noise, max(threshold, noise), float(np.mean(cand_late >= threshold)) >= STRAGGLER_CONSISTENT_SHARE


def _clock(
    ranks: list[int], hosts: list[str], S: np.ndarray, E: np.ndarray, kinds: list[str]
) -> tuple[dict[str, Any], np.ndarray]:
    """Clock offsets (ns, by rank position) from the ends of the matched symmetric collectives.

    Ranks on one host read one clock: they share one offset (the median of their estimates),
    and how far their own estimates scatter is the precision of the method. Each estimate is
    kept inside what causality allows: no rank leaves a collective before the reference arrives.
    """
    R, C = S.shape
    if not C:
        return {
            "method": "none",
            "reason": "no collectives matched across ranks",
            "offsets_us": {},
            "max_skew_us": None,
        }, np.zeros(R)
    anchors = np.array([kd in SYMMETRIC_KINDS for kd in kinds])
    if not anchors.any():
        anchors = np.ones(C, dtype=bool)
    base = E[:, anchors].min(axis=0)
    ends = (E[:, anchors] - base).astype(np.float64)
    starts = (S[:, anchors] - base).astype(np.float64)
    raw = np.median(ends - np.median(ends, axis=0), axis=1)
    raw = raw - raw[0]
    # causality: rank r's clock runs ahead of the reference's by delta_r, so
    # delta_r <= min(end_r - start_ref) and delta_r >= max(start_r - end_ref)
    upper = (ends - starts[0]).min(axis=1)
    lower = (starts - ends[0]).max(axis=1)
    raw = np.clip(raw, np.minimum(lower, upper), upper)
    raw[0] = 0.0
    host_ids = {h: i for i, h in enumerate(dict.fromkeys(hosts))}
    of_host = np.array([host_ids[h] for h in hosts])
    host_offset = np.array([np.median(raw[of_host == i]) for i in range(len(host_ids))])
    host_offset -= host_offset[of_host[0]]
    delta = host_offset[of_host]
    spread = (ends - delta[:, None]).max(axis=0) - (ends - delta[:, None]).min(axis=0)
    residual = float(np.abs(raw - delta).max())
    clock = {
        "method": "collective_ends",
        "anchors": int(anchors.sum()),
        "reference_rank": ranks[0],
        "hosts": len(host_ids),
        "offsets_us": {int(k): round(float(d) / 1e3, 3) for k, d in zip(ranks, delta)},
        "estimated_us": {int(k): round(float(d) / 1e3, 3) for k, d in zip(ranks, raw)},
        "max_skew_us": round(float(delta.max() - delta.min()) / 1e3, 3),
        "exit_spread_us": round(float(np.median(spread)) / 1e3, 3),
        "same_host_residual_us": round(residual / 1e3, 3) if len(host_ids) < R else None,
    }
    return clock, delta


def _straggler(
    ranks: list[int],
    i: int,
    med_late: np.ndarray,
    last_share: np.ndarray,
    parts: dict[str, np.ndarray],
    wait: np.ndarray,
    median_step: float,
    threshold: float,
) -> Straggler:
    others = [j for j in range(len(ranks)) if j != i]
    series = {
        "compute": parts["compute"],
        "host": parts["host"],
        "data": parts["data"],
        "compile": parts["compile"],
        "collective_wait": wait,
    }
    deltas = {c: _median(series[c][i] - np.median(series[c][others], axis=0)) for c in CAUSES}
    cause, cause_us = max(deltas.items(), key=lambda kv: kv[1])
    if cause_us <= 0:
        cause, cause_us = "unknown", 0.0
    others_wait = float(np.median(wait[others].mean(axis=0)))
    late = float(med_late[i])
    pct = 100.0 * late / median_step if median_step > 0 else 0.0
    what = {
        "compute": "more device work",
        "host": "host-side time: Python, CPU work, sleeps",
        "data": "data loading",
        "compile": "compilation",
        "collective_wait": "waiting in other collectives",
    }
    if cause == "unknown":
        why = "cause: no single class of time stands out"
    else:
        why = f"cause: {cause} +{format_us(cause_us)} per step vs the median rank ({what[cause]})"
    message = (
        f"STRAGGLER rank {ranks[i]}: last to arrive in {100 * last_share[i]:.0f}% of steps, {format_us(late)} late per step "
        f"({pct:.0f}% of the step); {why}; the other ranks wait {format_us(others_wait)} per step in collectives"
    )
    return Straggler(
        rank=ranks[i],
        late_us=late,
        late_pct_of_step=pct,
        last_share_pct=100.0 * float(last_share[i]),
        cause=cause,
        cause_us=float(cause_us),
        deltas_us=deltas,
        others_wait_us=others_wait,
        message=message,
    )
