"""Compare two summaries: what got slower, what got faster, what appeared or vanished.

    d = diff_summaries(before, after)
    d.total.pct                      # +12.5: total self device time grew 12.5 %
    d.ops[0]                         # the op whose self device time changed most (either way)
    d.regressions(5.0, ops=["aten::mm"])   # total and aten::mm, where they grew more than 5 %

``explain_diff`` (:mod:`.explain`) goes further with the two runs' diagnoses: it splits the
change in *wall time* exactly into ops (their share of busy time) and idle classes (host_wait,
launch, sync, ...), largest first, summing to the total change. ``explain_memory_diff``
(:mod:`.memory_diff`) does the same for the memory peak of two ``memory=True`` runs: what each
(op, region) held at the peak.

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
    "Delta",
    "Normalisation",
    "OpDelta",
    "RegionDelta",
    "Regression",
    "RunExtent",
    "SummaryDiff",
    "choose_basis",
    "diff_summaries",
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
        return {
            "a": rounded(self.a, 3),
            "b": rounded(self.b, 3),
            "delta": rounded(self.delta, 3),
            "pct": None if pct is None else round(pct, 4),
        }


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


def rounded(x: float, digits: int) -> float:
    """``x`` to ``digits`` decimals, an int as it is (the diff's and the explanation's ``to_dict``)."""
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
