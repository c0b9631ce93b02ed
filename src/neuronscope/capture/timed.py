"""The wrappers of ``profile_neuron(trigger=SlowCalls(...))``: every call of a triggered function
is timed into the trigger's histogram (capture/triggers.py decides what is slow and keeps the
baselines); a call that sampling, arming or the trigger chooses is profiled through the
profile's own capture (capture/wrappers.py's ``CallProfiler.start``).

The synchronous wrapper is a plain closure over locals (~0.08 us a call by itself,
bench/bench_trigger_overhead.py); a call that overlaps neuronscope's workers, or runs while other
processes hold the cores, is timed by its own thread's CPU time (capture/triggers.py's module doc).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import wrapt

from .. import _config, _ranks, _stats, _system, _worker
from .._run import Run
from .triggers import CONTENDED_WAIT_SHARE, REFRESH_MASK, REFRESH_MASK_SETTLED, SlowCalls, TriggerState

__all__ = ["TimedCalls", "wrap_with_trigger"]


def wrap_with_trigger(
    spec: Any,
    func: Any,
    target: Any,
    name: str,
    save: bool,
    policy: Any,
    decide: Callable[[], bool],
    start: Callable[..., Run],
    new_capture: Callable[[], Any],
) -> Any:
    """The decorator for ``profile_neuron(trigger=...)``: every call timed, see the module doc.

    ``new_capture()`` makes the capture of one call (the profile's; passed in so this module
    never imports the profile, which imports it).

    ``decide`` is the sampling policy's decider (sampling options and arming; with no
    sampling options it chooses only armed calls); ``start`` begins a capture."""
    calls = TimedCalls(spec, policy, start, new_capture)
    if not inspect.iscoroutinefunction(target):
        return _sync_wrapper(calls, func, target, name, policy, decide)
    wrapper = _async_wrapper(calls, func, decide)
    wrapper._self_neuronscope_trigger = calls.state  # on the wrapt wrapper itself, for tests and debugging
    return wrapper


class TimedCalls:
    """What the wrapper of one triggered function shares between its calls: the trigger's
    state, the latency histogram, and how a chosen call's capture begins and ends."""

    def __init__(self, spec: Any, policy: Any, start: Callable[..., Run], new_capture: Callable[[], Any]) -> None:
        self.trig: SlowCalls = spec.trigger
        self.state = TriggerState(self.trig, policy.calls)
        self.start, self.new_capture, self.chosen = start, new_capture, spec.ranks
        self.sampled = policy.count_sampled  # a call the trigger chose is a sampled call: stats() partitions calls
        from .._worker import busy, track_gc

        self.busy = busy  # looked up once: observe() runs on every timed call
        #: the calling threads wait for a core (other processes share the CPU): calls are then
        #: timed by their own CPU time (module doc)
        self.contended = [0]
        self._sched: dict[int, tuple[int, int]] = {}  # thread -> (monotonic ns, run-queue wait ns) at the last refresh
        track_gc()
        mask = REFRESH_MASK
        while mask > 7 and mask + 1 > self.trig.min_calls // 2:
            mask >>= 1
        self.mask = mask

    def refresh(self) -> None:
        # every 64 calls (or fewer, for a small min_calls) until the threshold is known, then
        # every 1024: re-reading the histogram is ~10 us, kept off nearly every call
        self.state.refresh()
        if self.state.total >= self.trig.min_calls:
            self.mask = REFRESH_MASK_SETTLED
        self._check_contention()

    def _check_contention(self) -> None:
        """Whether the calling thread waited for a core since the last refresh on it (Linux
        schedstat; a few microseconds, once per refresh): under contention a call's wall time is
        its own work plus the time other processes held the cores, and a quantile of such times
        fires on the machine's load rather than on slow calls."""
        tid = threading.get_native_id()
        stat = _system.read_schedstat(tid)
        if stat is None:
            return
        now = time.monotonic_ns()
        last = self._sched.get(tid)
        if len(self._sched) > 256:  # a pool that keeps making threads: start over
            self._sched.clear()
        self._sched[tid] = (now, stat[1])
        if last is not None and now > last[0]:
            self.contended[0] = int((stat[1] - last[1]) >= CONTENDED_WAIT_SHARE * (now - last[0]))

    def enabled(self) -> bool:
        return _config.is_enabled() and (self.chosen is None or _ranks.selected(self.chosen))

    def begin(self, claim: tuple[str, Any] | None, stash: Any = None) -> tuple[Any, str | None, Run]:
        """Start the capture of a call chosen by sampling/arming (``claim`` None) or by the
        trigger (``("slow" | "baseline", pending)``): (capture, kind, run)."""
        capture = self.new_capture()
        if claim is None:
            return capture, None, (self.start(capture) if stash is None else self.start(capture, stash))
        kind, pending = claim
        self.sampled()
        state = self.state
        if kind == "slow":
            capture.trigger = pending.trigger
            capture.annotate = state.annotate_triggered(pending.baseline)
        else:
            capture.annotate = state.annotate_baseline(capture)
        run = self.start(capture, False)
        if kind == "slow":
            if run.profiled:
                _stats.record("triggered")
            else:
                state.give_back(pending)
        elif run.profiled:
            _stats.record("trigger_baselines")
        return capture, kind, run

    def finish(self, capture: Any, kind: str | None, run: Run, exc: BaseException | None, dt: int) -> None:
        call_ns = 1 << 62 if exc is not None else dt  # a failing call is no baseline
        capture.call_ns = call_ns  # before end(): the output worker reads it for the manifest
        capture.end(exc)
        if kind == "baseline":
            self.state.baseline_done(run, call_ns)

    def profiled(self, wrapped: Any, args: Any, kwargs: Any, claim: tuple[str, Any] | None, stash: Any = None) -> Any:
        """A call profiled because sampling/arming chose it, or because the trigger did."""
        capture, kind, run = self.begin(claim, stash)
        t0 = time.perf_counter_ns()
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            self.finish(capture, kind, run, exc, 0)
            raise
        self.finish(capture, kind, run, None, time.perf_counter_ns() - t0)
        return result

    def observe(self, dt: int, args: Any, kwargs: Any) -> None:
        """One unprofiled call's wall time into the histogram (and the slow-call check)."""
        if dt > self.state.threshold[0]:
            self.state.slow(dt, args, kwargs)
        b = (dt | 16).bit_length()
        self.state.counts[(b << 3) | ((dt >> (b - 4)) & 7)] += 1
        if not self.state.timed.__next__() & self.mask:
            self.refresh()


def _clocks() -> tuple[int, int]:
    """(this thread's CPU time, the garbage-collection time run on it), ns."""
    return time.thread_time_ns(), _worker.gc_ns_here()


def _lost_to_workers(dt: int, before: tuple[int, int]) -> int:
    """What a call of wall time ``dt`` since ``before`` did not spend running its own code on
    its thread (module doc): the call then counts as its own CPU time, collections excluded."""
    cpu, gc_here = _clocks()
    own = (cpu - before[0]) - (gc_here - before[1])
    return max(dt - own, 0)


def _async_wrapper(calls: TimedCalls, func: Any, decide: Callable[[], bool]) -> Any:
    from .arming import take_stash

    now, state = time.perf_counter_ns, calls.state

    busy = calls.busy

    async def timed_call(wrapped: Any, args: Any, kwargs: Any) -> Any:
        t0 = now()
        result = await wrapped(*args, **kwargs)
        dt = now() - t0
        # A coroutine shares its thread with the other tasks, so its thread's CPU time says
        # nothing of its own: calls that overlapped neuronscope's workers are not timed.
        if not busy[0]:
            calls.observe(dt, args, kwargs)
        return result

    async def profiled_async(wrapped: Any, args: Any, kwargs: Any, claim: Any, stash: Any = False) -> Any:
        capture, kind, run = calls.begin(claim, stash if claim is None else None)
        t0 = now()
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            calls.finish(capture, kind, run, exc, 0)
            raise
        calls.finish(capture, kind, run, None, now() - t0)
        return result

    @wrapt.decorator
    def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if decide():  # the arming decision is taken now, not when the coroutine first runs
            return profiled_async(wrapped, args, kwargs, None, take_stash() or False)
        if state.want[0]:
            claim = state.claim(args, kwargs, calls.enabled)
            if claim is not None:
                return profiled_async(wrapped, args, kwargs, claim)
        return timed_call(wrapped, args, kwargs)

    return async_wrapper(func)


def _sync_wrapper(calls: TimedCalls, func: Any, target: Any, name: str, policy: Any, decide: Callable[[], bool]) -> Any:
    import functools

    from .arming import attend
    from .sampling import attention

    # A plain closure, not wrapt: a wrapt wrapper that always runs Python costs ~0.5 us a
    # call by itself, a closure ~0.08 us (bench/bench_trigger_overhead.py). The hot path
    # reads locals only; the histogram's refresh mask is the one attribute it reads.
    state, enabled, profiled, busy, contended = calls.state, calls.enabled, calls.profiled, calls.busy, calls.contended
    counts, threshold, want, timed = state.counts, state.threshold, state.want, state.timed.__next__
    busy_counts, busy_threshold = state.busy_counts, state.busy_threshold
    trivial = policy.trivial
    next_call, yes = policy.calls.__next__, policy.count_sampled
    now, wrapped = time.perf_counter_ns, target

    @functools.wraps(target)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        if trivial:  # no sampling options (the usual case): the decider's work, inlined
            next_call()
            if attention[0] and enabled() and attend(name):
                yes()
                return profiled(wrapped, args, kwargs, None)
        elif decide():
            return profiled(wrapped, args, kwargs, None)
        if want[0]:
            claim = state.claim(args, kwargs, enabled)
            if claim is not None:
                return profiled(wrapped, args, kwargs, claim)
        if busy[0]:
            # neuronscope's workers run: the call's time less what it lost to them (module doc)
            before = _clocks()
            t0 = now()
            result = wrapped(*args, **kwargs)
            dt = now() - t0
            dt -= _lost_to_workers(dt, before)
            if dt > busy_threshold[0]:
                state.slow(dt, args, kwargs, busy_threshold[0])
            b = (dt | 16).bit_length()
            busy_counts[(b << 3) | ((dt >> (b - 4)) & 7)] += 1
            if not timed() & calls.mask:
                calls.refresh()
            return result
        # other processes hold the cores: the call's own CPU time, as a quiet machine would give
        # its wall time (module doc)
        clocks_before = _clocks() if contended[0] else None
        t0 = now()
        result = wrapped(*args, **kwargs)
        dt = now() - t0
        if busy[0]:
            return result  # the workers started meanwhile: not measurable
        if clocks_before is not None:
            dt -= _lost_to_workers(dt, clocks_before)
        if dt > threshold[0]:
            state.slow(dt, args, kwargs)
        b = (dt | 16).bit_length()
        counts[(b << 3) | ((dt >> (b - 4)) & 7)] += 1
        if not timed() & calls.mask:
            calls.refresh()
        return result

    sync_wrapper._self_neuronscope_trigger = state  # type: ignore[attr-defined]  # for tests and debugging
    return type(func)(sync_wrapper) if isinstance(func, (classmethod, staticmethod)) else sync_wrapper
