"""The per-op summary: torch's ``key_averages()`` insight, computed from the trace model.

Semantics follow torch's ``FunctionEvent``/``key_averages`` so the numbers agree with what
users already know (a test pins this on real profiles):

* ``calls``: occurrences of the op name (after torch's rule that folds a node into a
  same-named parent that has no other child).
* ``cpu_time_us``: inclusive duration on the CPU; ``self_cpu_time_us``: minus direct children.
* ``self_device_time_us``: device work linked (correlation id) to this op;
  ``device_time_us``: that plus the device time of every op nested inside it.
* On a CPU-only profile the CPU op time *is* the device time; ``Summary.device == "cpu"``
  and the table says so.
* ``device_pct``: the op's share of the summary's total self device time (shares sum to 100).

``summary.regions`` maps each region path (``forward/attn``) to a Summary of the ops inside
that region, nested regions included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from ..trace.model import EventKind, Trace
from .nesting import nest

__all__ = ["OpStats", "RegionStats", "Summary", "summarize"]

SUMMARY_SCHEMA_VERSION = 1
_STEP_MARKER = "ProfilerStep#"  # torch.profiler's per-step annotation: a step, not a region
_NS_PER_US = 1000.0


@dataclass(frozen=True)
class OpStats:
    """One row of a :class:`Summary`: an op name aggregated over all its calls."""

    name: str
    calls: int
    device_time_us: float
    self_device_time_us: float
    device_pct: float
    cpu_time_us: float
    self_cpu_time_us: float
    first_start_ns: int = 0  #: first device execution (CPU start on a CPU profile), Unix ns
    last_end_ns: int = 0


@dataclass(frozen=True)
class RegionStats:
    """How often a region ran and for how long, summed over occurrences."""

    path: str
    occurrences: int
    wall_time_us: float
    first_start_ns: int
    last_end_ns: int


@dataclass(frozen=True)
class Summary:
    """Per-op table of one profile (or one region of it). Rows sorted by self device time."""

    rows: tuple[OpStats, ...]
    device: str = "cpu"
    regions: dict[str, "Summary"] = field(default_factory=dict)
    region_stats: RegionStats | None = None
    warnings: tuple[str, ...] = ()
    #: ops that ran directly here, not inside a nested region (outside every region, for the
    #: whole-profile summary). Their ``device_pct`` is the share of the whole profile's device time.
    direct_rows: tuple[OpStats, ...] = ()
    notes: tuple[str, ...] = ()  #: lines printed after the table (e.g. how to open the raw files)

    # -- queries -----------------------------------------------------------------------
    @property
    def total_device_time_us(self) -> float:
        return sum(r.self_device_time_us for r in self.rows)

    @property
    def total_cpu_time_us(self) -> float:
        return sum(r.self_cpu_time_us for r in self.rows)

    def top(self, n: int = 10) -> list[OpStats]:
        """The ``n`` ops with the most self device time."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"top(n): n must be a non-negative int, got {n!r}")
        return list(self.rows[:n])

    def __getitem__(self, name: str) -> OpStats:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no op named {name!r} in this summary; ops: {[r.name for r in self.rows[:10]]}...")

    def __contains__(self, name: object) -> bool:
        return any(r.name == name for r in self.rows)

    def __iter__(self) -> Iterator[OpStats]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "device": self.device,
            "total_device_time_us": self.total_device_time_us,
            "rows": [asdict(r) for r in self.rows],
            "region_stats": asdict(self.region_stats) if self.region_stats else None,
            "regions": {path: s.to_dict() for path, s in self.regions.items()},
            "direct_rows": [asdict(r) for r in self.direct_rows],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        rs = data.get("region_stats")
        return cls(
            rows=tuple(OpStats(**r) for r in data["rows"]),
            device=data.get("device", "cpu"),
            regions={p: cls.from_dict(s) for p, s in data.get("regions", {}).items()},
            region_stats=RegionStats(**rs) if rs else None,
            warnings=tuple(data.get("warnings", ())),
            direct_rows=tuple(OpStats(**r) for r in data.get("direct_rows", ())),
            notes=tuple(data.get("notes", ())),
        )

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "Summary":
        return cls.from_dict(json.loads(text))

    # -- display -------------------------------------------------------------------------
    def table(self, limit: int | None = 20) -> str:
        from ..report.text import summary_table

        return summary_table(self, limit=limit)

    def __str__(self) -> str:
        return self.table()


def summarize(trace: Trace) -> Summary:
    """Compute the per-op and per-region summary of a trace (vectorised; see module doc)."""
    kind = trace.kind
    n_names = max(len(trace.names), 1)
    cpu_kinds = (kind == EventKind.OP) | (kind == EventKind.REGION) | (kind == EventKind.RUNTIME)
    tree_idx = torch.nonzero(cpu_kinds).flatten()
    start = trace.start_ns[tree_idx]
    dur = trace.duration_ns[tree_idx]
    nesting = nest(trace.thread[tree_idx], start, start + dur)
    # From here on everything is indexed by position in the nesting order.
    idx = tree_idx[nesting.order]
    parent, depth = nesting.parent.clone(), nesting.depth
    name = trace.name_id[idx]
    start, dur = trace.start_ns[idx], trace.duration_ns[idx]
    is_region = trace.kind[idx] == EventKind.REGION
    m = int(idx.numel())

    # Device work linked to the op that launched it (self device time before folding).
    dev_mask = kind == EventKind.DEVICE
    dev_idx = torch.nonzero(dev_mask).flatten()
    self_dev = torch.zeros(m, dtype=torch.int64)
    first_dev = torch.full((m,), torch.iinfo(torch.int64).max, dtype=torch.int64)
    last_dev = torch.zeros(m, dtype=torch.int64)
    unlinked_dev = dev_idx
    if dev_idx.numel() and m:
        corr = trace.correlation_id[idx]
        launchers = torch.nonzero((corr > 0) & (trace.linked_correlation_id[idx] == 0)).flatten()
        corr_sorted, corr_order = torch.sort(corr[launchers])
        linked = trace.linked_correlation_id[dev_idx]
        hit = torch.searchsorted(corr_sorted, linked).clamp(max=max(len(corr_sorted) - 1, 0))
        found = (linked > 0) & (corr_sorted[hit] == linked) if len(corr_sorted) else torch.zeros_like(linked, dtype=torch.bool)
        op_pos = launchers[corr_order[hit[found]]]
        d_start = trace.start_ns[dev_idx[found]]
        d_dur = trace.duration_ns[dev_idx[found]]
        self_dev.index_add_(0, op_pos, d_dur)
        first_dev.scatter_reduce_(0, op_pos, d_start, reduce="amin")
        last_dev.scatter_reduce_(0, op_pos, d_start + d_dur, reduce="amax")
        unlinked_dev = dev_idx[~found]

    # torch folds a node into a same-named parent whose only child it is (_remove_dup_nodes).
    alive = torch.ones(m, dtype=torch.bool)
    if m:
        has_parent = parent >= 0
        pp = parent.clamp(min=0)
        n_children = torch.bincount(parent[has_parent], minlength=m)
        folded = has_parent & (name[pp] == name) & (n_children[pp] == 1)
        if bool(folded.any()):
            alive = ~folded
            survivor = parent.clone()
            while True:  # pointer-jump each node's parent past folded nodes to the survivor
                jump = (survivor >= 0) & folded[survivor.clamp(min=0)]
                if not bool(jump.any()):
                    break
                survivor = torch.where(jump, parent[survivor.clamp(min=0)], survivor)
            # The survivor takes the kernels of the deepest node folded into it (torch's rule).
            folded_pos = torch.nonzero(folded).flatten()
            top = survivor[folded_pos]
            deepest_key = torch.full((m,), -1, dtype=torch.int64).scatter_reduce_(
                0, top, depth[folded_pos] * m + folded_pos, reduce="amax"
            )
            tops = torch.nonzero(deepest_key >= 0).flatten()
            deepest = deepest_key[tops] % m
            self_dev[tops] = self_dev[deepest]
            first_dev[tops] = first_dev[deepest]
            last_dev[tops] = last_dev[deepest]
            parent = survivor

    has_parent = (parent >= 0) & alive
    pp = parent[has_parent]
    child_dur = torch.zeros(m, dtype=torch.int64).index_add_(0, pp, dur[has_parent])
    self_cpu = dur - child_dur
    total_dev = self_dev.clone()
    if m:
        # Bottom-up: add each node's inclusive device time to its (surviving) parent.
        for d in range(int(depth.max()), 0, -1):
            level = torch.nonzero((depth == d) & has_parent).flatten()
            total_dev.index_add_(0, parent[level], total_dev[level])

    # Region path of every node (the innermost enclosing region, itself included).
    path_names: list[str] = [""]
    path_of = torch.zeros(m, dtype=torch.int64)
    region_paths: dict[tuple[int, int], int] = {}
    is_step = torch.tensor([n.startswith(_STEP_MARKER) for n in trace.names], dtype=torch.bool)
    is_real_region = is_region & ~is_step[name] if m else is_region
    if m:
        for d in range(int(depth.max()) + 1):
            level = torch.nonzero(depth == d).flatten()
            inherited = torch.where(parent[level] >= 0, path_of[parent[level].clamp(min=0)], 0)
            path_of[level] = inherited
            reg = level[is_real_region[level]]
            if reg.numel():
                pairs = torch.stack([inherited[is_real_region[level]], name[reg]], 1)
                uniq, inv = torch.unique(pairs, dim=0, return_inverse=True)
                ids = []
                for parent_path, name_id in uniq.tolist():
                    key = (parent_path, name_id)
                    if key not in region_paths:
                        prefix = path_names[parent_path]
                        region_paths[key] = len(path_names)
                        path_names.append(f"{prefix}/{trace.names[name_id]}" if prefix else trace.names[name_id])
                    ids.append(region_paths[key])
                path_of[reg] = torch.tensor(ids, dtype=torch.int64)[inv]

    cpu_only = trace.device == "cpu"
    if cpu_only:
        self_dev, total_dev = self_cpu, dur
        first_dev, last_dev = start, start + dur
    else:
        no_dev = first_dev == torch.iinfo(torch.int64).max
        first_dev = torch.where(no_dev, start, first_dev)
        last_dev = torch.where(no_dev, start + dur, last_dev)

    # Ops (not regions) of surviving nodes, aggregated per (region path, name).
    row_mask = alive & ~is_region
    region_of_row = torch.where(is_region, 0, path_of)  # an op's path is its enclosing region's
    groups = _aggregate(
        key=region_of_row[row_mask] * n_names + name[row_mask],
        calls=torch.ones(int(row_mask.sum()), dtype=torch.int64),
        dev=total_dev[row_mask],
        self_dev=self_dev[row_mask],
        cpu=dur[row_mask],
        self_cpu=self_cpu[row_mask],
        first=first_dev[row_mask],
        last=last_dev[row_mask],
    )
    # Device work whose launching op is not in the trace gets its own row, named after it.
    if unlinked_dev.numel():
        ud = trace.duration_ns[unlinked_dev]
        us = trace.start_ns[unlinked_dev]
        zeros = torch.zeros_like(ud)
        extra = _aggregate(
            key=trace.name_id[unlinked_dev],
            calls=torch.ones_like(ud),
            dev=ud,
            self_dev=ud,
            cpu=zeros,
            self_cpu=zeros,
            first=us,
            last=us + ud,
        )
        groups.extend(extra)

    by_path: dict[int, list[tuple]] = {}
    for g in groups:
        path_id, name_id = divmod(g[0], n_names)
        by_path.setdefault(path_id, []).append((trace.names[name_id],) + g[1:])

    # Region occurrence statistics.
    region_stats: dict[int, RegionStats] = {}
    live_regions = torch.nonzero(is_real_region & alive).flatten()
    if live_regions.numel():
        for g in _aggregate(
            key=path_of[live_regions],
            calls=torch.ones_like(live_regions),
            dev=dur[live_regions],
            self_dev=dur[live_regions],
            cpu=dur[live_regions],
            self_cpu=dur[live_regions],
            first=start[live_regions],
            last=start[live_regions] + dur[live_regions],
        ):
            region_stats[g[0]] = RegionStats(path_names[g[0]], g[1], g[2] / _NS_PER_US, g[6], g[7])

    all_rows = [r for rows in by_path.values() for r in rows]
    root = _build(all_rows, trace.device)
    total = root.total_device_time_us * _NS_PER_US
    regions: dict[str, Summary] = {}
    for pid in sorted(region_stats, key=lambda p: path_names[p]):
        prefix = path_names[pid]
        inside = [
            r
            for p, rows in by_path.items()
            if p and (path_names[p] == prefix or path_names[p].startswith(prefix + "/"))
            for r in rows
        ]
        regions[prefix] = replace(
            _build(inside, trace.device),
            region_stats=region_stats[pid],
            direct_rows=_build(by_path.get(pid, []), trace.device, total).rows,
        )
    return replace(root, regions=regions, direct_rows=_build(by_path.get(0, []), trace.device, total).rows)


def _aggregate(*, key, calls, dev, self_dev, cpu, self_cpu, first, last) -> list[tuple]:
    """Group by ``key``: sums of the measures, min of ``first``, max of ``last``."""
    if key.numel() == 0:
        return []
    uniq, inv = torch.unique(key, return_inverse=True)
    k = int(uniq.numel())
    sums = torch.zeros((5, k), dtype=torch.int64)
    for row, values in enumerate((calls, dev, self_dev, cpu, self_cpu)):
        sums[row].index_add_(0, inv, values)
    lo = torch.full((k,), torch.iinfo(torch.int64).max, dtype=torch.int64).scatter_reduce_(0, inv, first, "amin")
    hi = torch.zeros(k, dtype=torch.int64).scatter_reduce_(0, inv, last, "amax")
    return [
        (key_, c, d, sd, cp, scp, f, l_)
        for key_, (c, d, sd, cp, scp), f, l_ in zip(uniq.tolist(), sums.T.tolist(), lo.tolist(), hi.tolist())
    ]


def _build(rows: list[tuple], device: str, pct_base_ns: float | None = None) -> Summary:
    """Merge (name, calls, dev, self_dev, cpu, self_cpu, first, last) tuples by name.

    ``device_pct`` is relative to ``pct_base_ns`` (default: these rows' own total).
    """
    merged: dict[str, list] = {}
    for name, c, d, sd, cp, scp, f, l_ in rows:
        acc = merged.get(name)
        if acc is None:
            merged[name] = [c, d, sd, cp, scp, f, l_]
        else:
            acc[0] += c
            acc[1] += d
            acc[2] += sd
            acc[3] += cp
            acc[4] += scp
            acc[5] = min(acc[5], f)
            acc[6] = max(acc[6], l_)
    total_self_dev = pct_base_ns if pct_base_ns is not None else sum(v[2] for v in merged.values())
    out = [
        OpStats(
            name=name,
            calls=c,
            device_time_us=d / _NS_PER_US,
            self_device_time_us=sd / _NS_PER_US,
            device_pct=(100.0 * sd / total_self_dev) if total_self_dev else 0.0,
            cpu_time_us=cp / _NS_PER_US,
            self_cpu_time_us=scp / _NS_PER_US,
            first_start_ns=f,
            last_end_ns=l_,
        )
        for name, (c, d, sd, cp, scp, f, l_) in merged.items()
    ]
    out.sort(key=lambda r: (-r.self_device_time_us, -r.device_time_us, r.name))
    return Summary(rows=tuple(out), device=device)
