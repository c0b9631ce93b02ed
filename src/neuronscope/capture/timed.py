"""The wrappers of ``profile_neuron(trigger=SlowCalls(...))``: every call of a triggered function
is timed into the trigger's histogram (capture/triggers.py decides what is slow and keeps the
baselines); a call that sampling, arming or the trigger chooses is profiled through the
profile's own capture (capture/wrappers.py's ``CallProfiler.start``).

The synchronous wrapper is a plain closure over locals (~0.08 us a call by itself,
bench/bench_trigger_overhead.py); a call that overlaps neuronscope's workers, or runs while other
processes hold the cores, is timed by its own thread's CPU time (capture/triggers.py's module doc)
-- under the other processes' load, one past the threshold by its wall time by that wall time
less its thread's waits for a core, if that is more (unless a thread of ours lost its core
meanwhile: the call may have waited on it).

An ``async def`` call is timed by its wall time -- awaited I/O included. While other processes
hold the cores (read on the event loop's thread) it is timed as a quiet machine would time it
(``_OwnTime``): its steps -- the loop runs other tasks between a coroutine's steps, never during
one -- by their own CPU time, its awaits by their wall time less the time the loop's thread
waited for a core meanwhile. An async call that overlaps the workers is timed by its steps' CPU
time alone, as a sync one is (its awaits then hold the loop's waits for the GIL the workers hold).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import wrapt

from .. import _config, _ranks, _stats, _system, _worker
from .._run import Run
from .triggers import CONTENDED_WAIT_SHARE, REFRESH_MASK, REFRESH_MASK_SETTLED, SlowCalls, TriggerState

__all__ = ["TimedCalls", "wrap_with_trigger"]

#: contention is read over at least this long: a tight loop's 64 calls (~1 ms) often fit
#: between two of the other processes' time slices (~3 ms), which would read as no contention
CONTENTION_READ_NS = 20_000_000
#: calls not timed after each profiled call (TimedCalls.settling)
SETTLING_CALLS = 2
#: calls not timed after neuronscope's workers go idle: the first ones run in caches the
#: analysis just used (beside two busy processes, 5-7 us calls with a p99 of 5.6 us took
#: 6-8 us as the first or second call after the workers finished; 12-19 such firings in a
#: run of 1,300 calls against ~1 % by definition, measured)
AFTER_WORKERS_CALLS = 3


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
    wrapper._self_neuronscope_calls = calls  # how its calls are timed now (calls.contended)
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
        self._read_contention = False  # whether contention was read once: see _check_contention
        #: calls left untimed after a profiled call: the first ones after the profiler stops pay its
        #: teardown (46-113 us of their own CPU time for a 7 us call, measured; the second call
        #: sometimes 40 us), which the trigger would otherwise take for a slow call of theirs
        self.settling = [0]
        self._sched: dict[int, tuple[int, int]] = {}  # thread -> (monotonic ns, run-queue wait ns) at the last refresh
        track_gc()
        _worker.when_idle(self)
        self._check_contention()  # the first reading, on the decorating thread (usually the caller's)
        mask = REFRESH_MASK
        while mask > 7 and mask + 1 > self.trig.min_calls // 2:
            mask >>= 1
        self.mask = mask

    def workers_went_idle(self) -> None:
        """On a worker thread, as the workers finish: the next calls are not timed."""
        self.settling[0] = max(self.settling[0], AFTER_WORKERS_CALLS)

    def refresh(self) -> None:
        # every 16 calls (or fewer, for a small min_calls) until the threshold is known, then as
        # the calls timed grow by an eighth, up to every 1024: re-reading the histogram is ~10 us,
        # kept off nearly every call. Not at once every 1024: a p99 read from the first 200 calls
        # is their second-slowest, anywhere from a p97.5 to a p99.8 of what follows (the share
        # of later calls over it is Beta(2, 199): 1 +- 0.7 %)
        state = self.state
        state.refresh()
        if state.total >= self.trig.min_calls:
            seen = (state.total + state.busy_total) >> 3
            self.mask = min(REFRESH_MASK_SETTLED, max(REFRESH_MASK, (1 << (seen.bit_length() - 1)) - 1 if seen else 0))
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
        if last is not None and now - last[0] < CONTENTION_READ_NS:
            return  # too short to have seen the other processes' time slices: wait for more
        if len(self._sched) > 256:  # a pool that keeps making threads: start over
            self._sched.clear()
        self._sched[tid] = (now, stat[1])
        if last is None:
            return
        self.contended[0] = contended = int((stat[1] - last[1]) >= CONTENDED_WAIT_SHARE * (now - last[0]))
        if not self._read_contention:
            self._read_contention = True
            if contended:
                # the calls so far were timed by their wall time on a loaded machine:
                # the cores' time slices (milliseconds) would stay in the tail for thousands of calls
                self.state.counts[:] = [0] * len(self.state.counts)

    def waited_for_a_core(self, dt: int, threshold: float) -> bool:
        """Before a call timed by its wall time fires: whether the calling thread waited for a
        core, since contention was last read, for as long as the call ran past ``threshold``
        -- then its excess may be other processes' time slices, not its own. Contention is
        re-read every 1,024 calls once the threshold is known: a load that came (or a reading
        that fell between two of the other processes' time slices) would otherwise time a
        thousand calls by their wall time, and each preempted one would fire (24 of 1,300
        ~12 us calls beside two busy processes). The calls are then timed by their CPU time
        until a refresh says otherwise. One schedstat read (~2 us), on a would-be firing only."""
        tid = threading.get_native_id()
        last = self._sched.get(tid)
        stat = _system.read_schedstat(tid)
        if last is None or stat is None or stat[1] - last[1] < dt - threshold:
            return False
        self._sched[tid] = (time.monotonic_ns(), stat[1])
        self.contended[0] = 1
        return True

    def held_off_or_fired(self, dt: int, args: Any, kwargs: Any) -> bool:
        """A call timed by its wall time ran past the threshold: True (not to be timed) when the
        thread waited for a core as long (:meth:`waited_for_a_core`), else the trigger fires."""
        threshold = self.state.threshold[0]
        if self.waited_for_a_core(dt, threshold):
            return True
        self.state.slow(dt, args, kwargs)
        return False

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
        self.settling[0] = SETTLING_CALLS
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
        self._count(dt, args, kwargs, self.state.counts, self.state.threshold)

    def _count(self, dt: int, args: Any, kwargs: Any, counts: list[int], threshold: list[float]) -> None:
        """A call's time against ``threshold`` (it fires the trigger past it), into ``counts``."""
        if dt > threshold[0]:
            self.state.slow(dt, args, kwargs, threshold[0])
        b = (dt | 16).bit_length()
        counts[(b << 3) | ((dt >> (b - 4)) & 7)] += 1
        if not self.state.timed.__next__() & self.mask:
            self.refresh()

    def overlapping_workers(self, wrapped: Any, args: Any, kwargs: Any) -> Any:
        """A call while neuronscope's workers run: its time less what it lost to them; on a
        loaded machine, not timed when a thread of ours lost its core meanwhile -- its time is
        then neither the call's nor our workers' footprint (module doc)."""
        preempted = _system.preemptions
        before, switches = _clocks(), (preempted() if self.contended[0] else -1)
        t0 = time.perf_counter_ns()
        result = wrapped(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        if switches < 0 or preempted() == switches:
            self.observe_overlapped(dt - _lost_to_workers(dt, before), args, kwargs)
        return result

    def observe_overlapped(self, dt: int, args: Any, kwargs: Any) -> None:
        """One call's time into the histogram of calls that overlapped what distorts a call's time
        (neuronscope's workers; on a loaded machine, a thread of ours losing its core)."""
        self._count(dt, args, kwargs, self.state.busy_counts, self.state.busy_threshold)


def _clocks() -> tuple[int, int]:
    """(this thread's CPU time, the garbage-collection time run on it), ns."""
    return time.thread_time_ns(), _worker.gc_ns_here()


def _own_time_under_load(dt: int, before: tuple[int, int], waited: int | None, threshold: float) -> int:
    """A call's own time while other processes hold the cores: its CPU time; past ``threshold`` by
    its wall time ``dt``, that wall time less its thread's waits for a core since ``waited``, if
    more -- what it waited on (I/O, a lock, the device) is its own time. ``waited`` None: a
    thread of ours lost its core meanwhile, and the call may have waited on it: CPU time alone."""
    own = dt - _lost_to_workers(dt, before)
    if waited is not None and dt > threshold:
        own = max(own, dt - (_system.core_wait_ns() - waited))
    return own


def _lost_to_workers(dt: int, before: tuple[int, int]) -> int:
    """What a call of wall time ``dt`` since ``before`` did not spend running its own code on
    its thread (module doc): the call then counts as its own CPU time, collections excluded."""
    cpu, gc_here = _clocks()
    own = (cpu - before[0]) - (gc_here - before[1])
    return max(dt - own, 0)


class _OwnTime:
    """An awaitable over one coroutine that times the coroutine as a quiet machine would, on a
    loaded one: each of its steps by its own CPU time, each await by its wall time less the time
    the loop's thread waited for a core meanwhile; and whether a thread of the process lost its
    core during one of its steps.

    A coroutine runs in steps -- from one suspension to the next, on the event loop's thread --
    and the loop runs the other tasks between them, so a step's CPU time is the coroutine's own
    (the thread's across the whole call is everyone's). Between steps the call waits: for I/O,
    a timer, the other tasks -- what its wall time on a quiet machine holds too -- and, on a
    loaded machine, for the loop's thread to get a core back, which is the load's, not the call's.

    ``await`` on this object forwards ``send``/``throw``/``close`` to the coroutine unchanged
    (what it yields -- an asyncio future, a bare ``None`` -- reaches the loop as if awaited)."""

    __slots__ = ("awaited_ns", "awaits", "coro", "cpu_ns", "preempted")

    def __init__(self, coro: Any, awaits: bool = True) -> None:
        self.coro = coro
        self.awaits = awaits  # whether to time the awaits (a read of schedstat at each)
        self.cpu_ns = 0  # its steps' CPU time, less the collections run in them
        self.awaited_ns = 0  # the time between its steps, less the loop's waits for a core
        self.preempted = False

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        send, throw = coro.send, coro.throw
        cpu, wall, gc_here, preemptions = time.thread_time_ns, time.perf_counter_ns, _worker.gc_ns_here, _system.preemptions
        value: Any = None
        error: BaseException | None = None
        suspended: tuple[int, int] | None = None  # (wall ns, core wait ns) when it last suspended
        while True:
            if suspended is not None:  # a read of schedstat per suspension: a call that never awaits pays none
                self.awaited_ns += max(wall() - suspended[0] - (_system.core_wait_ns() - suspended[1]), 0)
            switches, cpu0, gc0 = preemptions(), cpu(), gc_here()
            try:
                step = send(value) if error is None else throw(error)
            except StopIteration as done:
                return done.value
            finally:  # the step ended: suspended, returned or raised
                self.cpu_ns += (cpu() - cpu0) - (gc_here() - gc0)
                if preemptions() != switches:
                    self.preempted = True
            if self.awaits:
                suspended = wall(), _system.core_wait_ns()
            try:
                value, error = (yield step), None
            except GeneratorExit:  # the awaiting coroutine is closed: close this one too
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in (a cancellation): the coroutine's to handle
                value, error = None, exc


async def _measured_call(calls: TimedCalls, wrapped: Any, args: Any, kwargs: Any) -> Any:
    """An async call timed by what it ran itself (_OwnTime), as the sync wrapper's: while the
    workers run, its steps' CPU time, in the histogram of calls that overlapped them -- its awaits
    hold the workers' turns with the GIL (overlapping_workers); while other processes hold the
    cores, its steps' CPU time and its awaits less the loop's waits for a core, in that histogram
    too when a thread of ours lost its core during a step (contended_call)."""
    busy, settling = calls.busy, calls.settling
    overlapped, loaded = busy[0], calls.contended[0]
    steps = _OwnTime(wrapped(*args, **kwargs), awaits=not overlapped)
    t0 = time.perf_counter_ns()
    result = await steps
    dt = time.perf_counter_ns() - t0
    if settling[0]:
        settling[0] -= 1  # the profiler's teardown is in this call's time (TimedCalls.settling)
    elif overlapped:
        if not (loaded and steps.preempted):  # neither the call's time nor our workers' footprint
            calls.observe_overlapped(steps.cpu_ns, args, kwargs)
    elif not busy[0]:  # the workers started meanwhile: not measurable
        dt = min(dt, steps.cpu_ns + steps.awaited_ns)
        (calls.observe_overlapped if steps.preempted else calls.observe)(dt, args, kwargs)
    return result


def _async_wrapper(calls: TimedCalls, func: Any, decide: Callable[[], bool]) -> Any:
    from .arming import take_stash

    now, state = time.perf_counter_ns, calls.state
    busy, settling, contended = calls.busy, calls.settling, calls.contended

    async def timed_call(wrapped: Any, args: Any, kwargs: Any) -> Any:
        if busy[0] or contended[0]:  # decided when it runs: a coroutine may be awaited long after the call
            return await _measured_call(calls, wrapped, args, kwargs)
        t0 = now()
        result = await wrapped(*args, **kwargs)
        dt = now() - t0
        # Wall time: what a latency trigger should see, awaited I/O included
        if settling[0]:
            settling[0] -= 1  # the profiler's teardown is in this call's time (TimedCalls.settling)
        elif not busy[0]:  # the workers started meanwhile: not measurable
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
        return timed_call(wrapped, args, kwargs)  # a real coroutine (asyncio.iscoroutine: frameworks check)

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
    overlapped, settling = calls.observe_overlapped, calls.settling
    trivial = policy.trivial
    next_call, yes = policy.calls.__next__, policy.count_sampled
    now, wrapped, preempted, core_wait = time.perf_counter_ns, target, _system.preemptions, _system.core_wait_ns

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
        if settling[0]:
            settling[0] -= 1  # the profiler's teardown is in this call's time (TimedCalls.settling)
            return wrapped(*args, **kwargs)
        if busy[0]:
            return calls.overlapping_workers(wrapped, args, kwargs)
        if contended[0]:
            return contended_call(args, kwargs)
        t0 = now()
        result = wrapped(*args, **kwargs)
        dt = now() - t0
        if busy[0]:
            return result  # the workers started meanwhile: not measurable
        if dt > threshold[0] and calls.held_off_or_fired(dt, args, kwargs):
            return result  # the load's time, perhaps: not timed (calls.contended is set now)
        b = (dt | 16).bit_length()
        counts[(b << 3) | ((dt >> (b - 4)) & 7)] += 1
        if not timed() & calls.mask:
            calls.refresh()
        return result

    def contended_call(args: Any, kwargs: Any) -> Any:
        """Other processes hold the cores: the call's own CPU time, as a quiet machine would give
        its wall time -- and a call past the threshold by its wall time, that wall time less its
        thread's waits for a core if that is more: what it waited on (I/O, a lock, the device) is
        its own time (module doc). When a thread of ours lost its core meanwhile, its CPU time
        alone (its wait may have been for that thread: the GIL, a barrier -- 4-12 ms firings of
        12 us calls beside two burners), compared with calls like it, not with the clean ones."""
        before, switches, waited = _clocks(), preempted(), core_wait()
        t0 = now()
        result = wrapped(*args, **kwargs)
        dt = now() - t0
        if busy[0]:
            return result  # the workers started meanwhile: not measurable
        lost_core = preempted() != switches  # a thread of ours lost its core: the call may have waited on it
        own = _own_time_under_load(dt, before, None if lost_core else waited, threshold[0])
        (overlapped if lost_core else calls.observe)(own, args, kwargs)
        return result

    sync_wrapper._self_neuronscope_trigger = state  # type: ignore[attr-defined]  # for tests and debugging
    sync_wrapper._self_neuronscope_calls = calls  # type: ignore[attr-defined]  # how its calls are timed now
    return type(func)(sync_wrapper) if isinstance(func, (classmethod, staticmethod)) else sync_wrapper
