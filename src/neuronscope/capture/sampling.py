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

import itertools
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import _stats
from ..errors import ConfigurationError

#: the one flag the decorators' hot path reads before the sampling rules: up while something
#: may ask for a call (an arm request, the control channel not yet started); arming sets it
attention: list[bool] = [True]

__all__ = ["SamplingPolicy"]

_policies: "weakref.WeakSet[SamplingPolicy]" = weakref.WeakSet()


def count_value(counter: "itertools.count[int]") -> int:
    """How many times ``counter`` was advanced, without advancing it."""
    # An itertools.count can be advanced atomically (one C call under the GIL), which is why
    # the hot path uses it; its repr, "count(N)", is the only way to read it without advancing.
    return int(repr(counter)[6:-1])


_retired = {"calls": 0, "unsampled": 0, "warmup": 0}  # counts of policies already garbage-collected
_retired_lock = threading.Lock()


def _tally(calls: "itertools.count[int]", sampled: list[int], warmup: int) -> tuple[int, int]:
    n = count_value(calls)
    return n - sampled[0], min(n, warmup)


def _retire(calls: "itertools.count[int]", sampled: list[int], warmup: int) -> None:
    unsampled, warm = _tally(calls, sampled, warmup)
    with _retired_lock:
        _retired["calls"] += count_value(calls)
        _retired["unsampled"] += unsampled
        _retired["warmup"] += warm


def _unsampled_counts() -> dict[str, int]:
    with _retired_lock:
        calls, unsampled, warmup = _retired["calls"], _retired["unsampled"], _retired["warmup"]
    for policy in list(_policies):
        u, w = _tally(policy.calls, policy._sampled, policy.warmup)
        calls += count_value(policy.calls)
        unsampled += u
        warmup += w
    return {"calls": calls, "unsampled": unsampled, "warmup": warmup}


_stats.register_source(_unsampled_counts)


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
        self.calls = itertools.count()  # every call; next() is atomic
        self._sampled = [0]  # calls that passed the policy (under _lock); a box the finalizer shares
        self._recent: deque[float] = deque()
        self._threshold = 1.0 if sample is None else float(sample)
        self._coin = sampler is None and sample is not None
        self.trivial = sample is None and every is None and max_per_minute is None and warmup == 0 and sampler is None
        self._decide = self.decider()
        _policies.add(self)
        weakref.finalize(self, _retire, self.calls, self._sampled, warmup)

    def should_profile(self) -> bool:
        """Decide for one call (thread-safe). The "no" path takes no lock."""
        return self._decide()

    def decider(
        self,
        enabled: Callable[[], bool] = lambda: True,
        attend: Callable[[], bool] | None = None,
        profile_all: bool = True,
    ) -> Callable[[], bool]:
        """``should_profile`` as a closure over plain locals, ``enabled()`` checked first.

        Decorators hand it to wrapt as ``enabled=``: wrapt then calls the function directly,
        in C, whenever it says no -- ~0.25 us for an unsampled call instead of ~0.8 us.
        ``attend`` (arming, :mod:`.arming`) is asked before the sampling rules whenever the
        shared :data:`attention` flag is up. ``profile_all=False``: without sampling
        options, no call is chosen (a trigger decides instead).
        """
        next_call = self.calls.__next__
        yes = self.count_sampled
        warmup, every, threshold, rand = self.warmup, self.every, self._threshold, self._random
        coin, sampler = self._coin, self._sampler
        take_slot = self._take_rate_slot if self.max_per_minute is not None else None
        armed = attend if attend is not None else (lambda: False)
        if self.trivial:

            def decide_trivial() -> bool:
                if not enabled():
                    return False
                next_call()
                if attention[0] and armed():
                    return yes()
                return yes() if profile_all else False

            return decide_trivial

        def decide() -> bool:
            if not enabled():
                return False
            n = next_call()
            if attention[0] and armed():
                return yes()
            if n < warmup:
                return False
            if every is not None and (n - warmup) % every:
                return False
            if coin:
                if rand() >= threshold:
                    return False
            elif sampler is not None and not sampler():
                return False
            if take_slot is not None and not take_slot():
                return False
            return yes()

        return decide

    def count_sampled(self) -> bool:
        """Count one call as sampled (the policy chose it, or a trigger did: ``ns.stats()``
        partitions calls into sampled and not); True, for the deciders to return."""
        with self._lock:
            self._sampled[0] += 1
        return True

    @property
    def is_first_profiled_call(self) -> bool:
        return self.warmup == 0 and self._sampled[0] <= 1

    def _take_rate_slot(self) -> bool:
        now = time.monotonic()
        with self._lock:
            while self._recent and now - self._recent[0] >= 60.0:
                self._recent.popleft()
            if len(self._recent) >= self.max_per_minute:  # type: ignore[operator]
                return False
            self._recent.append(now)
            return True

    def describe(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "every": self.every,
            "max_per_minute": self.max_per_minute,
            "warmup": self.warmup,
            "custom_sampler": self._sampler is not None,
        }
