"""Compare two summaries: what got slower, what got faster, what appeared or vanished.

    d = diff_summaries(before, after)
    d.total.pct                      # +12.5: total self device time grew 12.5 %
    d.ops[0]                         # the op whose self device time changed most (either way)
    d.regressions(5.0, ops=["aten::mm"])   # total and aten::mm, where they grew more than 5 %

``explain_diff`` goes further with the two runs' diagnoses: it splits the change in *wall
time* exactly into ops (their share of busy time) and idle classes (host_wait, launch,
sync, ...), largest first, summing to the total change. ``explain_memory_diff`` does the
same for the memory peak of two ``memory=True`` runs: what each (op, region) held at the peak.

Ops are matched by name, regions by path. "A" is the baseline, "B" the candidate; a
positive delta means B is slower. Percentages are relative to A and are ``None`` when A is
zero (an op that only B has cannot be expressed as a percentage of nothing).

Like with like: two runs of one script may record different shares of their time (a long run
is profiled in windows, paused while each is analysed; a limit stops recording), so their
totals are not comparable. :func:`choose_basis` decides from both runs' :class:`RunExtent`
what to divide by — each side's recorded steps (``per_step``), else its recorded seconds
(``per_recorded_second``) when the coverage or the windows differ, else nothing (``total``) —
and ``diff_summaries(..., normalised=...)`` / ``explain_diff(..., normalised=...)`` divide every
figure by it; :meth:`SummaryDiff.headline` leads with the median step change when both runs
have steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..errors import ConfigurationError
from .summary import OpStats, Summary
from .units import format_us

__all__ = [
    "DIFF_OP_COLUMNS",
    "DIFF_REGION_COLUMNS",
    "DiffColumn",
    "DIFF_SCHEMA_VERSION",
    "Contribution",
    "Delta",
    "Explanation",
    "MemoryContribution",
    "MemoryExplanation",
    "Normalisation",
    "OpDelta",
    "RegionDelta",
    "Regression",
    "RunExtent",
    "SummaryDiff",
    "choose_basis",
    "diff_summaries",
    "explain_diff",
    "explain_memory_diff",
    "tone",
]

#: Version of :meth:`SummaryDiff.to_dict`'s layout; bumped on any incompatible change.
DIFF_SCHEMA_VERSION = 1

Presence = Literal["both", "only_a", "only_b"]
Basis = Literal["per_step", "per_recorded_second", "total"]

#: coverages (recorded / wall time) further apart than this many points are not comparable as totals
COVERAGE_TOLERANCE_PCT = 3.0

_BASIS_LABEL = {"per_step": "per step", "per_recorded_second": "per recorded s", "total": ""}
#: what the ops' figures are per: a summary holds the recorded steps' ops only
_FIGURES_LABEL = {"per_step": "per recorded step", "per_recorded_second": "per recorded s", "total": ""}
_BASIS_WORDS = {"per_step": "per step", "per_recorded_second": "per recorded second", "total": "as totals"}
#: the unit suffix of a figure line (``-1.234 ms/step``)
_BASIS_UNIT = {"per_step": "/step", "per_recorded_second": "/recorded s", "total": ""}


@dataclass(frozen=True)
class RunExtent:
    """How much of one run its summary holds: what a diff divides by to compare like with like."""

    recorded_us: float  #: time recorded (what the summary's ops ran in)
    wall_us: float  #: the run's wall time, recorded or not
    windows: int = 1  #: windows it was profiled in
    steps_recorded: int = 0  #: steps whose ops the summary holds (0: no steps, or not known)
    steps_timed: int = 0  #: steps the run timed, recorded or not (the step percentiles' count)
    p50_step_us: float | None = None  #: the median step time (None: no steps)

    @property
    def coverage_pct(self) -> float:
        return 100.0 * self.recorded_us / self.wall_us if self.wall_us > 0 else 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps_recorded": self.steps_recorded,
            "steps_timed": self.steps_timed,
            "recorded_s": round(self.recorded_us / 1e6, 6),
            "wall_s": round(self.wall_us / 1e6, 6),
            "coverage_pct": round(self.coverage_pct, 2),
            "windows": self.windows,
            "p50_step_us": None if self.p50_step_us is None else round(self.p50_step_us, 3),
        }


@dataclass(frozen=True)
class Normalisation:
    """What a diff divides each side's figures by, and why (see :func:`choose_basis`)."""

    basis: Basis = "total"
    a: RunExtent | None = None  #: None: not known (a bare Summary)
    b: RunExtent | None = None
    why: tuple[str, ...] = ()  #: what differs: ``coverage 74% vs 57%``, ``windows 6 vs 4``, ``steps recorded 600 vs 450``

    def __post_init__(self) -> None:
        if self.basis not in _BASIS_LABEL:
            raise ConfigurationError(f"Normalisation(basis={self.basis!r}): use one of {', '.join(_BASIS_LABEL)}")
        for side, e in (("a", self.a), ("b", self.b)):
            if self.basis == "total":
                continue
            if e is None or (e.steps_recorded if self.basis == "per_step" else e.recorded_us) <= 0:
                raise ConfigurationError(f"Normalisation({self.basis}): side {side} has nothing to divide by ({e!r})")

    @property
    def label(self) -> str:
        """``per step``, ``per recorded s``, or ``""`` for totals."""
        return _BASIS_LABEL[self.basis]

    @property
    def figures_label(self) -> str:
        """What the ops' figures are per: ``per recorded step``, ``per recorded s``, or ``""``."""
        return _FIGURES_LABEL[self.basis]

    @property
    def unit(self) -> str:
        return _BASIS_UNIT[self.basis]

    def divisor(self, side: Literal["a", "b"]) -> float:
        """What that side's totals are divided by: its recorded steps or recorded seconds (1 for totals)."""
        e = self.a if side == "a" else self.b
        if e is None or self.basis == "total":
            return 1.0
        if self.basis == "per_step":
            return float(e.steps_recorded)
        return e.recorded_us / 1e6

    @property
    def p50_step_us(self) -> tuple[float, float] | None:
        """Both runs' median step times, when both have steps."""
        if self.a is None or self.b is None or self.a.p50_step_us is None or self.b.p50_step_us is None:
            return None
        return self.a.p50_step_us, self.b.p50_step_us

    def reason(self) -> str:
        """``compared per step: coverage 74% vs 57%, steps recorded 600 vs 450`` ('' for totals)."""
        if self.basis == "total":
            return ""
        return f"compared {_BASIS_WORDS[self.basis]}: " + ", ".join(self.why)

    def to_dict(self) -> dict[str, Any]:
        def side(e: RunExtent | None, key: Literal["a", "b"]) -> dict[str, Any] | None:
            if e is None:
                return None
            divisor = self.divisor(key)  # steps are a count; seconds keep 6 decimals (a microsecond)
            return {"divisor": round(divisor, 6) if self.basis == "per_recorded_second" else int(divisor), **e.to_dict()}

        differ = _differences(self.a, self.b) if self.a is not None and self.b is not None else {}
        return {
            "basis": self.basis,
            "label": self.label,
            "a": side(self.a, "a"),
            "b": side(self.b, "b"),
            "why": differ,
            "reason": self.reason(),
        }


def _differences(a: RunExtent, b: RunExtent) -> dict[str, dict[str, Any]]:
    """What makes two runs' totals incomparable: coverage, windows, recorded steps (a, b, differ)."""
    cov_a, cov_b = round(a.coverage_pct, 2), round(b.coverage_pct, 2)
    return {
        "coverage_pct": {"a": cov_a, "b": cov_b, "differ": abs(cov_a - cov_b) > COVERAGE_TOLERANCE_PCT},
        "windows": {"a": a.windows, "b": b.windows, "differ": a.windows != b.windows},
        "steps_recorded": {
            "a": a.steps_recorded,
            "b": b.steps_recorded,
            "differ": a.steps_recorded != b.steps_recorded and bool(a.steps_recorded and b.steps_recorded),
        },
    }


def choose_basis(a: RunExtent | None, b: RunExtent | None) -> Normalisation:
    """How to compare two runs: ``total`` when they recorded alike (same coverage within
    :data:`COVERAGE_TOLERANCE_PCT` points, same windows, same recorded steps) or either is not
    known; else ``per_step`` when both recorded steps, else ``per_recorded_second``."""
    if a is None or b is None:
        return Normalisation("total", a, b)
    differ = _differences(a, b)
    words = {
        "coverage_pct": "coverage {a:.0f}% vs {b:.0f}%",
        "windows": "windows {a} vs {b}",
        "steps_recorded": "steps recorded {a} vs {b}",
    }
    why = tuple(words[k].format(**v) for k, v in differ.items() if v["differ"])
    if not why:
        return Normalisation("total", a, b)
    if a.steps_recorded > 0 and b.steps_recorded > 0:
        return Normalisation("per_step", a, b, why)
    if a.recorded_us > 0 and b.recorded_us > 0:
        return Normalisation("per_recorded_second", a, b, why)
    return Normalisation("total", a, b, why)  # nothing to divide by: totals, and the JSON says why they differ


@dataclass(frozen=True)
class Delta:
    """One measure in A and in B (ints for counts). ``pct`` is ``100 * (b - a) / a``;
    0.0 when both are zero, None when only ``a`` is zero."""

    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def pct(self) -> float | None:
        if self.a == 0:
            return 0.0 if self.b == 0 else None
        return (self.b / self.a - 1.0) * 100.0  # exactly 0 for no change, -100 for a vanished op

    def regressed(self, pct: float) -> bool:
        """True when B grew more than ``pct`` percent over A (growth from zero always counts)."""
        p = self.pct
        return (self.b > 0) if p is None else p > pct

    def to_dict(self) -> dict[str, Any]:
        # Times are microseconds from nanosecond data: 3 decimals are exact, more is float noise.
        pct = self.pct
        return {"a": _r(self.a, 3), "b": _r(self.b, 3), "delta": _r(self.delta, 3), "pct": None if pct is None else round(pct, 4)}


@dataclass(frozen=True)
class OpDelta:
    """An op's numbers in A and B (zeros on the side that lacks it)."""

    name: str
    presence: Presence
    calls: Delta
    self_device_time_us: Delta
    device_time_us: Delta
    self_cpu_time_us: Delta

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "presence": self.presence,
            "calls": self.calls.to_dict(),
            "self_device_time_us": self.self_device_time_us.to_dict(),
            "device_time_us": self.device_time_us.to_dict(),
            "self_cpu_time_us": self.self_cpu_time_us.to_dict(),
        }


@dataclass(frozen=True)
class RegionDelta:
    """A region's occurrences, wall time and the self device time of the ops inside it."""

    path: str
    presence: Presence
    occurrences: Delta
    wall_time_us: Delta
    device_time_us: Delta

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "presence": self.presence,
            "occurrences": self.occurrences.to_dict(),
            "wall_time_us": self.wall_time_us.to_dict(),
            "device_time_us": self.device_time_us.to_dict(),
        }


def pct_text(p: float | None, presence: str = "both") -> str:
    """A change in percent as the tables show it: ``+12.5%``, ``new``, ``gone``."""
    if presence == "only_b" or p is None:
        return "new"
    if presence == "only_a":
        return "gone"
    return f"{p:+.1f}%"


def signed_us(us: float) -> str:
    """A difference in time as the tables show it: ``+1.2ms``, ``-300us``, ``±0us``."""
    return ("+" if us > 0 else "-" if us < 0 else "±") + format_us(abs(us))


@dataclass(frozen=True)
class DiffColumn:
    """One column of a diff table: the terminal, the HTML report and ``--json`` read this one
    spec, so they show the same columns in the same order."""

    key: str  #: the JSON key (a Delta's field path), also the HTML column's id
    header: str
    priority: int  #: a narrow terminal drops the highest number first
    text: Any  #: row -> the cell's text
    value: Any  #: row -> the number it sorts by (None: not a number)
    tone: Any = None  #: row -> "worse" | "better" | "" (the cell's colour), or None


def tone(d: Delta, presence: str) -> str:
    """A change's colour as the tables show it: ``"worse"``, ``"better"`` or ``""`` (within 1%);
    the diff columns here and the terminal's percent cells read it."""
    if presence == "only_b":
        return "worse"
    if presence == "only_a":
        return "better"
    p = d.pct
    return "worse" if p is not None and p > 1.0 else "better" if p is not None and p < -1.0 else ""


def _count(x: float) -> str:
    """A count as the tables show it: ``12``, or ``2.5`` once divided per step."""
    return str(x) if isinstance(x, int) else f"{x:,.2f}".rstrip("0").rstrip(".")


def _us(x: float) -> str:
    return format_us(x)


#: the per-op table of ``neuronscope diff`` (terminal), the diff report's table (HTML)
DIFF_OP_COLUMNS: tuple[DiffColumn, ...] = (
    DiffColumn(
        "self_device_time_us.a",
        "A",
        3,
        lambda o: _us(o.self_device_time_us.a) if o.presence != "only_b" else "-",
        lambda o: o.self_device_time_us.a,
    ),
    DiffColumn(
        "self_device_time_us.b",
        "B",
        2,
        lambda o: _us(o.self_device_time_us.b) if o.presence != "only_a" else "-",
        lambda o: o.self_device_time_us.b,
    ),
    DiffColumn(
        "self_device_time_us.delta",
        "Δ",
        1,
        lambda o: signed_us(o.self_device_time_us.delta),
        lambda o: o.self_device_time_us.delta,
    ),
    DiffColumn(
        "self_device_time_us.pct",
        "Δ %",
        1,
        lambda o: pct_text(o.self_device_time_us.pct, o.presence),
        lambda o: o.self_device_time_us.pct,
        lambda o: tone(o.self_device_time_us, o.presence),
    ),
    DiffColumn("calls", "Calls A→B", 4, lambda o: f"{_count(o.calls.a)}→{_count(o.calls.b)}", lambda o: o.calls.b),
)

#: the per-region table
DIFF_REGION_COLUMNS: tuple[DiffColumn, ...] = (
    DiffColumn(
        "occurrences", "Runs A→B", 3, lambda r: f"{_count(r.occurrences.a)}→{_count(r.occurrences.b)}", lambda r: r.occurrences.b
    ),
    DiffColumn("wall_time_us.a", "Wall A", 5, lambda r: _us(r.wall_time_us.a), lambda r: r.wall_time_us.a),
    DiffColumn("wall_time_us.b", "Wall B", 5, lambda r: _us(r.wall_time_us.b), lambda r: r.wall_time_us.b),
    DiffColumn(
        "wall_time_us.pct",
        "Wall Δ %",
        2,
        lambda r: pct_text(r.wall_time_us.pct, r.presence),
        lambda r: r.wall_time_us.pct,
        lambda r: tone(r.wall_time_us, r.presence),
    ),
    DiffColumn("device_time_us.a", "Device A", 4, lambda r: _us(r.device_time_us.a), lambda r: r.device_time_us.a),
    DiffColumn("device_time_us.b", "Device B", 4, lambda r: _us(r.device_time_us.b), lambda r: r.device_time_us.b),
    DiffColumn(
        "device_time_us.pct",
        "Device Δ %",
        1,
        lambda r: pct_text(r.device_time_us.pct, r.presence),
        lambda r: r.device_time_us.pct,
        lambda r: tone(r.device_time_us, r.presence),
    ),
)


@dataclass(frozen=True)
class Regression:
    """Something that got slower than a threshold allows. ``pct`` is None for a new op."""

    what: Literal["total", "op"]
    name: str  #: "total device time" for the total, else the op name
    a_us: float  #: in the diff's basis (per step, per recorded s, or the total)
    b_us: float
    pct: float | None
    basis: Basis = "total"

    def describe(self) -> str:
        growth = "new in B" if self.pct is None else f"{self.pct:+.1f}%"
        per = f" {_BASIS_LABEL[self.basis]}" if self.basis != "total" else ""
        return f"{self.name}{per}: {format_us(self.a_us)} -> {format_us(self.b_us)} ({growth})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SummaryDiff:
    """The difference between two summaries; see the module docstring."""

    device_a: str
    device_b: str
    total: Delta  #: total self device time, microseconds
    ops: tuple[OpDelta, ...]  #: sorted by |self device time delta|, largest first
    regions: tuple[RegionDelta, ...]  #: sorted by path
    labels: dict[str, str] = field(default_factory=dict)  #: display labels of both summaries
    #: what every figure above is divided by (each side its own divisor); totals by default
    normalised: Normalisation = field(default_factory=Normalisation)
    raw_total: Delta | None = None  #: total self device time, not divided (us)

    def label(self, name: str) -> str:
        """How tables show the op ``name`` (compiled graphs get readable labels)."""
        from .names import display_name

        return display_name(name, self.labels)

    @property
    def only_in_a(self) -> list[str]:
        return [o.name for o in self.ops if o.presence == "only_a"]

    @property
    def only_in_b(self) -> list[str]:
        return [o.name for o in self.ops if o.presence == "only_b"]

    def op(self, name: str) -> OpDelta:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(f"no op named {name!r} in either summary")

    def __contains__(self, name: object) -> bool:
        return any(o.name == name for o in self.ops)

    def regressions(self, pct: float, ops: Iterable[str] | None = None, *, total: bool = True) -> list[Regression]:
        """What grew by more than ``pct`` percent of self device time from A to B.

        Checks the total (unless ``total=False``) and each op named in ``ops``. An op that
        only B has counts as a regression; one that only A has (or neither) does not.
        Raises KeyError for an op name found in neither summary (a typo should not pass a gate).
        """
        if not isinstance(pct, (int, float)) or isinstance(pct, bool) or math.isnan(pct) or pct < 0:
            raise ConfigurationError(f"regressions(pct={pct!r}): use a non-negative number of percent")
        found: list[Regression] = []
        basis = self.normalised.basis  # the figures are already divided: the gate compares like with like
        if total and self.total.regressed(pct):
            found.append(Regression("total", "total device time", self.total.a, self.total.b, self.total.pct, basis))
        for name in ops or ():
            d = self.op(name).self_device_time_us
            if d.regressed(pct):
                found.append(Regression("op", name, d.a, d.b, d.pct, basis))
        return found

    def headline(self) -> str:
        """The one line that says what changed: the median step change when both runs have
        steps (what the user waits for), else the self device time in the diff's basis."""
        steps = self.normalised.p50_step_us
        if steps is None:
            return self.device_time_line()
        pa, pb = steps
        if pa == pb:
            return f"B is as fast as A per step: median step {format_us(pa)} -> {format_us(pb)}"
        pct = f"{abs(100.0 * (pb - pa) / pa):.1f}% " if pa > 0 else ""
        word = "slower" if pb > pa else "faster"
        return f"B is {pct}{word} than A per step: median step {format_us(pa)} -> {format_us(pb)} ({(pb - pa) / 1e3:+.3f} ms per step)"

    def device_time_line(self) -> str:
        """``self device time per recorded step 5.685ms -> 1.261ms  -77.8%  (-4.424ms)``, and
        when the median step moved the other way, says so."""
        t = self.total
        n = self.normalised
        what = "self device time" + (f" {n.figures_label}" if n.figures_label else "")
        line = f"{what} {format_us(t.a)} -> {format_us(t.b)}  {pct_text(t.pct)}  ({signed_us(t.delta)})"
        return line + (f"  ({self.other_way_note()})" if self.moved_apart else "")

    def other_way_note(self) -> str:
        """What to say when the ops' time and the median step moved apart (the headline follows the steps)."""
        per = self.normalised.figures_label
        return f"the ops' time{' ' + per if per else ''} moved the other way from the median step"

    @property
    def moved_apart(self) -> bool:
        """Whether the ops' self device time and the median step changed in opposite directions."""
        steps = self.normalised.p50_step_us
        return steps is not None and (steps[1] - steps[0]) * self.total.delta < 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": DIFF_SCHEMA_VERSION,
            "device_a": self.device_a,
            "device_b": self.device_b,
            "headline": self.headline(),
            "total_device_time_us": self.total.to_dict(),
            "ops": [o.to_dict() for o in self.ops],
            "regions": [r.to_dict() for r in self.regions],
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "normalised": {
                **self.normalised.to_dict(),
                "raw_total_device_time_us": (self.raw_total or self.total).to_dict(),
            },
        }


def _r(x: float, digits: int) -> float:
    return x if isinstance(x, int) else round(x, digits)


def _presence(in_a: bool, in_b: bool) -> Presence:
    return "both" if in_a and in_b else ("only_a" if in_a else "only_b")


def _scaled(x: float, divisor: float) -> float:
    """``x / divisor``; a count stays an int when nothing is divided."""
    return x if divisor == 1.0 else x / divisor


def diff_summaries(a: Summary, b: Summary, *, normalised: Normalisation | None = None) -> SummaryDiff:
    """Per-op and per-region deltas from baseline ``a`` to candidate ``b``, each side divided
    by its own divisor in ``normalised`` (see :func:`choose_basis`; default: totals)."""
    n = normalised or Normalisation()
    da, db = n.divisor("a"), n.divisor("b")

    def pair(x: float, y: float) -> Delta:
        return Delta(_scaled(x, da), _scaled(y, db))

    rows_a = {r.name: r for r in a.rows}
    rows_b = {r.name: r for r in b.rows}
    ops: list[OpDelta] = []
    for name in rows_a.keys() | rows_b.keys():
        ra, rb = rows_a.get(name), rows_b.get(name)

        def both(field: str, ra: OpStats | None = ra, rb: OpStats | None = rb) -> Delta:
            zero = 0 if field == "calls" else 0.0  # calls stay ints in to_dict() (unless divided)
            return pair(getattr(ra, field) if ra else zero, getattr(rb, field) if rb else zero)

        ops.append(
            OpDelta(
                name=name,
                presence=_presence(ra is not None, rb is not None),
                calls=both("calls"),
                self_device_time_us=both("self_device_time_us"),
                device_time_us=both("device_time_us"),
                self_cpu_time_us=both("self_cpu_time_us"),
            )
        )
    ops.sort(key=lambda o: (-abs(o.self_device_time_us.delta), o.name))

    regions: list[RegionDelta] = []
    for path in sorted(a.regions.keys() | b.regions.keys()):
        sa, sb = a.regions.get(path), b.regions.get(path)
        sta = sa.region_stats if sa else None
        stb = sb.region_stats if sb else None
        regions.append(
            RegionDelta(
                path=path,
                presence=_presence(sa is not None, sb is not None),
                occurrences=pair(sta.occurrences if sta else 0, stb.occurrences if stb else 0),
                wall_time_us=pair(sta.wall_time_us if sta else 0.0, stb.wall_time_us if stb else 0.0),
                device_time_us=pair(sa.total_device_time_us if sa else 0.0, sb.total_device_time_us if sb else 0.0),
            )
        )
    return SummaryDiff(
        device_a=a.device,
        device_b=b.device,
        total=pair(a.total_device_time_us, b.total_device_time_us),
        ops=tuple(ops),
        regions=tuple(regions),
        labels={**a.labels, **b.labels},
        normalised=n,
        raw_total=Delta(a.total_device_time_us, b.total_device_time_us),
    )


@dataclass(frozen=True)
class Contribution:
    """One part of the change in wall time: an op's share of busy time, or an idle class."""

    kind: Literal["op", "idle"]
    name: str  #: op name, or the idle class (``host_wait``, ``launch``, ...)
    a_us: float
    b_us: float

    @property
    def delta_us(self) -> float:
        return self.b_us - self.a_us

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "a_us": _r(self.a_us, 3),
            "b_us": _r(self.b_us, 3),
            # from the rounded sides: a saved explanation, rebuilt, says the same
            "delta_us": _r(_r(self.b_us, 3) - _r(self.a_us, 3), 3),
        }


@dataclass(frozen=True)
class Explanation:
    """Why B's wall time differs from A's, exactly: the recorded time is busy time plus idle
    time by class; busy time is split over the ops by their share of self device time. The
    contributions (largest change first) sum to ``delta_us``. Every figure is in the basis of
    ``normalised`` (per recorded step, per recorded second, or the totals)."""

    a_us: float  #: A's recorded time (the profiled wall time, less any pauses), in the basis
    b_us: float
    contributions: tuple[Contribution, ...]
    #: per-step view when both runs have steps: counts (timed; recorded when known) and p50 us of A and of B
    steps: dict[str, Any] | None = None
    regions: tuple[RegionDelta, ...] = ()  #: regions whose wall time changed most (context, not part of the sum)
    #: what changed in communication (context: collectives are already in the ops' busy time):
    #: ``{"a": {...}, "b": {...}}`` with each side's collective_us, exposed_us, overlap_pct and
    #: time per kind (None on a side without collectives); None when neither had any
    communication: dict[str, Any] | None = None
    normalised: Normalisation = field(default_factory=Normalisation)

    @property
    def delta_us(self) -> float:
        return self.b_us - self.a_us

    def lines(self, top: int = 8, labels: dict[str, str] | None = None) -> list[str]:
        from .names import display_name

        n = self.normalised
        unit = f" ms{n.unit}"
        out = [self._first_line()]
        for c in self.contributions[:top]:
            what = display_name(c.name, labels) if c.kind == "op" else f"idle: {c.name}"
            if c.kind == "idle" and c.name == CPU_WAIT:
                what += " (the thread waited for a core: other processes held the CPU)"
            out.append(f"  {c.delta_us / 1e3:+10.3f}{unit}  {what}  ({format_us(c.a_us)} -> {format_us(c.b_us)})")
        rest = sum(c.delta_us for c in self.contributions[top:])
        if len(self.contributions) > top:
            out.append(f"  {rest / 1e3:+10.3f}{unit}  {len(self.contributions) - top} more")
        if self.steps:
            s = self.steps
            recorded = f" timed ({s['a_recorded']} -> {s['b_recorded']} recorded)" if s.get("a_recorded") is not None else ""
            out.append(
                f"  steps: {s['a_count']} -> {s['b_count']}{recorded}, p50 {format_us(s['a_p50_us'])} -> "
                f"{format_us(s['b_p50_us'])} ({(s['b_p50_us'] - s['a_p50_us']) / 1e3:+.3f} ms per step)"
            )
        if self.communication:
            out.append("  " + _communication_line(self.communication, n.label))
        return out

    def _first_line(self) -> str:
        """``B is 1.2ms faster than A per recorded step (-9.1%): 13.1ms -> 11.9ms`` (per recorded
        second, the recorded time is 1 s on both sides: the line says how it was spent)."""
        n = self.normalised
        if n.basis == "per_recorded_second":
            busy = [sum(getattr(c, side) for c in self.contributions if c.kind == "op") for side in ("a_us", "b_us")]
            return (
                f"per recorded s: busy {format_us(busy[0])} -> {format_us(busy[1])} ({(busy[1] - busy[0]) / 1e3:+.3f} ms), "
                "the rest idle (the parts below are ms per recorded s)"
            )
        sign = "slower" if self.delta_us > 0 else "faster"
        per = f" {n.figures_label}" if n.figures_label else ""
        pct = f" ({100 * self.delta_us / self.a_us:+.1f}%)" if self.a_us else ""
        return f"B is {format_us(abs(self.delta_us))} {sign} than A{per}{pct}: {format_us(self.a_us)} -> {format_us(self.b_us)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "a_us": _r(self.a_us, 3),
            "b_us": _r(self.b_us, 3),
            # from the rounded sides: a saved explanation, rebuilt, says the same
            "delta_us": _r(_r(self.b_us, 3) - _r(self.a_us, 3), 3),
            "contributions": [c.to_dict() for c in self.contributions],
            "steps": self.steps,
            "regions": [r.to_dict() for r in self.regions],
            "communication": self.communication,
            "normalised": self.normalised.to_dict(),
        }


def _communication_side(d: Any, divisor: float = 1.0) -> dict[str, Any] | None:
    c = getattr(d, "communication", None)
    if c is None:
        return None
    return {
        "collective_us": _r(c.collective_us / divisor, 3),
        "exposed_us": _r(c.exposed_us / divisor, 3),
        "overlap_pct": _r(c.overlap_pct, 2),
        "by_kind": {k.kind: _r(k.time_us / divisor, 3) for k in c.by_kind},
    }


def _communication_line(comm: dict[str, Any], per: str = "") -> str:
    """``communication: exposed 55.3ms -> 12.1ms (-43.200 ms), collectives 71.5ms -> 70.0ms,
    overlapped 23% -> 83%; all_reduce 47.1ms -> 46.0ms`` (``per``: ``per step``, said after ``communication``)"""
    empty: dict[str, Any] = {"collective_us": 0.0, "exposed_us": 0.0, "overlap_pct": 0.0, "by_kind": {}}
    a, b = comm.get("a") or empty, comm.get("b") or empty
    kinds = sorted(set(a["by_kind"]) | set(b["by_kind"]), key=lambda k: -abs(b["by_kind"].get(k, 0.0) - a["by_kind"].get(k, 0.0)))
    per_kind = ", ".join(f"{k} {format_us(a['by_kind'].get(k, 0.0))} -> {format_us(b['by_kind'].get(k, 0.0))}" for k in kinds[:3])
    return (
        f"communication{' ' + per if per else ''}: exposed {format_us(a['exposed_us'])} -> {format_us(b['exposed_us'])} "
        f"({(b['exposed_us'] - a['exposed_us']) / 1e3:+.3f} ms), collectives {format_us(a['collective_us'])} -> "
        f"{format_us(b['collective_us'])}, overlapped {a['overlap_pct']:.0f}% -> {b['overlap_pct']:.0f}%"
        + (f"; {per_kind}" if per_kind else "")
    )


#: the contribution of the time the profiled thread waited for a core (other processes held them)
CPU_WAIT = "cpu_wait"


def _without_cpu_wait(d: Any) -> tuple[float, dict[str, float]]:
    """A CPU timeline's busy and idle time without the time its thread waited for a core
    (:func:`.diagnosis.model.without_waiting`), which the explanation then shows as its own part,
    ``idle: cpu_wait``: on a loaded machine one time slice of another process (~4 ms) lands in
    whichever op was running and would otherwise read as that op growing from 10 us to 4 ms."""
    contention = getattr(d, "contention", None)
    if contention is None or getattr(d, "timeline", None) != "cpu_main_thread":
        return d.device_busy_us, dict(d.idle_us_by_class)
    from .diagnosis.model import without_waiting

    return without_waiting(d.device_busy_us, d.idle_us_by_class, contention)


def _without_op_wait(
    ops: dict[str, float], wait_us: float, calls: dict[str, int], other_per_call: dict[str, float]
) -> dict[str, float]:
    """The ops' times less ``wait_us`` of waiting for a core. A preemption lands in one call of
    one op: first from the ops that took longer per call than on the other side (up to that
    excess, in proportion to it), the rest in proportion to their time."""
    if wait_us <= 0:
        return ops
    excess = {n: max(us - calls.get(n, 0) * other_per_call[n], 0.0) for n, us in ops.items() if n in other_per_call}
    total_excess = sum(excess.values())
    taken = min(wait_us, total_excess)
    out = {n: us - (taken * excess.get(n, 0.0) / total_excess if total_excess > 0 else 0.0) for n, us in ops.items()}
    rest, left = wait_us - taken, sum(out.values())
    if rest > 0 and left > 0:
        keep = max(left - rest, 0.0) / left
        out = {n: us * keep for n, us in out.items()}
    return out


def _recorded_us(d: Any) -> float:
    """A diagnosis' recorded time: busy plus idle. For a run profiled in windows that is the
    windows' time, not the span from the first to the last (the pauses between are not in it)."""
    return float(d.evidence.get("recorded_us", d.window_us)) if isinstance(getattr(d, "evidence", None), dict) else d.window_us


def explain_diff(a: Summary, b: Summary, diag_a: Any, diag_b: Any, *, normalised: Normalisation | None = None) -> Explanation:
    """Attribute the change in wall time from A to B to ops and idle classes (see
    :class:`Explanation`), each side divided by its divisor in ``normalised`` (default: totals)."""
    n = normalised or Normalisation()

    def op_parts(summary: Summary, d: Any) -> dict[str, float]:
        """Each op's share of the busy time (its share of self device time)."""
        total = summary.total_device_time_us
        if total <= 0:
            return {"(device work)": d.device_busy_us} if d.device_busy_us else {}
        return {r.name: d.device_busy_us * r.self_device_time_us / total for r in summary.rows if r.self_device_time_us}

    def per_call(summary: Summary, d: Any) -> dict[str, float]:
        calls = {r.name: r.calls for r in summary.rows}
        return {name: us / calls[name] for name, us in op_parts(summary, d).items() if calls.get(name)}

    def parts(
        summary: Summary, d: Any, divisor: float, other: dict[str, float]
    ) -> dict[tuple[Literal["op", "idle"], str], float]:
        out: dict[tuple[Literal["op", "idle"], str], float] = {}
        busy_us, idle_us = _without_cpu_wait(d)
        calls = {r.name: r.calls for r in summary.rows}
        ops = _without_op_wait(op_parts(summary, d), d.device_busy_us - busy_us, calls, other)
        for name, us in ops.items():
            out[("op", name)] = us / divisor
        for cls, us in idle_us.items():
            out[("idle", cls)] = us / divisor
        waited = (d.device_busy_us + sum(d.idle_us_by_class.values())) - (busy_us + sum(idle_us.values()))
        if waited > 0:
            out[("idle", CPU_WAIT)] = waited / divisor
        return out

    da, db = n.divisor("a"), n.divisor("b")
    pa, pb = parts(a, diag_a, da, per_call(b, diag_b)), parts(b, diag_b, db, per_call(a, diag_a))
    contributions = [
        Contribution(kind, name, pa.get((kind, name), 0.0), pb.get((kind, name), 0.0)) for kind, name in pa.keys() | pb.keys()
    ]
    contributions = [c for c in contributions if c.a_us or c.b_us]
    contributions.sort(key=lambda c: (-abs(c.delta_us), c.kind, c.name))
    steps = None
    if diag_a.steps is not None and diag_b.steps is not None:
        steps = {
            "a_count": diag_a.steps.count,
            "b_count": diag_b.steps.count,
            "a_p50_us": round(diag_a.steps.p50_us, 3),
            "b_p50_us": round(diag_b.steps.p50_us, 3),
        }
        recorded = (n.a.steps_recorded, n.b.steps_recorded) if n.a is not None and n.b is not None else None
        if recorded is not None and recorded != (steps["a_count"], steps["b_count"]):  # a windowed run records some
            steps |= {"a_recorded": recorded[0], "b_recorded": recorded[1]}
    regions = tuple(sorted(diff_summaries(a, b, normalised=n).regions, key=lambda r: -abs(r.wall_time_us.delta))[:5])
    ca, cb = _communication_side(diag_a, da), _communication_side(diag_b, db)
    communication = {"a": ca, "b": cb} if (ca or cb) else None
    return Explanation(
        a_us=_recorded_us(diag_a) / da,
        b_us=_recorded_us(diag_b) / db,
        contributions=tuple(contributions),
        steps=steps,
        regions=regions,
        communication=communication,
        normalised=n,
    )


@dataclass(frozen=True)
class MemoryContribution:
    """What one (op, region) held at the peak in A and in B (``memory=True`` runs)."""

    op: str
    region: str
    a_bytes: int
    b_bytes: int

    @property
    def delta_bytes(self) -> int:
        return self.b_bytes - self.a_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "region": self.region,
            "a_bytes": self.a_bytes,
            "b_bytes": self.b_bytes,
            "delta_bytes": self.delta_bytes,
        }


@dataclass(frozen=True)
class MemoryExplanation:
    """Why B's memory peak differs from A's: what each (op, region) held at the peak. The
    contributions (largest change first, ``(other)`` for holders beyond the saved top ones)
    sum to ``delta_bytes``; ``by_region`` adds the change in net bytes (allocated - freed)."""

    a_bytes: int  #: A's peak
    b_bytes: int
    contributions: tuple[MemoryContribution, ...]
    growth_per_step: tuple[int | None, int | None] = (None, None)  #: A's and B's
    by_region: tuple[MemoryContribution, ...] = ()  #: net bytes per region (op = "")

    @property
    def delta_bytes(self) -> int:
        return self.b_bytes - self.a_bytes

    def lines(self, top: int = 8) -> list[str]:
        from .memory_model import format_bytes as fb

        pct = f" ({100 * self.delta_bytes / self.a_bytes:+.1f}%)" if self.a_bytes else ""
        sign = "+" if self.delta_bytes >= 0 else ""
        out = [f"memory peak {fb(self.a_bytes)} -> {fb(self.b_bytes)}: {sign}{fb(self.delta_bytes)}{pct}; at the peak:"]
        shown = [c for c in self.contributions if c.delta_bytes][:top]
        for c in shown:
            where = c.op + (f" in {c.region}" if c.region else "")
            delta = ("+" if c.delta_bytes >= 0 else "") + fb(c.delta_bytes)
            out.append(f"  {delta:>11}  {where}  ({fb(c.a_bytes)} -> {fb(c.b_bytes)})")
        ga, gb = self.growth_per_step
        if ga is not None or gb is not None:
            out.append(f"  growth per step: {'-' if ga is None else fb(ga)} -> {'-' if gb is None else fb(gb)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "a_bytes": self.a_bytes,
            "b_bytes": self.b_bytes,
            "delta_bytes": self.delta_bytes,
            "contributions": [c.to_dict() for c in self.contributions],
            "growth_per_step_bytes": {"a": self.growth_per_step[0], "b": self.growth_per_step[1]},
            "by_region": [c.to_dict() for c in self.by_region],
        }


def explain_memory_diff(a: Any, b: Any) -> MemoryExplanation:
    """Attribute the change in memory peak from A to B (two :class:`~neuronscope.MemoryReport`)
    to what each (op, region) held at the peak (see :class:`MemoryExplanation`)."""

    def held(m: Any) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for h in m.at_peak:  # several source lines of one (op, region) add up
            out[(h.op, h.region)] = out.get((h.op, h.region), 0) + int(h.bytes)
        rest = int(m.peak_bytes) - sum(out.values())
        if rest:  # holders beyond the saved top ones (or what the allocator total adds)
            out[("(other)", "")] = out.get(("(other)", ""), 0) + rest
        return out

    ha, hb = held(a), held(b)
    contributions = [
        MemoryContribution(op, region, ha.get((op, region), 0), hb.get((op, region), 0)) for op, region in ha.keys() | hb.keys()
    ]
    contributions.sort(key=lambda c: (-abs(c.delta_bytes), c.op, c.region))
    na = {g.name: int(g.net_bytes) for g in a.by_region}
    nb = {g.name: int(g.net_bytes) for g in b.by_region}
    regions = [MemoryContribution("", r, na.get(r, 0), nb.get(r, 0)) for r in na.keys() | nb.keys()]
    regions = sorted((r for r in regions if r.delta_bytes), key=lambda c: (-abs(c.delta_bytes), c.region))[:10]
    return MemoryExplanation(
        a_bytes=int(a.peak_bytes),
        b_bytes=int(b.peak_bytes),
        contributions=tuple(contributions),
        growth_per_step=(a.growth_per_step_bytes, b.growth_per_step_bytes),
        by_region=tuple(regions),
    )
