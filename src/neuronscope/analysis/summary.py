"""The per-op summary: torch's ``key_averages()`` insight, computed from the trace model.

Semantics follow torch's ``FunctionEvent``/``key_averages`` so the numbers agree with what
users already know (a test pins this on real profiles):

* ``calls``: occurrences of the op name (after torch's rule that folds a node into a
  same-named parent that has no other child).
* ``cpu_time_us``: inclusive duration on the CPU; ``self_cpu_time_us``: minus direct children.
* ``self_device_time_us``: device work this op launched (the innermost op around the runtime
  call the kernel's correlation id names, :mod:`.launches`);
  ``device_time_us``: that plus the device time of every op nested inside it.
* On a CPU-only profile the CPU op time *is* the device time; ``Summary.device == "cpu"``
  and the table says so — except compilation: torch.compile's phases (``compile_file
  (dynamo_timed)``, ``async_compile.wait``...) and the ops torch.compile runs while it traces
  are not the model's work, so their time is ``compile_time_us``, not device time (the
  diagnosis counts it as ``compile`` idle time the same way; one classification,
  :func:`.diagnosis.categories.is_compile`).
* ``compile``: every call of the op was compilation or ran inside it; tables list these rows
  apart, marked compile.
* ``device_pct``: the op's share of the summary's total self device time (shares sum to 100).

``summary.regions`` maps each region path (``forward/attn``) to a Summary of the ops inside
that region, nested regions included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..trace.kinds import EventKind
from .kernel_classes import DeviceClasses, device_classes
from .roofline import Roofline
from .roofs import DeviceLimits
from .text import roofline_table as roofline_text
from .text import summary_table
from .units import format_us
from .work import OpWork

if TYPE_CHECKING:
    import numpy as np

    from ..trace.model import Trace

__all__ = ["OpStats", "RegionStats", "Summary", "build_summary", "summarize"]

#: one aggregated row before it becomes an OpStats:
#: (name or key, calls, device ns, self device ns, cpu ns, self cpu ns, first start, last end, compile ns, compile calls)
_Row = tuple[Any, ...]

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
    #: self CPU time spent compiling: the calls that are a compilation phase or ran inside one
    compile_time_us: float = 0.0
    compile: bool = False  #: every call was compilation (a phase, or an op torch.compile ran while tracing)
    #: FLOPs and bytes of the calls whose work is known (``record_shapes=True``; :mod:`.work`),
    #: or why they have none; None when the profile recorded no shapes
    work: OpWork | None = None
    #: those calls against the device's roofs (:mod:`.roofline`); None without work or limits
    roofline: Roofline | None = None


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
    #: readable labels for machine-made op names (``compiled graph fydwk3x7 · f (file:12)``);
    #: tables show them, the rows keep the full names (see :mod:`.names`)
    labels: dict[str, str] = field(default_factory=dict)
    #: the device's roofs the rows' ``roofline`` is measured against (None: unknown device)
    limits: DeviceLimits | None = None
    #: the device time by class (GEMM, attention, copy...: :mod:`.kernel_classes`), of the whole
    #: profile (None in a region's summary, and in a summary saved before the classes existed)
    device_classes: DeviceClasses | None = None

    # -- queries -----------------------------------------------------------------------
    @property
    def total_device_time_us(self) -> float:
        return sum(r.self_device_time_us for r in self.rows)

    @property
    def total_cpu_time_us(self) -> float:
        return sum(r.self_cpu_time_us for r in self.rows)

    @property
    def compile_time_us(self) -> float:
        """Self CPU time spent compiling (on a CPU profile: not in :attr:`total_device_time_us`)."""
        return sum(r.compile_time_us for r in self.rows)

    def top(self, n: int = 10) -> list[OpStats]:
        """The ``n`` ops with the most self device time."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigurationError(f"top(n): n must be a non-negative int, got {n!r}")
        return list(self.rows[:n])

    def __getitem__(self, name: str) -> OpStats:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no op named {name!r} in this summary; ops: {[r.name for r in self.rows[:10]]}...")

    def label(self, name: str) -> str:
        """How tables show the op ``name``."""
        from .names import display_name

        return display_name(name, self.labels)

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
            "compile_time_us": self.compile_time_us,
            "rows": [asdict(r) for r in self.rows],
            "region_stats": asdict(self.region_stats) if self.region_stats else None,
            "regions": {path: s.to_dict() for path, s in self.regions.items()},
            "direct_rows": [asdict(r) for r in self.direct_rows],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "labels": dict(self.labels),
            "limits": self.limits.to_dict() if self.limits is not None else None,
            "device_classes": self.device_classes.to_dict() if self.device_classes is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        rs = data.get("region_stats")
        limits = data.get("limits")
        classes = data.get("device_classes")
        return cls(
            rows=tuple(_row_from_dict(r) for r in data["rows"]),
            device=data.get("device", "cpu"),
            regions={p: cls.from_dict(s) for p, s in data.get("regions", {}).items()},
            region_stats=RegionStats(**rs) if rs else None,
            warnings=tuple(data.get("warnings", ())),
            direct_rows=tuple(_row_from_dict(r) for r in data.get("direct_rows", ())),
            notes=tuple(data.get("notes", ())),
            labels=dict(data.get("labels") or {}),
            limits=DeviceLimits.from_dict(limits) if isinstance(limits, dict) else None,
            device_classes=DeviceClasses.from_dict(classes) if isinstance(classes, dict) else None,
        )

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "Summary":
        return cls.from_dict(json.loads(text))

    # -- display -------------------------------------------------------------------------
    def table(self, limit: int | None = 20) -> str:
        return summary_table(self, limit=limit)

    def __str__(self) -> str:
        return self.table()

    def roofline_table(self, limit: int | None = 20) -> str:
        """Each op against the device's roofs (``record_shapes=True``): achieved FLOP/s or bytes/s,
        arithmetic intensity, bound, % of the roof, the time at the roof and the time above it."""
        return roofline_text(self, limit=limit)

    def __repr__(self) -> str:
        region = f" region={self.region_stats.path!r}" if self.region_stats is not None else ""
        return (
            f"<neuronscope.Summary device={self.device!r}{region} ops={len(self.rows)} "
            f"self_device_time={format_us(self.total_device_time_us)}>"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's terminal: the table print() shows
        p.text(repr(self) if cycle else self.table())

    def _repr_html_(self) -> str:
        """What Jupyter shows: the op table (20 ops), with a "% of roof" column when rows have a roofline."""
        from .notebook import summary_html

        return summary_html(self)

    def to_pandas(self) -> Any:
        """The op table as a pandas DataFrame, one row per op in this summary's order (most self
        device time first): every field of :class:`OpStats` (``name``, ``calls``, the times in
        microseconds, ``device_pct``, ``first_start_ns``...), ``label``, and, when present, the
        work (``work_flops``, ``work_bytes``...) and the roofline (``roofline_pct_of_roof``,
        ``roofline_bound``, ``roofline_at_limit``...) flattened into columns. Needs pandas
        (``pip install "neuronscope[notebook]"``)."""
        from .notebook import summary_frame

        return summary_frame(self)


def _row_from_dict(r: dict[str, Any]) -> OpStats:
    r = dict(r)
    if isinstance(r.get("work"), dict):
        r["work"] = OpWork.from_dict(r["work"])
    if isinstance(r.get("roofline"), dict):
        r["roofline"] = Roofline.from_dict(r["roofline"])
    return OpStats(**{k: v for k, v in r.items() if k in OpStats.__dataclass_fields__})


def summarize(trace: Trace, *, compiled_functions: dict[str, str] | None = None, limits: DeviceLimits | None = None) -> Summary:
    """Compute the per-op and per-region summary of a trace (vectorised; see module doc).

    ``compiled_functions`` (compile id -> function) names the functions behind compiled graphs.
    The steps, each a function below: nest the CPU events into a tree; put the device work on
    the ops that launched it; fold duplicates as torch does; self CPU, compile and inclusive
    device times; the region path of every node; aggregate per (region path, op name); the work
    of the ops whose shapes were recorded, against ``limits`` (default: the ones the trace names,
    :func:`.roofs.limits_for_trace`).
    """
    from .names import compiled_graph_labels, kernel_labels

    tree = _cpu_tree(trace)
    device = _link_device_work(trace, tree)
    _fold_single_child_duplicates(tree, device)
    times = _node_times(trace, tree, device)
    paths = _region_paths(trace, tree)
    by_path = _ops_by_region_path(trace, tree, device, times, paths)
    if trace.inputs:
        from .work_by_op import attach_work

        attach_work(by_path, trace, tree, times, paths)
    region_stats = _region_occurrences(tree, paths)

    all_rows = [r for rows in by_path.values() for r in rows]
    root = build_summary(all_rows, trace.device)
    total = root.total_device_time_us * _NS_PER_US
    regions: dict[str, Summary] = {}
    for pid in sorted(region_stats, key=lambda p: paths.names[p]):
        prefix = paths.names[pid]
        inside = [
            r
            for p, rows in by_path.items()
            if p and (paths.names[p] == prefix or paths.names[p].startswith(prefix + "/"))
            for r in rows
        ]
        regions[prefix] = replace(
            build_summary(inside, trace.device),
            region_stats=region_stats[pid],
            direct_rows=build_summary(by_path.get(pid, []), trace.device, total).rows,
        )
    labels = compiled_graph_labels(trace, compiled_functions)
    labels.update(kernel_labels([r.name for r in root.rows if r.name.startswith("_Z")]))
    if labels:
        regions = {p: replace(r, labels=labels) for p, r in regions.items()}
    summary = replace(
        root,
        regions=regions,
        direct_rows=build_summary(by_path.get(0, []), trace.device, total).rows,
        labels=labels,
        device_classes=device_classes(trace, root.rows),
    )
    if not trace.inputs:
        return summary
    from .. import _config
    from .roofline import attach_roofline
    from .roofs import limits_for_trace

    if limits is None:
        limits = _config.current().device_limits or limits_for_trace(trace)
    with_roofs: Summary = attach_roofline(summary, limits)
    return with_roofs


@dataclass
class _Tree:
    """The CPU events (ops, regions, runtime calls) nested per thread; every array is indexed
    by position in nesting order. ``parent`` is -1 for a root; after folding, a folded node is
    not ``alive`` and its children point at the node it was folded into."""

    idx: Any  # position of each node in the trace
    parent: Any
    depth: Any
    name: Any  # name ids
    start: Any
    dur: Any
    is_region: Any
    alive: Any

    @property
    def size(self) -> int:
        return int(self.idx.size)

    def deepest(self) -> int:
        return int(self.depth.max()) if self.size else -1

    def has_parent(self) -> Any:
        return (self.parent >= 0) & self.alive


@dataclass
class _DeviceWork:
    """Device time on the ops that launched it: ``self_dev`` (before folding: an op's own
    kernels), the first start and last end of that work, and the device events launched outside
    any op (a graph replay, a communication thread) or whose op is not in the trace."""

    self_dev: Any
    first: Any
    last: Any
    unlinked: Any
    unlinked_node: Any = None  #: tree node of each unlinked event's runtime call (-1: none)


@dataclass
class _Times:
    self_dev: Any
    total_dev: Any
    self_cpu: Any
    in_compile: Any
    compile_self: Any
    first: Any
    last: Any


@dataclass
class _Paths:
    names: list[str]  # path id -> "outer/inner" ("" for no region)
    of: Any  # node -> path id of its innermost enclosing region (itself included)
    is_real_region: Any  # regions, not torch's ProfilerStep# markers


def _cpu_tree(trace: Trace) -> _Tree:
    import numpy as np

    from .nesting import nest_kinds

    # shared with the memory stage, which attributes allocations to this same tree
    cpu, nesting = nest_kinds(trace, (EventKind.OP, EventKind.REGION, EventKind.RUNTIME))
    idx = cpu[nesting.order]
    return _Tree(
        idx=idx,
        parent=nesting.parent.copy(),
        depth=nesting.depth,
        name=trace.name_id[idx],
        start=trace.start_ns[idx],
        dur=trace.duration_ns[idx],
        is_region=trace.kind[idx] == EventKind.REGION,
        alive=np.ones(idx.size, dtype=bool),
    )


def _link_device_work(trace: Trace, tree: _Tree) -> _DeviceWork:
    """Each device event on the op that launched it (:mod:`.launches`: the innermost op around
    its runtime call); the rest keep the tree node of their runtime call, for their region."""
    import numpy as np

    from .launches import device_launches

    m = tree.size
    launches = device_launches(trace)
    dev_idx = launches.device
    work = _DeviceWork(
        self_dev=np.zeros(m, dtype=np.int64),
        first=np.full(m, np.iinfo(np.int64).max, dtype=np.int64),
        last=np.zeros(m, dtype=np.int64),
        unlinked=dev_idx,
        unlinked_node=launches.runtime_node,
    )
    if not (dev_idx.size and m):
        return work
    node_of = np.full(len(trace), -1, dtype=np.int64)
    node_of[tree.idx] = np.arange(m, dtype=np.int64)
    op_node = np.where(launches.op >= 0, node_of[np.maximum(launches.op, 0)], -1)
    found = op_node >= 0
    op_pos = op_node[found]
    d_start = trace.start_ns[dev_idx[found]]
    d_dur = trace.duration_ns[dev_idx[found]]
    np.add.at(work.self_dev, op_pos, d_dur)
    np.minimum.at(work.first, op_pos, d_start)
    np.maximum.at(work.last, op_pos, d_start + d_dur)
    work.unlinked = dev_idx[~found]
    work.unlinked_node = launches.runtime_node[~found]
    return work


def _fold_single_child_duplicates(tree: _Tree, work: _DeviceWork) -> None:
    """torch folds a node into a same-named parent whose only child it is (_remove_dup_nodes);
    the survivor takes the kernels of the deepest node folded into it (torch's rule)."""
    import numpy as np

    m = tree.size
    if not m:
        return
    parent, name, depth = tree.parent, tree.name, tree.depth
    has_parent = parent >= 0
    pp = np.maximum(parent, 0)
    n_children = np.bincount(parent[has_parent], minlength=m)
    folded = has_parent & (name[pp] == name) & (n_children[pp] == 1)
    if not bool(folded.any()):
        return
    survivor = parent.copy()
    while True:  # pointer-jump each node's parent past folded nodes to the survivor
        jump = (survivor >= 0) & folded[np.maximum(survivor, 0)]
        if not bool(jump.any()):
            break
        survivor = np.where(jump, parent[np.maximum(survivor, 0)], survivor)
    folded_pos = np.flatnonzero(folded)
    top = survivor[folded_pos]
    deepest_key = np.full(m, -1, dtype=np.int64)
    np.maximum.at(deepest_key, top, depth[folded_pos] * m + folded_pos)
    tops = np.flatnonzero(deepest_key >= 0)
    deepest = deepest_key[tops] % m
    for column in (work.self_dev, work.first, work.last):
        column[tops] = column[deepest]
    tree.alive = ~folded
    tree.parent = survivor


def _node_times(trace: Trace, tree: _Tree, work: _DeviceWork) -> _Times:
    """Self CPU time, compilation (a compile phase by name, as the diagnosis classifies it, and
    everything nested inside one: torch.compile runs real aten ops while it traces), and the
    inclusive device time of every node."""
    import numpy as np

    from .diagnosis.categories import is_compile

    m = tree.size
    has_parent = tree.has_parent()
    child_dur = np.zeros(m, dtype=np.int64)
    np.add.at(child_dur, tree.parent[has_parent], tree.dur[has_parent])
    self_cpu = tree.dur - child_dur
    compile_name = np.fromiter((is_compile(n) for n in trace.names), dtype=bool, count=len(trace.names))
    in_compile = compile_name[tree.name] if compile_name.size else np.zeros(m, dtype=bool)
    for d in range(1, tree.deepest() + 1):  # a (surviving) parent is always shallower
        level = np.flatnonzero((tree.depth == d) & has_parent)
        in_compile[level] |= in_compile[tree.parent[level]]
    compile_self = np.where(in_compile, self_cpu, 0)
    self_dev, first, last = work.self_dev, work.first, work.last
    if trace.device == "cpu":  # the CPU op time is the device time, compilation excepted
        self_dev = self_cpu - compile_self
        first, last = tree.start, tree.start + tree.dur
    else:
        no_dev = first == np.iinfo(np.int64).max
        first = np.where(no_dev, tree.start, first)
        last = np.where(no_dev, tree.start + tree.dur, last)
    total_dev = self_dev.copy()
    for d in range(tree.deepest(), 0, -1):  # bottom-up: each node's inclusive time to its parent
        level = np.flatnonzero((tree.depth == d) & has_parent)
        np.add.at(total_dev, tree.parent[level], total_dev[level])
    return _Times(self_dev, total_dev, self_cpu, in_compile, compile_self, first, last)


def _region_paths(trace: Trace, tree: _Tree) -> _Paths:
    """The region path of every node, level by level from the roots."""
    import numpy as np

    n_names = max(len(trace.names), 1)
    names: list[str] = [""]
    path_of = np.zeros(tree.size, dtype=np.int64)
    known: dict[tuple[int, int], int] = {}
    is_step = np.array([n.startswith(_STEP_MARKER) for n in trace.names] or [False], dtype=bool)
    is_real_region = tree.is_region & ~is_step[tree.name] if tree.size else tree.is_region
    for d in range(tree.deepest() + 1):
        level = np.flatnonzero(tree.depth == d)
        inherited = np.where(tree.parent[level] >= 0, path_of[np.maximum(tree.parent[level], 0)], 0)
        path_of[level] = inherited
        reg = level[is_real_region[level]]
        if not reg.size:
            continue
        pair_key = inherited[is_real_region[level]] * n_names + tree.name[reg]
        uniq, inv = np.unique(pair_key, return_inverse=True)
        ids = []
        for key in uniq.tolist():
            parent_path, name_id = divmod(key, n_names)
            if (parent_path, name_id) not in known:
                prefix = names[parent_path]
                known[(parent_path, name_id)] = len(names)
                names.append(f"{prefix}/{trace.names[name_id]}" if prefix else trace.names[name_id])
            ids.append(known[(parent_path, name_id)])
        path_of[reg] = np.array(ids, dtype=np.int64)[inv.reshape(-1)]
    return _Paths(names, path_of, is_real_region)


def _ops_by_region_path(trace: Trace, tree: _Tree, work: _DeviceWork, t: _Times, paths: _Paths) -> dict[int, list[_Row]]:
    """Ops (not regions) of surviving nodes aggregated per (region path, name); device work
    whose launching op is not in the trace gets a row of its own, named after it."""
    import numpy as np

    n_names = max(len(trace.names), 1)
    rows = tree.alive & ~tree.is_region
    region_of_row = np.where(tree.is_region, 0, paths.of)  # an op's path is its enclosing region's
    # inclusive times count a call nested in a same-named one once (its time is in the outer's)
    inner = _inside_same_name(tree)
    groups = _aggregate(
        key=region_of_row[rows] * n_names + tree.name[rows],
        calls=np.ones(int(rows.sum()), dtype=np.int64),
        dev=np.where(inner, 0, t.total_dev)[rows],
        self_dev=t.self_dev[rows],
        cpu=np.where(inner, 0, tree.dur)[rows],
        self_cpu=t.self_cpu[rows],
        first=t.first[rows],
        last=t.last[rows],
        comp=t.compile_self[rows],
        comp_calls=t.in_compile[rows].astype(np.int64),
    )
    if work.unlinked.size:
        ud = trace.duration_ns[work.unlinked]
        us = trace.start_ns[work.unlinked]
        zeros = np.zeros_like(ud)
        # in the region its launching call ran in (a graph replayed inside record_function)
        node = work.unlinked_node if work.unlinked_node is not None else np.full(ud.size, -1)
        region = np.where(node >= 0, paths.of[np.maximum(node, 0)], 0) if tree.size else np.zeros_like(ud)
        groups.extend(
            _aggregate(
                key=region * n_names + trace.name_id[work.unlinked],
                calls=np.ones_like(ud),
                dev=ud,
                self_dev=ud,
                cpu=zeros,
                self_cpu=zeros,
                first=us,
                last=us + ud,
                comp=zeros,
                comp_calls=zeros,
            )
        )
    by_path: dict[int, list[_Row]] = {}
    for g in groups:
        path_id, name_id = divmod(g[0], n_names)
        by_path.setdefault(path_id, []).append((trace.names[name_id],) + g[1:])
    return by_path


def _inside_same_name(tree: _Tree) -> Any:
    """Nodes with a (surviving) ancestor of the same name: ``aten::copy_`` inside ``aten::copy_``."""
    import numpy as np

    inner = np.zeros(tree.size, dtype=bool)
    anc = np.where(tree.has_parent(), tree.parent, -1)
    while True:
        live = anc >= 0
        if not live.any():
            return inner
        inner |= live & (tree.name[np.maximum(anc, 0)] == tree.name)
        anc = np.where(live, tree.parent[np.maximum(anc, 0)], -1)


def _region_occurrences(tree: _Tree, paths: _Paths) -> dict[int, RegionStats]:
    """How often each region path ran, and its wall time."""
    import numpy as np

    live = np.flatnonzero(paths.is_real_region & tree.alive)
    if not live.size:
        return {}
    start, dur = tree.start[live], tree.dur[live]
    return {
        g[0]: RegionStats(paths.names[g[0]], g[1], g[2] / _NS_PER_US, g[6], g[7])
        for g in _aggregate(
            key=paths.of[live],
            calls=np.ones_like(live),
            dev=dur,
            self_dev=dur,
            cpu=dur,
            self_cpu=dur,
            first=start,
            last=start + dur,
            comp=np.zeros_like(live),
            comp_calls=np.zeros_like(live),
        )
    }


def _aggregate(
    *,
    key: np.ndarray,
    calls: np.ndarray,
    dev: np.ndarray,
    self_dev: np.ndarray,
    cpu: np.ndarray,
    self_cpu: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    comp: np.ndarray,
    comp_calls: np.ndarray,
) -> list[_Row]:
    """Group by ``key``: sums of the measures, min of ``first``, max of ``last``.

    Tuples: (key, calls, dev, self_dev, cpu, self_cpu, first, last, comp, comp_calls).
    """
    import numpy as np

    if key.size == 0:
        return []
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    k = int(uniq.size)
    sums = np.zeros((7, k), dtype=np.int64)
    for row, values in enumerate((calls, dev, self_dev, cpu, self_cpu, comp, comp_calls)):
        np.add.at(sums[row], inv, values)
    lo = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, inv, first)
    hi = np.zeros(k, dtype=np.int64)
    np.maximum.at(hi, inv, last)
    return [
        (key_, c, d, sd, cp, scp, f, l_, cm, cc)
        for key_, (c, d, sd, cp, scp, cm, cc), f, l_ in zip(uniq.tolist(), sums.T.tolist(), lo.tolist(), hi.tolist())
    ]


def build_summary(rows: list[_Row], device: str, pct_base_ns: float | None = None) -> Summary:
    """Merge (name, calls, dev, self_dev, cpu, self_cpu, first, last, comp, comp_calls) tuples by name
    into a Summary: :func:`summarize` here, and the fold of windows' summaries (analysis/fold.py).

    ``device_pct`` is relative to ``pct_base_ns`` (default: these rows' own total).
    """
    merged: dict[str, list[Any]] = {}
    works: dict[str, OpWork] = {}
    for name, c, d, sd, cp, scp, f, l_, cm, cc, *extra in rows:
        if extra and extra[0] is not None:
            works[name] = works[name].combine(extra[0]) if name in works else extra[0]
        acc = merged.get(name)
        if acc is None:
            merged[name] = [c, d, sd, cp, scp, f, l_, cm, cc]
        else:
            acc[0] += c
            acc[1] += d
            acc[2] += sd
            acc[3] += cp
            acc[4] += scp
            acc[5] = min(acc[5], f)
            acc[6] = max(acc[6], l_)
            acc[7] += cm
            acc[8] += cc
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
            compile_time_us=cm / _NS_PER_US,
            compile=c > 0 and cc == c,
            work=works.get(name),
        )
        for name, (c, d, sd, cp, scp, f, l_, cm, cc) in merged.items()
    ]
    out.sort(key=lambda r: (-r.self_device_time_us, -r.device_time_us, r.name))
    return Summary(rows=tuple(out), device=device)
