"""Cross-rank analysis: per-rank step time, busy share, collective time, clock skew, the straggler.

Pure (numpy; never torch), in three modules:

* :func:`rank_profile` (:mod:`.rank_profile`) runs once per profiled run of a distributed job
  and keeps what the comparison needs (``rank.json``): the collectives as they ran, and per
  step where the time went outside them. Which events are collectives is said there.
* :func:`compare_rank_runs` (here) lines up the runs of every rank: the clock alignment, the
  lateness and the straggler.
* :class:`RankComparison` (:mod:`.rank_comparison`) is what it gives back, and the per-rank
  table every renderer draws.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceLoadError
from .diagnosis.communication import collective_kind
from .rank_comparison import (
    RANK_COLUMNS,
    RANK_HEADER,
    RankColumn,
    RankComparison,
    RankRow,
    StepRow,
    Straggler,
    rank_label,
)
from .rank_profile import RANK_FILE, rank_profile
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
    """Line up the runs of one profile on every rank: steps, collectives, clocks, lateness, the straggler."""
    per_rank, keys = _runs_on_every_rank(name, ranks, runs, warnings)
    steps = _rank_steps(per_rank, ranks, keys)
    n_steps = len(steps[ranks[0]])
    R = len(ranks)

    S, E, step_idx, kind_of = _match_collectives(steps, ranks, n_steps, warnings)
    C = S.shape[1]

    hosts = [per_rank[k][keys[0]].host or f"rank{k}" for k in ranks]  # unknown host: its own clock
    clock, delta = _clock(ranks, hosts, S, E, kind_of)

    wall = np.array([[(st.end_ns - st.start_ns) / 1e3 for st in steps[k]] for k in ranks])  # R x steps, µs
    arrivals, step_idx, wait, last_count = _arrivals(S, E, delta, step_idx, wall, n_steps)
    late = _lateness(arrivals, step_idx, n_steps)
    median_step = _median(wall)
    threshold = max(STRAGGLER_MIN_US, STRAGGLER_STEP_SHARE * median_step)
    med_late = np.median(late, axis=1)
    latest = np.argmax(late, axis=0)
    last_share = np.bincount(latest, minlength=R) / max(n_steps, 1)

    parts = {
        key: np.array([[st.parts[f"{key}_us"] for st in steps[k]] for k in ranks])
        for key in ("collective", "exposed", "compute", "host", "data", "compile")
    }
    timing = _RankTiming(wall, wait, parts, med_late, last_count, C)
    rows = _rank_rows(ranks, per_rank, keys, n_steps, timing, clock)

    straggler = None
    cand = int(np.argmax(med_late))
    noise, required, consistent = _noise(arrivals, step_idx, n_steps, cand, late[cand], threshold)
    if last_share[cand] >= STRAGGLER_LAST_SHARE and med_late[cand] >= required and consistent:
        straggler = _straggler(ranks, cand, med_late, last_share, parts, wait, median_step, threshold)
    step_rows = _step_rows(ranks, steps, wall, late, latest, step_idx, C)
    first = runs[0]
    medians = np.median(wall, axis=1)
    sources = sorted({str((r.profile or {}).get("collective_events", "none")) for r in runs})
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
        lanes=_lanes(ranks, steps, delta, S, E, kind_of),
    )


def _runs_on_every_rank(
    name: str, ranks: list[int], runs: list[RankRun], warnings: list[str]
) -> tuple[dict[int, dict[tuple[int, int], RankRun]], list[tuple[int, int]]]:
    """The runs of ``name`` by rank and key, and the keys every rank has (warning of those left out)."""
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
    return per_rank, keys


def _rank_steps(
    per_rank: dict[int, dict[tuple[int, int], RankRun]], ranks: list[int], keys: list[tuple[int, int]]
) -> dict[int, list[_Step]]:
    """Each rank's steps: the runs' own steps when every rank has the same number, else one step per run."""
    steps: dict[int, list[_Step]] = {k: [] for k in ranks}
    for key in keys:
        counts = {len(((per_rank[k][key].profile or {}).get("steps") or {}).get("start_ns", [])) for k in ranks}
        use_sub = len(counts) == 1 and counts.pop() > 1
        for k in ranks:
            steps[k].extend(_steps_of(per_rank[k][key], key, use_sub))
    return steps


def _arrivals(
    S: np.ndarray, E: np.ndarray, delta: np.ndarray, step_idx: np.ndarray, wall: np.ndarray, n_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(aligned arrivals, their steps, wait in collectives per step, how often each rank came last).

    Without matched collectives there is nothing to align on: a step's wall time is its lateness."""
    R, C = S.shape
    if not C:
        return wall, np.arange(n_steps), np.zeros((R, n_steps)), np.zeros(R)
    base = S.min(axis=0)
    arrivals = ((S - base).astype(np.float64) - delta[:, None]) / 1e3  # aligned, µs from the earliest
    dur = (E - S).astype(np.float64)
    wait = _per_step((dur - dur.min(axis=0)) / 1e3, step_idx, n_steps)
    last_count = np.bincount(np.argmax(arrivals, axis=0), minlength=R).astype(np.float64)
    return arrivals, step_idx, wait, last_count


def _lateness(arrivals: np.ndarray, step_idx: np.ndarray, n_steps: int) -> np.ndarray:
    """Per rank and step: its arrivals minus the median arrival of the other ranks, summed over the step."""
    R = arrivals.shape[0]
    late = np.zeros((R, n_steps))
    for i in range(R):
        late[i] = _per_step(arrivals[i] - np.median(np.delete(arrivals, i, axis=0), axis=0), step_idx, n_steps)
    return late


@dataclass
class _RankTiming:
    """Per rank (rows) and step (columns): what the per-rank table takes medians of."""

    wall: np.ndarray
    wait: np.ndarray
    parts: dict[str, np.ndarray]
    med_late: np.ndarray
    last_count: np.ndarray
    collectives: int


def _rank_rows(
    ranks: list[int],
    per_rank: dict[int, dict[tuple[int, int], RankRun]],
    keys: list[tuple[int, int]],
    n_steps: int,
    t: _RankTiming,
    clock: dict[str, Any],
) -> list[RankRow]:
    """The per-rank table: identity from the rank's runs, medians over the steps of its times."""
    C, parts = t.collectives, t.parts
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
                step_p50_us=_median(t.wall[i]),
                step_max_us=float(t.wall[i].max()),
                device_busy_pct=float(np.average(busy, weights=windows)) if busy else 0.0,
                collective_us=_median(parts["collective"][i]),
                collective_wait_us=_median(t.wait[i]),
                compute_us=_median(parts["compute"][i]),
                host_us=_median(parts["host"][i]),
                data_us=_median(parts["data"][i]),
                compile_us=_median(parts["compile"][i]),
                late_us=float(t.med_late[i]),
                last_arrival_pct=round(100.0 * float(t.last_count[i]) / C, 2) if C else 0.0,
                clock_offset_us=clock["offsets_us"].get(k) if C else None,
                exposed_us=_median(parts["exposed"][i]),
            )
        )
    return rows


def _step_rows(
    ranks: list[int],
    steps: dict[int, list[_Step]],
    wall: np.ndarray,
    late: np.ndarray,
    latest: np.ndarray,
    step_idx: np.ndarray,
    C: int,
) -> tuple[StepRow, ...]:
    """One row per step across ranks: wall time and lateness on each, who arrived last."""
    R = len(ranks)
    return tuple(
        StepRow(
            key=steps[ranks[0]][si].key,
            wall_us={k: float(wall[i, si]) for i, k in enumerate(ranks)},
            late_us={k: float(late[i, si]) for i, k in enumerate(ranks)},
            last_rank=int(ranks[int(latest[si])]) if R else None,
            collectives=int((step_idx == si).sum()) if C else 0,
        )
        for si in range(len(steps[ranks[0]]))
    )


def _lanes(
    ranks: list[int], steps: dict[int, list[_Step]], delta: np.ndarray, S: np.ndarray, E: np.ndarray, kind_of: list[str]
) -> dict[int, dict[str, Any]]:
    """For the HTML lane view: each rank's steps and collectives on the aligned clock."""
    C = S.shape[1]
    return {
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
