"""The memory report of one run, as plain serialisable data (no numpy: the CLI reads it).

``run.memory`` / ``neuronscope.diagnose_memory(...)`` return a :class:`MemoryReport`. Every
size is in bytes, every instant in Unix-epoch nanoseconds. Field names are a public
contract (summary.json ``memory``, ``show --json``, span attributes, the metric).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MEMORY_SCHEMA_VERSION", "MemoryGroup", "MemoryHolder", "MemoryReport", "MemoryStep", "format_bytes"]

MEMORY_SCHEMA_VERSION = 1


def format_bytes(n: float) -> str:
    """``1.2 GiB``, ``30 MiB``, ``512 B`` (signed)."""
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(n)} B"
            return f"{sign}{n:.1f} {unit}" if n < 100 else f"{sign}{n:.0f} {unit}"
        n /= 1024
    return f"{sign}{n} B"  # pragma: no cover


@dataclass(frozen=True)
class MemoryHolder:
    """Allocations alive at the peak that share (op, region, source): who holds the memory."""

    op: str  #: the op the user's code called (the outermost op), or ``(before the profile)``
    region: str  #: region path (``forward/attn``), ``""`` outside every region
    source: str | None  #: ``file.py:12 (func)`` of the innermost user frame (with_stack=True)
    bytes: int
    count: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryHolder":
        return cls(str(d["op"]), str(d.get("region", "")), d.get("source"), int(d["bytes"]), int(d.get("count", 0)))


@dataclass(frozen=True)
class MemoryGroup:
    """What one op (or region) allocated over the window, what of it was freed, and the rest."""

    name: str
    allocated_bytes: int
    freed_bytes: int
    net_bytes: int  #: allocated - freed: still held at the end of the window
    count: int  #: allocations

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryGroup":
        return cls(str(d["name"]), int(d["allocated_bytes"]), int(d["freed_bytes"]), int(d["net_bytes"]), int(d.get("count", 0)))


@dataclass(frozen=True)
class MemoryStep:
    index: int
    start_ns: int
    peak_bytes: int
    growth_bytes: int  #: allocated at the step's end minus at its start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryStep":
        return cls(int(d["index"]), int(d["start_ns"]), int(d["peak_bytes"]), int(d["growth_bytes"]))


@dataclass(frozen=True)
class MemoryReport:
    """Why memory is high: the peak, who holds it, what grows per step.

    ``allocated`` bytes are the allocator's own total where it reports one (CUDA, Neuron);
    on CPU they count the tensors the profile saw allocated, plus those allocated before it
    and freed inside it (their size is known from the free), so no total is ever negative.
    """

    device: str  #: "cpu" | "cuda" | "neuron" ...
    peak_bytes: int
    peak_at_ns: int
    start_bytes: int
    end_bytes: int
    growth_bytes: int  #: end - start over the window
    at_peak: tuple[MemoryHolder, ...] = ()  #: largest first
    by_op: tuple[MemoryGroup, ...] = ()  #: most net bytes first
    by_region: tuple[MemoryGroup, ...] = ()
    steps: tuple[MemoryStep, ...] = ()
    growth_per_step_bytes: int | None = None  #: median net growth of a step (None without steps)
    steps_source: str | None = None  #: how steps were found (as in the diagnosis)
    timeline: tuple[tuple[int, int], ...] = ()  #: (time_ns, allocated bytes), downsampled, peak kept
    peak_reserved_bytes: int | None = None  #: the allocator's reserved bytes at its maximum (CUDA)
    allocations: int = 0
    frees: int = 0
    #: device-specific facts: Neuron HBM by category, the runtime's OOM table, torch.cuda maxima
    device_facts: dict[str, Any] = field(default_factory=dict)
    oom: dict[str, Any] | None = None  #: the out-of-memory failure, when the run ended in one
    notes: tuple[str, ...] = ()

    @property
    def top(self) -> MemoryHolder | None:
        return self.at_peak[0] if self.at_peak else None

    def op(self, name: str) -> MemoryGroup | None:
        return next((g for g in self.by_op if g.name == name), None)

    def region(self, path: str) -> MemoryGroup | None:
        return next((g for g in self.by_region if g.name == path), None)

    def headline(self) -> str:
        """``memory peak 1.2 GiB at aten::mm in forward/attn; +30 MiB per step``"""
        parts = [f"memory peak {format_bytes(self.peak_bytes)}"]
        top = self.top
        if top is not None and top.bytes > 0:
            where = top.op + (f" in {top.region}" if top.region else "")
            parts[0] += f" at {where}"
            if self.peak_bytes:
                parts[0] += f" ({100 * top.bytes / self.peak_bytes:.0f}%)"
        text = parts[0]
        if self.growth_per_step_bytes is not None and self.steps:
            text += f"; {'+' if self.growth_per_step_bytes >= 0 else ''}{format_bytes(self.growth_per_step_bytes)} per step"
        elif self.growth_bytes:
            text += f"; {'+' if self.growth_bytes >= 0 else ''}{format_bytes(self.growth_bytes)} over the run"
        if self.oom:
            text += "; OUT OF MEMORY"
        return text

    def __repr__(self) -> str:
        return f"<neuronscope.MemoryReport device={self.device!r} {self.headline()}>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's terminal: what print() shows
        p.text(repr(self) if cycle else str(self))

    def _repr_html_(self) -> str:
        """What Jupyter shows: the headline and who holds the peak."""
        from .notebook import memory_html

        return memory_html(self, format_bytes)

    def __str__(self) -> str:
        lines = [self.headline()]
        for h in self.at_peak[:5]:
            where = h.op + (f" in {h.region}" if h.region else "") + (f" at {h.source}" if h.source else "")
            lines.append(f"  {format_bytes(h.bytes):>10}  {h.count:>6}x  {where}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": MEMORY_SCHEMA_VERSION,
            "device": self.device,
            "peak_bytes": self.peak_bytes,
            "peak_at_ns": self.peak_at_ns,
            "start_bytes": self.start_bytes,
            "end_bytes": self.end_bytes,
            "growth_bytes": self.growth_bytes,
            "at_peak": [h.to_dict() for h in self.at_peak],
            "by_op": [g.to_dict() for g in self.by_op],
            "by_region": [g.to_dict() for g in self.by_region],
            "steps": [s.to_dict() for s in self.steps],
            "growth_per_step_bytes": self.growth_per_step_bytes,
            "steps_source": self.steps_source,
            "timeline": [list(p) for p in self.timeline],
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "allocations": self.allocations,
            "frees": self.frees,
            "device_facts": self.device_facts,
            "oom": self.oom,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryReport":
        gps = d.get("growth_per_step_bytes")
        res = d.get("peak_reserved_bytes")
        return cls(
            device=str(d["device"]),
            peak_bytes=int(d["peak_bytes"]),
            peak_at_ns=int(d["peak_at_ns"]),
            start_bytes=int(d["start_bytes"]),
            end_bytes=int(d["end_bytes"]),
            growth_bytes=int(d["growth_bytes"]),
            at_peak=tuple(MemoryHolder.from_dict(h) for h in d.get("at_peak", ())),
            by_op=tuple(MemoryGroup.from_dict(g) for g in d.get("by_op", ())),
            by_region=tuple(MemoryGroup.from_dict(g) for g in d.get("by_region", ())),
            steps=tuple(MemoryStep.from_dict(s) for s in d.get("steps", ())),
            growth_per_step_bytes=None if gps is None else int(gps),
            steps_source=d.get("steps_source"),
            timeline=tuple((int(t), int(b)) for t, b in d.get("timeline", ())),
            peak_reserved_bytes=None if res is None else int(res),
            allocations=int(d.get("allocations", 0)),
            frees=int(d.get("frees", 0)),
            device_facts=dict(d.get("device_facts") or {}),
            oom=d.get("oom"),
            notes=tuple(str(n) for n in d.get("notes", ())),
        )
