"""Why B's memory peak differs from A's (two ``memory=True`` runs): ``explain_memory_diff`` splits
the change in peak into what each (op, region) held at the peak, largest change first, summing to
the change; and the change in net bytes (allocated - freed) per region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MemoryContribution", "MemoryExplanation", "explain_memory_diff"]


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
