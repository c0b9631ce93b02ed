"""Why B's wall time differs from A's: ``explain_diff`` splits the change exactly into ops (their
share of busy time) and idle classes (host_wait, launch, sync, ..., and ``cpu_wait``: the time the
profiled thread waited for a core), largest first, summing to the total change.

    ex = explain_diff(before, after, diag_before, diag_after, normalised=choose_basis(...))
    ex.lines()                       # what `neuronscope diff` prints under "Why"
    ex.contributions[0]              # the part that changed most (either way)

"A" is the baseline, "B" the candidate, as in :mod:`.diff`, whose :class:`~.diff.Normalisation`
says what each side's figures are divided by (per recorded step, per recorded second, or totals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .diff import Normalisation, RegionDelta, diff_summaries, rounded
from .summary import Summary
from .units import format_us

__all__ = ["Contribution", "Explanation", "explain_diff"]


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
            "a_us": rounded(self.a_us, 3),
            "b_us": rounded(self.b_us, 3),
            # from the rounded sides: a saved explanation, rebuilt, says the same
            "delta_us": rounded(rounded(self.b_us, 3) - rounded(self.a_us, 3), 3),
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
            "a_us": rounded(self.a_us, 3),
            "b_us": rounded(self.b_us, 3),
            # from the rounded sides: a saved explanation, rebuilt, says the same
            "delta_us": rounded(rounded(self.b_us, 3) - rounded(self.a_us, 3), 3),
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
        "collective_us": rounded(c.collective_us / divisor, 3),
        "exposed_us": rounded(c.exposed_us / divisor, 3),
        "overlap_pct": rounded(c.overlap_pct, 2),
        "by_kind": {k.kind: rounded(k.time_us / divisor, 3) for k in c.by_kind},
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
