"""Process-wide counters: what happened to each call of a profiled function."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["record", "reset", "stats"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_KEYS = ("profiled", "skipped", "dropped", "errors", "unsampled", "joined", "telemetry_dropped")


def record(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def stats() -> dict[str, int]:
    """Counts since start (or the last fork):

    ``profiled`` captures completed; ``skipped`` calls that ran unprofiled because another
    capture was active (another thread, or a foreign torch profiler); ``joined`` nested
    profiles recorded as a region of the enclosing one; ``unsampled`` calls the sampler
    passed over; ``dropped`` captures discarded because the background worker was full;
    ``errors`` failures inside neuronscope (logged, never raised into user code);
    ``telemetry_dropped`` spans/metrics the exporter could not deliver.
    """
    with _lock:
        return {k: _counts.get(k, 0) for k in _KEYS} | {k: v for k, v in _counts.items() if k not in _KEYS}


def reset() -> None:
    with _lock:
        _counts.clear()
