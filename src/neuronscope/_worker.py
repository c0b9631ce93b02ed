"""Background work, off the caller's thread: three workers and a memory budget.

* the **analysis** worker turns a stopped capture into its trace model, summary and
  diagnosis — what ``run.summary`` / ``run.diagnosis`` wait for — and then hands the run on;
* the **windows** worker does the same for each window of a profile in windows, and folds
  them, below the program's priority (nice +5, ``configure(worker_nice=)``): it works while
  the program runs on, and when both want a core the program gets it;
* the **output** worker writes the run directory and runs the sinks (OpenTelemetry) — what
  ``run.path`` and ``ns.flush()`` wait for.

Separate threads, so a big trace file being gzipped never delays the next run's summary, and a
long run's windows never delay a profiled call's.

Queues are unbounded in count: a sampled call that was decided is always processed. What
bounds the backlog is memory: :class:`Backlog` adds up the bytes pending captures hold
(Kineto keeps ~1.7 KB per event until the trace is written) and the capture side checks it
*before* a profile starts: over budget, a sampled call is skipped (and counted), never
recorded and thrown away, and a profile asked for without sampling options waits for the
workers to catch up (true back-pressure: nothing the user asked for is lost).

The threads disable torch's RecordFunction for themselves, so the maths of our analysis
never shows up inside a profile that is running at the same time on another thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

__all__ = [
    "KINETO_BYTES_PER_EVENT",
    "Backlog",
    "Worker",
    "backlog",
    "flush_all",
    "get_worker",
    "output_worker",
    "windows_worker",
    "gc_ns_here",
    "track_gc",
    "when_idle",
]

log = logging.getLogger("neuronscope")
_Task = Callable[[], None]

#: What torch's Kineto results hold per event after the profiler stopped, with what reading
#: them through ``events()`` adds, measured on torch 2.13 CPU (400,000 events: +523 MB at the
#: stop, ~1.3 KB/event, bench/bench_time_to_summary.py; ~1.7 KB with events()).
KINETO_BYTES_PER_EVENT = 1700
#: What our trace model and analysis hold per event besides (int64 columns, summary).
MODEL_BYTES_PER_EVENT = 120
DEFAULT_MAX_PENDING_BYTES = 256 * 1024**2


#: tasks queued or running on either worker: a SlowCalls trigger times a call that overlaps
#: them by its own thread's CPU time (our own processing competes for the GIL and would look
#: like a slowdown; capture/triggers.py)
busy: list[int] = [0]
#: what to tell when the workers go idle (``busy`` back to 0): each triggered function's
#: TimedCalls, by weak reference (capture/timed.py: its next calls pay for what the workers
#: left in the caches and are not timed)
_idle_listeners: list[weakref.ref[Any]] = []


def when_idle(listener: Any) -> None:
    """Call ``listener.workers_went_idle()`` (on a worker thread) each time the workers go idle,
    for as long as ``listener`` lives."""
    _idle_listeners[:] = [ref for ref in _idle_listeners if ref() is not None]
    _idle_listeners.append(weakref.ref(listener))


def _went_idle() -> None:
    for ref in _idle_listeners[:]:  # a copy: a decoration on another thread may append meanwhile
        listener = ref()
        if listener is not None:
            listener.workers_went_idle()


class Worker:
    """One daemon thread running submitted tasks in order; ``below_program``: at the priority
    ``configure(worker_nice=)`` sets below the thread that starts it."""

    def __init__(self, name: str, *, below_program: bool = False) -> None:
        self.name = name
        self.below_program = below_program
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, task: _Task) -> None:
        if self._thread is None or not self._thread.is_alive():
            # the process's workers all start from this thread: a thread starts at its creator's
            # priority, and the first to submit to the output worker could be the windows worker
            workers = _workers()
            for worker in workers if self in workers else (self,):
                worker._ensure_thread()
        with self._lock:
            self._pending += 1
            busy[0] += 1
        self._queue.put(task)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=f"neuronscope-{self.name}", daemon=True)
                self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def on_own_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted task has run. False when ``timeout`` passed first."""
        if self.on_own_thread():
            return True  # a task waiting for its own queue would wait forever
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def _loop(self) -> None:
        if self.below_program:
            from . import _config, _system

            # the program first: analysis that takes a core from torch's intra-op threads makes
            # each op wait at its barrier (docs/long-runs.md, "What windows cost")
            _system.lower_thread_priority(_config.current().resolved_worker_nice())
        try:
            import torch

            torch._C._autograd._enable_record_function(False)
        except Exception:  # noqa: BLE001 - only a hygiene measure; analysis still works
            log.debug("could not disable RecordFunction on the worker thread", exc_info=True)
        while True:
            task = self._queue.get()
            if task is None:
                return
            try:
                task()
            except Exception:  # noqa: BLE001 - a task failing must not kill the worker
                log.exception("neuronscope: background processing failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    busy[0] -= 1
                    if not busy[0]:
                        _went_idle()  # before a flush() returns
                    self._idle.notify_all()


class Backlog:
    """Bytes held by captures that stopped but are not written out yet.

    A capture is added with an estimate when it stops (its duration times the recent event
    rate) and updated to its exact event count once the analysis worker has read it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._bytes: dict[Hashable, int] = {}
        self._total = 0
        self.events_per_second = 250_000.0  # a fast eager loop on one core; refined by measurements
        self.measurements = 0
        self.peak_bytes = 0
        self.largest_bytes = 0  #: the largest single capture measured
        # per profile name: (events/s, bytes) of its last capture -- the same code makes alike profiles
        self._last_by_name: dict[str, tuple[float, int]] = {}

    @staticmethod
    def budget() -> int:
        from . import _config

        return _config.current().resolved_max_pending_bytes()

    def reset_measurements(self) -> None:
        """Forget the learned event rate and the peaks (tests; a new workload)."""
        with self._lock:
            self.events_per_second = 250_000.0
            self.measurements = 0
            self.peak_bytes = self._total
            self.largest_bytes = 0
            self._last_by_name.clear()

    def estimate(self, duration_ns: int, rss_growth: int | None = None, name: str | None = None) -> int:
        """Bytes a just-stopped capture holds, before anyone counted its events: duration x the
        event rate this profile name had last time (the same code makes alike profiles); for a
        name not seen yet, duration x the process's recent rate, capped by the process's RSS
        growth over the capture (Kineto holds its events in this process): a first call that
        spent its time compiling, sleeping or waiting on I/O made few events, and duration x rate
        alone would call it gigabytes and skip the next profile for nothing."""
        last = self._last_by_name.get(name) if name is not None else None
        if last is not None:
            rate, last_bytes = last
            by_rate = int(rate * max(duration_ns, 0) / 1e9 * (KINETO_BYTES_PER_EVENT + MODEL_BYTES_PER_EVENT))
            # a call that took longer only because its thread waited (GIL, GC) holds no more
            # events: twice the last size caps the duration-based guess
            return min(by_rate, 2 * last_bytes)
        events = self.events_per_second * max(duration_ns, 0) / 1e9
        by_time = int(events * (KINETO_BYTES_PER_EVENT + MODEL_BYTES_PER_EVENT))
        if rss_growth is None:
            return by_time  # no RSS reading (not Linux, or a scheduled capture's window)
        return min(by_time, rss_growth)

    def learned_rate(self, name: str | None) -> float | None:
        """Events per second the last capture of ``name`` recorded, once one was measured."""
        last = self._last_by_name.get(name) if name is not None else None
        return last[0] if last is not None else None

    def add(self, key: Hashable, nbytes: int) -> None:
        with self._lock:
            self._total += nbytes - self._bytes.get(key, 0)
            self._bytes[key] = nbytes
            self.peak_bytes = max(self.peak_bytes, self._total)

    def measured(self, key: Hashable, events: int, duration_ns: int, name: str | None = None) -> None:
        """The exact size of a capture, once read; also refines the event-rate estimates."""
        if duration_ns > 0 and events > 0:
            rate = events * 1e9 / duration_ns
            if name is not None:
                if len(self._last_by_name) > 1024:  # generated names: do not grow without bound
                    self._last_by_name.clear()
                self._last_by_name[name] = (rate, events * (KINETO_BYTES_PER_EVENT + MODEL_BYTES_PER_EVENT))
            first = self.measurements == 0
            self.events_per_second = rate if first else 0.7 * self.events_per_second + 0.3 * rate
            self.measurements += 1
        nbytes = events * (KINETO_BYTES_PER_EVENT + MODEL_BYTES_PER_EVENT)
        self.largest_bytes = max(self.largest_bytes, nbytes)
        self.add(key, nbytes)

    def remove(self, key: Hashable) -> None:
        with self._lock:
            self._total -= self._bytes.pop(key, 0)
            self._drained.notify_all()

    @property
    def total_bytes(self) -> int:
        return self._total

    def over_budget(self) -> bool:
        budget = self.budget()
        return budget > 0 and self._total >= budget

    def wait_until_under_budget(self, timeout: float) -> bool:
        """Wait for the workers to write pending profiles out until the backlog is under budget,
        or until they have nothing left to do (what remains is held by profiles still
        recording: waiting longer cannot free it). False when ``timeout`` passed first, or when
        called from a worker (it would wait for itself)."""
        if any(w.on_own_thread() for w in _workers()):
            return False
        deadline = time.monotonic() + timeout
        with self._drained:
            while self.over_budget() and any(w.pending for w in _workers()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # woken when bytes are released; the timeout re-checks the workers' queues
                self._drained.wait(min(remaining, 0.05))
        return True


def _new_workers() -> tuple[Worker, Worker, Worker]:
    """(analysis, windows, output): at import, and again in a forked child."""
    return Worker("analysis"), Worker("windows", below_program=True), Worker("output")


_analysis, _windows, _output = _new_workers()
backlog = Backlog()


def _workers() -> tuple[Worker, Worker, Worker]:
    return _analysis, _windows, _output


def get_worker() -> Worker:
    """The analysis worker (trace model, summary, diagnosis)."""
    return _analysis


def windows_worker() -> Worker:
    """The worker that analyses and folds the windows of profiles in windows (capture/windows.py),
    below the program's priority."""
    return _windows


def output_worker() -> Worker:
    """The output worker (run directory, OpenTelemetry)."""
    return _output


_gc_here = threading.local()  # garbage-collection time run on each thread, ns
_gc_started = threading.local()
_gc_tracked = False


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_started.ns = time.perf_counter_ns()
    else:
        _gc_here.ns = getattr(_gc_here, "ns", 0) + time.perf_counter_ns() - getattr(_gc_started, "ns", time.perf_counter_ns())


def track_gc() -> None:
    """Count the time garbage collection runs on each thread (once, for the SlowCalls trigger):
    a collection runs in whichever thread allocates when the count is reached, so the objects
    our workers make are often collected in the caller's thread, on its CPU time."""
    global _gc_tracked
    if not _gc_tracked:
        import gc

        _gc_tracked = True
        gc.callbacks.append(_on_gc)


def gc_ns_here() -> int:
    """Garbage-collection time run on this thread so far (see track_gc)."""
    return getattr(_gc_here, "ns", 0)


def flush_all(timeout: float | None = None) -> bool:
    """Wait for every worker (analysis and windows hand each run on to output, so output last)."""
    deadline = None if timeout is None else time.monotonic() + timeout

    def remaining() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    ok = _windows.flush(remaining())
    ok = _analysis.flush(remaining()) and ok
    return _output.flush(remaining()) and ok


def _reset_after_fork() -> None:
    # The worker threads do not exist in a forked child; start clean.
    global _analysis, _windows, _output, backlog
    (_analysis, _windows, _output), backlog = _new_workers(), Backlog()
    busy[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
