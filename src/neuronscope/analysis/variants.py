"""The numbers behind ``ns.compare``: a median's confidence interval, speed-ups, and a step's
work against the device's roofs.

The interval is distribution-free: the order statistics ``[x(k), x(n-k+1)]`` of ``n``
samples hold the true median with probability ``1 - 2 P(B <= k-1)``, ``B ~ Binomial(n, 1/2)``,
for independent samples. Timings taken one after another on a shared machine are not quite
independent (a burst of load slows several in a row), which makes that interval too narrow; so
``n`` is replaced by an effective count ``n (1 - r) / (1 + r)``, ``r`` the lag-1
autocorrelation of the samples' side of the median (above or below), as for the mean of an
AR(1) series. Two variants whose intervals do not overlap differ significantly.

A step's *work* is what the operation must do however it is implemented: the bytes it must move
(by default its tensor inputs read and its outputs written once) and the FLOPs it must do.
Its share of the roof is the time that work takes at the device's limits over the measured step
time: the roofline's ``% of roof`` for the operation as a whole, not op by op.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .roofs import DeviceLimits

__all__ = ["Interval", "RoofShare", "StepWork", "median_interval", "roof_share", "speedup"]


@dataclass(frozen=True)
class Interval:
    """A median and its confidence interval (seconds for step times)."""

    median: float
    low: float
    high: float
    #: the interval's nominal coverage: the confidence asked for, or less when there were too
    #: few (effective) samples to reach it
    confidence: float
    n: int  #: samples
    n_effective: float  #: samples, discounted for their autocorrelation

    def overlaps(self, other: "Interval") -> bool:
        return self.low <= other.high and other.low <= self.high

    @property
    def half_width_pct(self) -> float:
        """The interval's larger distance from the median, in % of it."""
        if self.median <= 0:
            return math.inf
        return 100.0 * max(self.median - self.low, self.high - self.median) / self.median

    def to_dict(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "confidence": round(self.confidence, 4),
            "n": self.n,
            "n_effective": round(self.n_effective, 2),
        }


def _order_rank(m: int, confidence: float) -> tuple[int, float]:
    """The largest ``k >= 1`` whose interval ``[x(k), x(m-k+1)]`` of ``m`` samples covers the
    median with at least ``confidence``, and that coverage ``1 - 2 P(B <= k-1)``; ``k = 1`` and
    its lower coverage when even the full range falls short."""
    log_half_m = -m * math.log(2.0)
    best, coverage = 1, 1.0 - 2.0 * math.exp(log_half_m)
    below = 0.0  # P(B <= k-1), B ~ Binomial(m, 1/2), summed up one term per k
    for k in range(1, m // 2 + 1):
        below += math.exp(math.lgamma(m + 1) - math.lgamma(k) - math.lgamma(m - k + 2) + log_half_m)
        cov = 1.0 - 2.0 * below
        if cov < confidence:
            break
        best, coverage = k, cov
    return best, coverage


def _side_autocorrelation(flags: Sequence[float]) -> float:
    """Lag-1 autocorrelation of the sequence of 'above the median' flags (0 when undefined)."""
    n = len(flags)
    if n < 3:
        return 0.0
    mean = sum(flags) / n
    var = sum((f - mean) ** 2 for f in flags)
    if var == 0:
        return 0.0
    return sum((flags[i] - mean) * (flags[i + 1] - mean) for i in range(n - 1)) / var


def _turn_correlation(flags: Sequence[float], turn: int) -> float:
    """Intra-class correlation of the 'above the median' flags within consecutive turns of
    ``turn`` samples (one-way ANOVA estimate; 0 when undefined or negative)."""
    groups = [flags[i : i + turn] for i in range(0, len(flags) - turn + 1, turn)]
    if turn < 2 or len(groups) < 2:
        return 0.0
    means = [sum(g) / turn for g in groups]
    mean = sum(means) / len(groups)
    between = turn * sum((m - mean) ** 2 for m in means) / (len(groups) - 1)
    within = sum((f - m) ** 2 for g, m in zip(groups, means) for f in g) / (len(groups) * (turn - 1))
    if between + (turn - 1) * within <= 0:
        return 0.0
    return max((between - within) / (between + (turn - 1) * within), 0.0)


def median_interval(samples: Sequence[float], confidence: float = 0.95, turn: int = 1) -> Interval:
    """The median of ``samples`` (in the order they were taken) and its order-statistic
    confidence interval at ``confidence``, discounted for autocorrelation (module docstring).

    ``turn``: the samples were taken in turns of this many back to back (``ns.compare``'s
    rounds), which share whatever load the machine had then: the count is also discounted by
    the design effect ``1 + (turn - 1) rho`` of the turns' intra-class correlation -- beside two
    busy processes, two identical variants' intervals missed each other in 1 of 14 comparisons
    with the lag-1 discount alone."""
    if not 0.5 <= confidence < 1.0:
        raise ConfigurationError(f"confidence={confidence!r}: use a probability in [0.5, 1), e.g. 0.95")
    if not samples:
        raise ConfigurationError("median_interval: no samples")
    xs = sorted(samples)
    n = len(xs)
    median = statistics.median(xs)
    flags = [1.0 if x > median else 0.0 for x in samples]
    r = _side_autocorrelation(flags)
    n_eff = n * (1.0 - r) / (1.0 + r) if r > 0 else float(n)
    if turn > 1:
        n_eff = min(n_eff, n / (1.0 + (turn - 1) * _turn_correlation(flags, turn)))
    m = max(1, min(n, math.floor(n_eff)))
    k, coverage = _order_rank(m, confidence)
    # k of m effective samples is the same quantile as k * n / m of the n real ones
    lo_index = min(math.floor((k - 1) * n / m), (n - 1) // 2)
    return Interval(median, xs[lo_index], xs[n - 1 - lo_index], coverage, n, n_eff)


def speedup(baseline: Interval, variant: Interval) -> tuple[float, float, float]:
    """How many times faster ``variant`` is than ``baseline``: the ratio of the medians and the
    range the two intervals allow (it holds 1 exactly when the intervals overlap)."""
    point = baseline.median / variant.median if variant.median > 0 else math.inf
    low = baseline.low / variant.high if variant.high > 0 else math.inf
    high = baseline.high / variant.low if variant.low > 0 else math.inf
    return point, low, high


@dataclass(frozen=True)
class StepWork:
    """What one call must do however it is implemented: the bytes it must move and the FLOPs it
    must do (0: not known). ``dtype`` picks the compute roof (``fp32``, ``bf16``...), ``unit``
    which one (``matrix``: the device's fastest, ``vector``)."""

    bytes: float = 0.0
    flops: float = 0.0
    dtype: str = "fp32"
    unit: str = "matrix"
    source: str = ""  #: how it was obtained ("inputs read and outputs written once: ...", "given")

    def __post_init__(self) -> None:
        for what, value in (("bytes", self.bytes), ("flops", self.flops)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or math.isinf(value):
                raise ConfigurationError(f"work: {what}={value!r} must be a non-negative number")
        if self.unit not in ("matrix", "vector"):
            raise ConfigurationError(f'work: unit={self.unit!r}: use "matrix" or "vector"')
        if not self.bytes and not self.flops:
            raise ConfigurationError("work: give bytes, flops or both (per call)")

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "flops": self.flops, "dtype": self.dtype, "unit": self.unit, "source": self.source}


@dataclass(frozen=True)
class RoofShare:
    """One variant's step against the roofs: how long its work takes at the device's limits, as
    a share of the step time it took."""

    pct: float  #: 100 x time at the roof / step time
    time_at_roof_s: float
    bound: str  #: "memory" or "compute": the roof that sets the time at the roof
    level: str  #: the memory level the step's bytes fit in ("L2", "DRAM"; "" on a device with one)
    bytes_per_s: float  #: achieved: the work's bytes / the step time
    flops_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "pct": round(self.pct, 3),
            "time_at_roof_s": self.time_at_roof_s,
            "bound": self.bound,
            "level": self.level,
            "bytes_per_s": self.bytes_per_s,
            "flops_per_s": self.flops_per_s,
        }


def roof_share(work: StepWork, limits: DeviceLimits, step_s: float) -> RoofShare | None:
    """``work`` done in ``step_s`` against ``limits`` (None when neither roof applies)."""
    if step_s <= 0:
        return None
    level, bandwidth = limits.memory_roof(work.bytes) if work.bytes else ("", 0.0)
    memory_s = work.bytes / bandwidth if work.bytes and bandwidth > 0 else 0.0
    peak = limits.peak(work.unit, work.dtype) if work.flops else None
    compute_s = work.flops / peak if peak else 0.0
    at_roof = max(memory_s, compute_s)
    if at_roof <= 0:
        return None
    return RoofShare(
        pct=100.0 * at_roof / step_s,
        time_at_roof_s=at_roof,
        bound="memory" if memory_s >= compute_s else "compute",
        level=level,
        bytes_per_s=work.bytes / step_s,
        flops_per_s=work.flops / step_s,
    )
