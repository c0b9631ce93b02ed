"""What the comparison of a job's ranks gives back: the per-rank table, the straggler, per-step rows.

:class:`RankComparison` (``neuronscope ranks``, ``ns.compare_ranks``) holds a :class:`RankRow` per
rank, a :class:`StepRow` per step and the :class:`Straggler`, if any; :data:`RANK_COLUMNS` is the
per-rank table every renderer draws (text, terminal, HTML). :mod:`.ranks` computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .units import format_us

__all__ = [
    "COMPARISON_SCHEMA_VERSION",
    "RANK_COLUMNS",
    "RANK_HEADER",
    "RankColumn",
    "RankComparison",
    "RankRow",
    "StepRow",
    "Straggler",
    "rank_label",
]

COMPARISON_SCHEMA_VERSION = 1


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
