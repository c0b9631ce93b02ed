"""Process-wide counters: what happened to each call of a profiled function."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

__all__ = ["record", "reset", "stats"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_KEYS = (
    "profiled",
    "skipped",
    "skipped_backpressure",
    "backpressure_waits",
    "dropped",
    "errors",
    "unsampled",
    "joined",
    "telemetry_dropped",
    "armed",
    "triggered",
    "arm_expired",
    "triggers_fired",
    "triggers_suppressed",
    "trigger_baselines",
)
# Counters kept elsewhere for speed (the sampling hot path), summed in at read time.
_sources: list[Callable[[], dict[str, int]]] = []
_offsets: Counter[str] = Counter()  # what reset() subtracts from those sources


def register_source(source: Callable[[], dict[str, int]]) -> None:
    _sources.append(source)


def _from_sources() -> Counter[str]:
    total: Counter[str] = Counter()
    for source in _sources:
        total.update(source())
    return total


def record(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def stats() -> dict[str, int]:
    """Counts since start (or the last fork):

    ``profiled`` captures completed; ``skipped`` calls that ran unprofiled because another
    capture was active (on another thread, or a foreign torch profiler);
    ``skipped_backpressure`` sampled calls not profiled because the profiles waiting to be
    written held more than ``max_pending_bytes`` (decided before profiling, so nothing is
    thrown away); ``backpressure_waits`` profiles without sampling options that waited for
    those to be written instead of being skipped; ``joined`` profiles nested in a scheduled
    one, recorded as its region;
    ``unsampled`` calls the sampler passed over; ``dropped`` always 0 (a decided sample is
    always processed; kept so dashboards keep working);
    ``errors`` failures inside neuronscope (logged, never raised into user code);
    ``telemetry_dropped`` spans/metrics the exporter could not deliver;
    ``armed`` calls profiled because of ``ns.arm()`` / ``neuronscope arm`` (``arm_expired``:
    arm requests dropped unfilled); ``triggered`` calls profiled because a
    :class:`~neuronscope.SlowCalls` trigger fired (``trigger_baselines``: normal calls it
    profiled to compare with). These three are also counted in ``profiled``.
    ``triggers_fired`` slow calls that armed a capture, ``triggers_suppressed`` slow calls that
    did not because of ``max_per_hour``.
    """
    external = _from_sources()
    with _lock:
        merged = Counter(_counts)
        for k, v in external.items():
            merged[k] += v - _offsets.get(k, 0)
        return {k: merged.get(k, 0) for k in _KEYS} | {k: v for k, v in merged.items() if k not in _KEYS}


def reset() -> None:
    external = _from_sources()
    with _lock:
        _counts.clear()
        _offsets.clear()
        _offsets.update(external)
