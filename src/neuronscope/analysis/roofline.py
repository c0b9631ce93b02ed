"""Each op against the device's limits: achieved FLOP/s and bytes/s, % of the roof, time at the roof.

For the calls of an op whose work is known (:mod:`.work`) and the device's limits
(:mod:`.roofs`): the time at the roof is ``max(Σ FLOPs/peak(dtype), Σ bytes/bandwidth)`` — what
the calls would take if the device did their work at its limit — and ``% of roof`` is that over
the time they took. The bandwidth is the memory's, or on a CPU that of the cache level one call's
bytes fit in (a cache-aware roofline: :meth:`.roofs.DeviceLimits.memory_roof`). The bound is the
side that sets it: memory when moving the bytes takes longer than doing the FLOPs at peak (a low
arithmetic intensity), compute otherwise. An op at 70 % of its roof or more, and not above it,
is *at the limit*: only less work or a lower precision makes it faster. An op above its roof
says why (:attr:`Roofline.above_roof`) and is not at the limit: the roof it beat was not its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .roofs import DeviceLimits
from .units import size_text
from .work import OpWork

__all__ = ["ABOVE_ROOF_PCT", "AT_LIMIT_PCT", "Roofline", "RunRoofline", "attach_roofline", "roofline_of", "run_roofline"]

#: at or above this share of its roof an op is at the device's limit
AT_LIMIT_PCT = 70.0
#: above this share an op beat its roof by more than the roofs' measurement noise (a best-of-N
#: timing on a CPU; rounding in a vendor figure): it ran against another roof than the one it is
#: held to, and is not at the limit
ABOVE_ROOF_PCT = 110.0


@dataclass(frozen=True)
class Roofline:
    """One op's calls against the device's roofs."""

    calls: int
    flops: float
    bytes: float
    time_us: float  #: device time of the calls counted
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    intensity: float | None  #: FLOPs per byte (None: no bytes)
    bound: str  #: "memory" or "compute": the roof that limits it at this intensity
    roof_flops_per_s: float  #: the compute roof of its dtype (the dominant one)
    dtype: str  #: e.g. "matrix/bf16"
    time_at_roof_us: float
    pct_of_roof: float  #: 100 × time at the roof / time
    #: the two sides of the time at the roof: the FLOPs at peak, the bytes at the bandwidth
    compute_time_us: float = 0.0
    memory_time_us: float = 0.0
    #: where its bytes move: "L1", "L2", "L3", "DRAM" on a CPU (the level most of them fit in,
    #: one call's working set at a time); "" on a device with one memory roof
    memory_level: str = ""
    roof_bytes_per_s: float = 0.0  #: the bandwidth its bytes are held to (bytes / memory time)
    largest_call_bytes: float = 0.0  #: the working set of its largest call
    #: why it is above 100 % of its roof ("" when it is not): it did not run against that roof
    above_roof: str = ""

    @property
    def at_limit(self) -> bool:
        return AT_LIMIT_PCT <= self.pct_of_roof <= ABOVE_ROOF_PCT

    @property
    def time_at_stake_us(self) -> float:
        """What the calls would save at the roof: the time beyond it."""
        return max(self.time_us - self.time_at_roof_us, 0.0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Roofline":
        rf = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        if "above_roof" not in data and rf.pct_of_roof > 100.0:  # saved before the reasons were
            rf = replace(rf, above_roof=_why_above_saved(rf))
        return rf


def roofline_of(work: OpWork | None, limits: DeviceLimits | None) -> Roofline | None:
    if work is None or limits is None or work.calls <= 0 or work.time_us <= 0 or limits.memory_bandwidth <= 0:
        return None
    fp32 = work.flops_by_roof.get("matrix/fp32", 0.0)
    peak32, tf32 = limits.peak("matrix", "fp32"), limits.peak_flops.get("matrix/tf32")
    if fp32 and peak32 and tf32 and tf32 > peak32 and fp32 / (work.time_us / 1e6) > 1.05 * peak32:
        # faster than the device's fp32 peak: the matmuls ran on TF32 tensor cores (torch's
        # allow_tf32, cuBLAS' default on some builds), so TF32 is the roof they are held to
        by_roof = dict(work.flops_by_roof)
        by_roof["matrix/tf32"] = by_roof.pop("matrix/fp32") + by_roof.get("matrix/tf32", 0.0)
        work = replace(work, flops_by_roof=by_roof)
    compute_s = 0.0
    dominant, dominant_flops = "", -1.0
    for key, flops in work.flops_by_roof.items():
        unit, _, dtype = key.partition("/")
        peak = limits.peak(unit, dtype)
        if flops > 0 and not peak:
            return None  # a device with no roof for this work
        if peak:
            compute_s += flops / peak
        if flops > dominant_flops:
            dominant, dominant_flops = key, flops
    if not dominant and work.bytes_by_roof:
        dominant = max(work.bytes_by_roof.items(), key=lambda kv: kv[1])[0]
    memory_s, level = _memory_seconds(work, limits)
    at_roof_s = max(compute_s, memory_s)
    seconds = work.time_us / 1e6
    unit, _, dtype = (dominant or "vector/fp32").partition("/")
    bound = "compute" if compute_s > memory_s else "memory"
    pct = 100.0 * at_roof_s / seconds
    roofline = Roofline(
        calls=work.calls,
        flops=work.flops,
        bytes=work.bytes,
        time_us=work.time_us,
        achieved_flops_per_s=work.flops / seconds,
        achieved_bytes_per_s=work.bytes / seconds,
        intensity=(work.flops / work.bytes) if work.bytes > 0 else None,
        bound=bound,
        roof_flops_per_s=limits.peak(unit, dtype) or 0.0,
        dtype=dominant or "vector/fp32",
        time_at_roof_us=at_roof_s * 1e6,
        pct_of_roof=pct,
        compute_time_us=compute_s * 1e6,
        memory_time_us=memory_s * 1e6,
        memory_level=level,
        roof_bytes_per_s=work.bytes / memory_s if memory_s > 0 else limits.memory_bandwidth,
        largest_call_bytes=max((size for size, _ in work.call_sizes()), default=0.0),
    )
    return replace(roofline, above_roof=_why_above(roofline, limits)) if pct > 100.0 else roofline


def _memory_seconds(work: OpWork, limits: DeviceLimits) -> tuple[float, str]:
    """The time the work's bytes take at their roofs, each call's at the level its working set
    fits (one roof without cache levels), and the level most of the bytes were held to."""
    if not limits.cache_levels:
        return work.bytes / limits.memory_bandwidth, ""
    seconds = 0.0
    by_level: dict[str, float] = {}
    for call_bytes, nbytes in work.call_sizes():
        level, bandwidth = limits.memory_roof(call_bytes)
        seconds += nbytes / bandwidth
        by_level[level] = by_level.get(level, 0.0) + nbytes
    level = max(by_level.items(), key=lambda kv: kv[1])[0] if by_level else "DRAM"
    return seconds, level


def _why_above(rf: Roofline, limits: DeviceLimits) -> str:
    """Why an op ran faster than its roof allows: the roof it beat was not the one it ran against."""
    if rf.pct_of_roof <= ABOVE_ROOF_PCT:
        return f"within the roofs' measurement noise (up to {ABOVE_ROOF_PCT - 100:.0f}% above)"
    if limits.source.startswith("measured under load"):
        return "the roofs were measured while other processes used the CPU: they are too low"
    if rf.bound == "compute":
        return (
            f"faster than the {rf.dtype} peak: the peak is too low for this work (measured on one "
            "matmul size, or a figure for other units than the kernel used)"
        )
    faster = [(name, bw) for name, _, bw in limits.cache_levels if bw > rf.roof_bytes_per_s]
    if rf.memory_level and faster and rf.achieved_bytes_per_s <= max(bw for _, bw in faster):
        name = next(n for n, bw in reversed(faster) if bw >= rf.achieved_bytes_per_s)
        return (
            f"above the {rf.memory_level} roof, below the {name} one: part of its working set "
            f"({size_text(rf.largest_call_bytes)} a call) was still in {name}, written or read "
            "by the op before it"
        )
    if rf.memory_level:
        return (
            "faster than any measured bandwidth: the work model counts bytes the kernel does not move "
            "(the same tensor passed twice, a broadcast input read once)"
        )
    return (
        "faster than the device's memory bandwidth: its data stayed in the device's cache (written or "
        "read by the kernel before it), or the work model counts bytes the kernel does not move"
    )


def _why_above_saved(rf: Roofline) -> str:
    """Why an op of a summary saved before the reasons (and a CPU's cache levels) is above its roof."""
    if rf.pct_of_roof <= ABOVE_ROOF_PCT:
        return f"within the roofs' measurement noise (up to {ABOVE_ROOF_PCT - 100:.0f}% above)"
    if rf.bound == "compute":
        return f"faster than the {rf.dtype} peak it was held to when saved: that peak is too low for this work"
    return (
        "saved before neuronscope said why: its data was in a cache, faster than the one memory roof "
        "it was held to (on a CPU a profile made now holds it to its cache level's roof)"
    )


def attach_roofline(summary: Any, limits: DeviceLimits | None) -> Any:
    """The summary with ``limits`` and every row's :class:`Roofline` (regions included)."""

    def one(s: Any) -> Any:  # a Summary (summary.py imports this module: no import back)
        rows = tuple(replace(r, roofline=roofline_of(r.work, limits)) for r in s.rows)
        direct = tuple(replace(r, roofline=roofline_of(r.work, limits)) for r in s.direct_rows)
        return replace(s, rows=rows, direct_rows=direct, limits=limits)

    out = one(summary)
    if summary.regions:
        out = replace(out, regions={p: one(r) for p, r in summary.regions.items()})
    return out


@dataclass(frozen=True)
class RunRoofline:
    """The run's fraction of the roofs, weighted by time: an MFU and an MBU for any device.

    ``flops_pct`` = Σ FLOPs/peak over the modelled calls ÷ their device time (the MFU of the
    modelled work); ``bytes_pct`` = Σ bytes/bandwidth ÷ the same time (the MBU); ``roof_pct`` =
    Σ time at the roof ÷ that time. ``coverage_pct`` is the share of the summary's device time
    those calls are."""

    flops_pct: float
    bytes_pct: float
    roof_pct: float
    time_us: float
    coverage_pct: float
    time_at_stake_us: float


def run_roofline(summary: Any) -> RunRoofline | None:
    if summary.limits is None:
        return None
    rooflines = [r.roofline for r in summary.rows if r.roofline is not None]
    # each row's own sides of the roof (a TF32 row is held to the TF32 peak here too)
    t = sum(rf.time_us for rf in rooflines)
    compute = sum(rf.compute_time_us for rf in rooflines) / 1e6
    memory = sum(rf.memory_time_us for rf in rooflines) / 1e6
    at_roof = sum(rf.time_at_roof_us for rf in rooflines)
    if t <= 0:
        return None
    seconds = t / 1e6
    total = summary.total_device_time_us
    return RunRoofline(
        flops_pct=100.0 * compute / seconds,
        bytes_pct=100.0 * memory / seconds,
        roof_pct=100.0 * at_roof / t,
        time_us=t,
        coverage_pct=100.0 * min(t / total, 1.0) if total > 0 else 0.0,
        time_at_stake_us=max(t - at_roof, 0.0),
    )
