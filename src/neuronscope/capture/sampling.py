"""Which calls of a decorated function get profiled.

Checked on every call of a production function, so the "no" path is a handful of
integer operations: an unsampled call costs well under a microsecond (bench/bench_overhead.py).

Rules, applied in this order (all optional, combinable):

* ``warmup=N``: the first N calls are never profiled (on Neuron they compile);
* ``every=N``: then every Nth call is a candidate (1st, N+1th, ...);
* ``sample=p``: a candidate is profiled with probability p (``seed=`` makes it repeatable,
  ``sampler=`` replaces the coin entirely);
* ``max_per_minute=M``: at most M profiles per rolling minute across all threads.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import _stats
from ..errors import ConfigurationError

__all__ = ["SamplingPolicy"]


class SamplingPolicy:
    def __init__(
        self,
        *,
        sample: float | None = None,
        every: int | None = None,
        max_per_minute: int | None = None,
        warmup: int = 0,
        seed: int | None = None,
        sampler: Callable[[], bool] | None = None,
    ) -> None:
        if sample is not None and (isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 <= sample <= 1):
            raise ConfigurationError(f"profile_neuron(sample={sample!r}): use a probability between 0 and 1, e.g. 0.01")
        for arg, value, low in (("every", every, 1), ("max_per_minute", max_per_minute, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ConfigurationError(f"profile_neuron({arg}={value!r}): use an int >= {low}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ConfigurationError(f"profile_neuron(warmup={warmup!r}): use an int >= 0 (calls to skip)")
        if sampler is not None and not callable(sampler):
            raise ConfigurationError("profile_neuron(sampler=...): pass a callable returning True to profile a call")
        if sampler is not None and sample is not None:
            raise ConfigurationError("profile_neuron: pass sample= or sampler=, not both")
        self.sample = sample
        self.every = every
        self.max_per_minute = max_per_minute
        self.warmup = warmup
        self._random = random.Random(seed).random if seed is not None else random.random
        self._sampler = sampler
        self._lock = threading.Lock()
        self._calls = 0
        self._recent: deque[float] = deque()
        self.trivial = sample is None and every is None and max_per_minute is None and warmup == 0 and sampler is None

    def should_profile(self) -> bool:
        """Decide for one call (thread-safe). Counts the call as unsampled when it says no."""
        if self.trivial:
            self._calls += 1  # only feeds is_first_profiled_call; a lost update under a race is harmless
            return True
        with self._lock:
            n = self._calls
            self._calls = n + 1
        if n < self.warmup:
            return self._no("warmup")
        if self.every is not None and (n - self.warmup) % self.every:
            return self._no()
        if self._sampler is not None:
            if not self._sampler():
                return self._no()
        elif self.sample is not None and self._random() >= self.sample:
            return self._no()
        if self.max_per_minute is not None and not self._take_rate_slot():
            return self._no()
        return True

    @property
    def is_first_profiled_call(self) -> bool:
        return self.warmup == 0 and self._calls <= 1

    def _take_rate_slot(self) -> bool:
        now = time.monotonic()
        with self._lock:
            while self._recent and now - self._recent[0] >= 60.0:
                self._recent.popleft()
            if len(self._recent) >= self.max_per_minute:  # type: ignore[operator]
                return False
            self._recent.append(now)
            return True

    @staticmethod
    def _no(reason: str = "unsampled") -> bool:
        _stats.record("unsampled")
        if reason == "warmup":
            _stats.record("warmup")
        return False

    def describe(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "every": self.every,
            "max_per_minute": self.max_per_minute,
            "warmup": self.warmup,
            "custom_sampler": self._sampler is not None,
        }
