"""Bounded recording: an event budget, a duration, a step count, and windows.

torch.profiler keeps every event of a session in memory (~240 B each while it records, ~1.8 KB
once stopped and read), so a profile left open on a long job grows until the kernel kills the
process. Every profile therefore records under limits (:class:`Limits`):

* ``max_events`` — by default, the events whose stopped profile (~1.8 KB each) would take a
  quarter of the memory available *now* (:func:`memory_events`, read at every check: the budget
  follows what the program itself uses); for a window, at most 250,000. Events are not
  countable while torch records, so they are estimated: from the event rate this profile had in
  its last window or run, or the session's RSS growth at ~240 B an event, whichever is higher;
  for a first session, the smaller of that growth and an upper bound on the rate (the program's
  own allocations make the growth an over-estimate: compiling a model grows RSS by hundreds of
  MB while recording few events, which is why the default is not a fixed count);
* ``max_seconds`` / ``max_steps`` — stop recording after that long, or that many steps.

Past a limit the session stops and the program runs on unprofiled; the run says how much of the
wall time it covers and why it stopped (:class:`~neuronscope.result.Coverage`).

A profile in **windows** (:class:`Windows`) instead ends a window at the limit, every N steps or
every T seconds: the window is summarised on the analysis worker and freed, and the next window
starts at the next boundary once it has been (so memory holds one window being analysed, never
a backlog of them). capture/windows.py folds the windows into one run.

Who stops the session, and when it is safe to: capture/watchdog.py.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any

from .. import _system, _worker
from ..errors import ConfigurationError

__all__ = ["STOP_WORDS", "Limits", "Overhead", "Recording", "StepTimes", "Windows", "memory_events"]

log = logging.getLogger("neuronscope")

#: what torch holds per event while a session records (measured on torch 2.13 CPU, a Linear
#: loop: +154 MB for 664,890 events = 243 B/event; ~1,760 B/event once stopped)
RECORDING_BYTES_PER_EVENT = 240
#: what a session's first ops grow RSS by before they are many events (measured under
#: ``neuronscope run``: the first op +1.7 MB, the first matmul +2.0 MB -- per-thread queues and
#: the intra-op pool set up on first use): RSS growth past it is events for certain
RECORDING_SETUP_BYTES = 4 * 2**20
#: the fastest eager dispatch one thread records (a 64x64 Linear loop here: 330,000 events/s):
#: the event rate assumed for a profile name not measured yet
FIRST_EVENT_RATE = 500_000.0
#: the default budget: the events whose stopped profile takes this share of the memory available
MEMORY_SHARE = 1 / 4
#: what a stopped event holds until it is analysed (Kineto's results + our trace model)
STOPPED_BYTES_PER_EVENT = _worker.KINETO_BYTES_PER_EVENT + _worker.MODEL_BYTES_PER_EVENT
#: the default budget of one window (~0.5 GB from recording to analysis, ~1 s to analyse)
WINDOW_DEFAULT_EVENTS = 250_000
POLL_S = 0.05


def memory_events() -> tuple[int, int | None]:
    """(the default event budget now, the memory available it was sized from): the events whose
    stopped profile takes a quarter of the memory available (8 GiB assumed without a reading)."""
    available = _system.available_memory()
    return int((available or 8 * 2**30) * MEMORY_SHARE / STOPPED_BYTES_PER_EVENT), available


def describe_default(available: int | None) -> str:
    avail = f"{available / 2**30:.1f} GiB available" if available else "no memory reading; 8 GiB assumed"
    return f"the default: a quarter of the memory available ({avail})"


@dataclass(frozen=True)
class Windows:
    """Profile a long run in windows, folded into one run (docs/long-runs.md).

    A window ends every ``steps`` steps (``ns.step()``, or optimizer steps when the code calls no
    ``ns.step()``) or every ``seconds`` seconds, whichever comes first, or at the event budget.
    ``keep``: besides the first window's, the raw traces kept are those of the ``keep`` slowest
    windows (by mean step time; without steps, by busy time). ``overhead``: the share of the run's
    wall time neuronscope may add (recording, stopping, analysing: :class:`Overhead`); the next
    window waits until the run is within it. None: each window starts as soon as the previous one
    is analysed, the analysis running below the program's priority (~half the steps at ~1.6x
    on a small training loop: docs/long-runs.md).
    """

    steps: int | None = None
    seconds: float | None = None
    keep: int = 3
    overhead: float | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and (not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 1):
            raise ConfigurationError(f"Windows(steps={self.steps!r}): use a positive int")
        if self.seconds is not None and (not isinstance(self.seconds, (int, float)) or self.seconds <= 0):
            raise ConfigurationError(f"Windows(seconds={self.seconds!r}): use a positive number of seconds")
        if self.steps is None and self.seconds is None:
            raise ConfigurationError("Windows(): give steps=N, seconds=T or both")
        if not isinstance(self.keep, int) or isinstance(self.keep, bool) or self.keep < 0:
            raise ConfigurationError(f"Windows(keep={self.keep!r}): use an int >= 0")
        if self.overhead is not None and (
            not isinstance(self.overhead, (int, float)) or isinstance(self.overhead, bool) or not 0 < self.overhead
        ):
            raise ConfigurationError(
                f"Windows(overhead={self.overhead!r}): use a share of the wall time > 0 (0.25: 25 %), or None"
            )

    def describe(self) -> str:
        parts = ([f"{self.steps} steps"] if self.steps else []) + ([f"{self.seconds:g} s"] if self.seconds else [])
        return " or ".join(parts)


class Overhead:
    """What neuronscope added to the run's wall time so far.

    With steps: the steps it touched (recorded, or run while a window was analysed) against the
    median of recent untouched ones -- the slowdown as the program felt it, recording, stopping
    and analysis's competition for the GIL and the cores included. Without steps (or before any
    untouched one): the time torch's stops took plus the CPU time of the windows' analysis (an
    estimate: the cost of recording itself is not in it, and analysis on a core the program
    left idle cost it nothing)."""

    QUIET_NEEDED = 5  #: untouched steps before the step-based figure is used

    def __init__(self) -> None:
        self.quiet: deque[float] = deque(maxlen=255)  #: recent untouched steps, us
        #: untouched steps since the last window ended: each pause holds QUIET_NEEDED of them, so
        #: the baseline keeps being taken as the load changes (counting the run's, a bound set
        #: beside busy processes stopped pausing once 5 steps of a slow spell made the baseline
        #: and the windows cost "0": it recorded 84 of 120 steps, as many as no bound)
        self.quiet_in_pause = 0
        self.touched_us = 0.0
        self.touched = 0
        self.stops_and_analysis_ns = 0

    def step(self, us: float, touched: bool) -> None:
        if touched:
            self.touched_us += us
            self.touched += 1
        else:
            self.quiet.append(us)
            self.quiet_in_pause += 1

    def window_started(self) -> None:
        self.quiet_in_pause = 0

    def add(self, ns: int) -> None:
        self.stops_and_analysis_ns += max(ns, 0)

    def measured(self) -> tuple[int, str]:
        """(nanoseconds added, the basis: "steps" | "stops and analysis")."""
        if len(self.quiet) >= self.QUIET_NEEDED and self.touched:
            base = statistics.median(self.quiet)
            return int(max(self.touched_us - self.touched * base, 0.0) * 1e3), "steps"
        return self.stops_and_analysis_ns, "stops and analysis"


@dataclass(frozen=True)
class Limits:
    """When a profile stops recording. ``max_events``: None = the default budget, 0 = none."""

    max_events: int | None = None
    max_seconds: float | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        if self.max_events is not None and (
            not isinstance(self.max_events, int) or isinstance(self.max_events, bool) or self.max_events < 0
        ):
            raise ConfigurationError(f"max_events={self.max_events!r}: use an int >= 0 (0: no budget), or None for the default")
        if self.max_seconds is not None and (not isinstance(self.max_seconds, (int, float)) or self.max_seconds <= 0):
            raise ConfigurationError(f"max_seconds={self.max_seconds!r}: use a positive number of seconds")
        if self.max_steps is not None and (
            not isinstance(self.max_steps, int) or isinstance(self.max_steps, bool) or self.max_steps < 1
        ):
            raise ConfigurationError(f"max_steps={self.max_steps!r}: use a positive int")


#: why recording stopped or a window ended
STOP_WORDS = {
    "budget": "the event budget",
    "duration": "the duration limit",
    "steps": "the step limit",
    "window": "the window's end",
    "window_steps": "its step count",
    "window_seconds": "its time",
    "end": "the end of the profile",
    "stop": "a stop asked for (neuronscope arm --stop, a signal)",
}


def _thread_cpu_clock(ident: int) -> int | None:
    """The CPU-time clock of a thread of this process (POSIX), or None."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


class Recording:
    """The limits' state of one open capture: what it has recorded, and what is due next.

    Written on the capture's thread (start, steps, end), the watchdog and the analysis worker
    (a window analysed), under one lock.
    """

    def __init__(self, capture: Any, limits: Limits, windows: Windows | None) -> None:
        self.capture = capture
        self.limits = limits
        self.windows = windows
        #: the budget follows the memory available at every check (no max_events given, not in windows)
        self.dynamic = limits.max_events is None and windows is None
        self.max_events: int | None = limits.max_events or None
        self.budget_source = "max_events"
        if limits.max_events is None and windows is not None:
            # a window is analysed while the next waits: a smaller default keeps the pauses short
            budget, available = memory_events()
            self.max_events = min(budget, WINDOW_DEFAULT_EVENTS)
            self.budget_source = "the default for a window"
        self.thread = threading.get_ident()
        #: the clock of what records events: the profiled thread's CPU time (the whole process's
        #: for a capture of all threads) -- not the process's, where intra-op threads spinning
        #: for a core on a loaded machine and our own workers add CPU time that records nothing
        self._event_clock = None if getattr(capture, "all_threads", False) else _thread_cpu_clock(self.thread)
        self.lock = threading.Lock()
        now = time.monotonic_ns()
        self.started = now
        self.session_started = now  #: the current session (or window)'s start, while recording
        self.session_cpu_started = self.event_cpu_ns()  #: the recording threads' CPU time then
        self.session_pool_started = _system.pool_threads_schedstat()  #: the intra-op pool's then
        self.recording = True
        self.recorded_ns = 0  #: closed sessions' time
        self.stopped: str | None = None  #: recording ended for good, and why
        self.pending: str | None = None  #: an action for the capture's thread (its next ns.step())
        self.signalled = False  #: the main thread was sent the wake signal for ``pending``
        self.window_due = False  #: a time window ended while steps run: cut at the next step
        self.window_reason = "window_seconds"  #: what ended the window being cut: its steps or its time
        #: an action due at an optimizer step, left for the watchdog (the step hook is no safe point)
        self.deferred: str | None = None
        self.in_flight = 0  #: windows being analysed or written
        self.window_index = 1
        self.window_steps = 0
        self.steps_seen = False  #: ns.step() was called (optimizer steps then are not steps)
        self.steps = StepTimes()  #: every step's wall time, recorded or not (bounded)
        self.overhead = Overhead()  #: what neuronscope added to the run so far
        self.events_per_step: float | None = None  #: learned from analysed windows (calibrate)
        self.events_per_second: float | None = None
        self._last_step: int | None = None
        self._busy_since_step = False  #: the workers ran since the last step (set by the watchdog)
        self._recorded_since_step = True  #: recording ran during the step now running (it may have stopped in it)

    # -- estimates -------------------------------------------------------------------------
    def session_events(self, now: int) -> int:
        """Events recorded by the running session so far (an estimate; see the module doc).

        Once a window of this profile was counted (:meth:`calibrate`): its events per step, times
        the steps of this window -- the same code records alike steps, and a step is a steadier
        unit than a second (a first window spends its time setting up) -- or, without steps, its
        events per second. Before that, the process's RSS growth at ~240 B an event, capped at the
        fastest eager rate of one thread: the program's own allocations (a model's first forward,
        an optimizer's state) grow RSS by tens of MB in a tenth of a second, which alone would end
        a first window after a few hundred events and teach the next one a rate 100x too low."""
        from . import session

        elapsed_s = max(now - self.session_started, 0) / 1e9
        if self.events_per_step is not None and self.steps.count > 0:
            return int(self.events_per_step * (self.window_steps + 1))
        learned = self.events_per_second or _worker.backlog.learned_rate(self.capture.name)
        if learned is not None:
            return int(learned * elapsed_s)
        # events are made only while the program's threads run: a starved process (a loaded
        # machine) records few in a long wall time, while its RSS grows from lazy set-up
        cpu_ns = max(self.event_cpu_ns() - self.session_cpu_started, 0)
        owner, _, rss_at_start = session.recording_since()
        rss = session.process_rss()
        if owner is None or rss is None or not rss_at_start:
            return int(FIRST_EVENT_RATE * min(elapsed_s, cpu_ns / 1e9))
        # the rate over the CPU time less what spun at intra-op barriers, capped by the RSS growth;
        # never under the RSS growth past the set-up and the budget's own bytes (memory really
        # held: the budget's purpose). Not past the set-up alone: an MLP's own first allocations
        # then ended its first window after 3 steps, and a window that short teaches the next
        # one a rate so low that it ran to the end of the script (481,391 events for 250,000)
        by_rate = int(FIRST_EVENT_RATE * min(elapsed_s, max(cpu_ns - self._pool_cpu_ns(), 0) / 1e9))
        grown = max(rss - rss_at_start, 0)
        allowed = max(RECORDING_SETUP_BYTES, (self.max_events or 0) * RECORDING_BYTES_PER_EVENT)
        floor = int(max(grown - allowed, 0) / RECORDING_BYTES_PER_EVENT)
        return max(min(by_rate, int(grown / RECORDING_BYTES_PER_EVENT)), floor)

    def _pool_cpu_ns(self) -> int:
        """CPU time in the recording clock that made no events: the intra-op pool's threads' own
        (with the process's clock), and -- bounded by those threads' waits for a core -- the
        recording thread's spins at their barriers. Beside two busy processes a 32x32 matmul
        loop's process burned 48 ms of CPU in its first 50 ms while recording 25 events; at the
        first-window rate that counted 24,000 and ended a 3,000-event window before its first step."""
        start, now = self.session_pool_started, _system.pool_threads_schedstat()
        spun = own = 0
        for tid, (cpu, wait) in now.items():
            cpu0, wait0 = start.get(tid, (0, 0))
            spun += max(wait - wait0, 0)
            own += max(cpu - cpu0, 0)
        return spun + (own if self._event_clock is None else 0)

    def event_cpu_ns(self) -> int:
        """CPU time of what records the events (the profiled thread, or the process), ns."""
        if self._event_clock is not None:
            try:
                return time.clock_gettime_ns(self._event_clock)
            except OSError:  # the thread ended: the process's clock from now on
                self._event_clock = None
        return time.process_time_ns()

    def calibrate(self, events: int, steps: int, duration_ns: int) -> None:
        """A window was analysed: its true event count teaches the estimate of the next ones
        (windows of >= 3 steps teach events per step; of >= 0.2 s, events per second)."""
        if events <= 0:
            return
        if steps >= 3:
            self.events_per_step = events / steps
        if duration_ns >= 200_000_000:
            self.events_per_second = events * 1e9 / duration_ns

    def recorded_total_ns(self, now: int) -> int:
        with self.lock:
            return self.recorded_ns + (now - self.session_started if self.recording else 0)

    # -- what is due -------------------------------------------------------------------------
    def due(self, now: int) -> str | None:
        """The action due now: "budget" | "duration" | "window" (stop the session), "resume"
        (start the next window), or None."""
        if self.stopped is not None:
            return None
        lim = self.limits
        if self.recording:
            if lim.max_seconds is not None and now - self.started >= lim.max_seconds * 1e9:
                return "duration"
            if self._over_budget(now):
                return "budget"
            w = self.windows
            if w is not None and w.seconds is not None and now - self.session_started >= w.seconds * 1e9:
                self.window_reason = "window_seconds"
                if self.steps_seen:
                    self.window_due = True  # steps run: the window ends at the next one
                    return None
                return "window"
            return None
        if self.windows is not None and self.ready_for_next(now) and (self.windows.steps is None or not self.steps_seen):
            if lim.max_seconds is not None and now - self.started >= lim.max_seconds * 1e9:
                self.stopped = "duration"
                return None
            return "resume"
        return None

    def _over_budget(self, now: int) -> bool:
        if self.max_events is not None and not self.dynamic:
            return self.session_events(now) >= self.max_events
        if not self.dynamic:
            return False
        budget, available = memory_events()
        if self.session_events(now) < budget:
            return False
        self.max_events, self.budget_source = budget, describe_default(available)  # what the run reports
        return True

    def workers_ran(self) -> None:
        """The watchdog saw neuronscope's workers busy during the step now running."""
        self._busy_since_step = True

    def take_deferred(self) -> str | None:
        with self.lock:
            action, self.deferred = self.deferred, None
        return action if self.recording else None

    def ready_for_next(self, now: int) -> bool:
        return self.in_flight == 0 and not _worker.backlog.over_budget() and self.within_overhead(now)

    def within_overhead(self, now: int) -> bool:
        """Whether the run is within ``Windows.overhead`` (always, without one). With steps, the
        pause lasts at least :attr:`Overhead.QUIET_NEEDED` untouched steps: they are the baseline."""
        share = self.windows.overhead if self.windows is not None else None
        if share is None:
            return True
        if self.steps.count > 0 and self.overhead.quiet_in_pause < Overhead.QUIET_NEEDED:
            return False
        added, _ = self.overhead.measured()
        return added <= share * max(now - self.started, 0)

    # -- transitions (the caller holds no lock; the capture does the session work) ----------
    def session_ended(self, now: int, reason: str) -> None:
        with self.lock:
            if self.recording:
                self.recorded_ns += now - self.session_started
            self.recording = False
            self.window_due = False
            if self.windows is None or reason in ("duration", "steps"):
                self.stopped = reason

    def session_started_now(self, now: int) -> None:
        with self.lock:
            self.recording = True
            self.session_started = now
            self.session_cpu_started = self.event_cpu_ns()
            # read only while the estimate is uncalibrated (session_events does not reach it after)
            calibrated = self.events_per_step is not None or self.events_per_second is not None
            self.session_pool_started = {} if calibrated else _system.pool_threads_schedstat()
            self.window_steps = 0
            self.window_index += 1
            self.overhead.window_started()

    def step(self, now: int) -> str | None:
        """One step ended (on the stepping thread): the action due at this step, if any.

        Every step's wall time is kept, and whether neuronscope's workers ran during it (the
        folded diagnosis leaves those out of the percentiles: capture/windows.py)."""
        with self.lock:
            last = self._last_step if self._last_step is not None else self.started
            # a step during which neuronscope's workers analysed a window is slowed by them (GIL,
            # cores): counted, but left out of the step-time percentiles
            overlapped = bool(_worker.busy[0] or self._busy_since_step)
            self.steps.add((now - last) / 1e3, overlapped)
            self.overhead.step((now - last) / 1e3, overlapped or self.recording or self._recorded_since_step)
            self._recorded_since_step = self.recording
            self._busy_since_step = False
            self._last_step = now
            if self.recording:
                self.window_steps += 1
        lim, w = self.limits, self.windows
        if self.stopped is not None:
            return None
        if lim.max_steps is not None and self.steps.count >= lim.max_steps:
            if self.recording:
                return "steps"
            self.stopped = "steps"  # between windows: none starts again
            return None
        if self.recording:
            if w is not None and w.steps is not None and self.window_steps >= w.steps:
                self.window_reason = "window_steps"
                return "window"
            if w is not None and self.window_due:
                return "window"
            return None
        if w is not None and self.ready_for_next(now):
            return "resume"
        return None


class StepTimes:
    """Every step's wall time in bounded memory: all of them up to ``CAP``, then a uniform
    sample (every 2nd, then every 4th...: a run of days of ns.step() per request stays ~2 MB);
    the count and the slowest step are exact."""

    CAP = 131_072

    def __init__(self) -> None:
        self.count = 0
        self.stride = 1
        self.us: array[float] = array("d")
        self.overlapped: array[int] = array("b")
        self.slowest = (0, 0.0, False)  # (index, us, overlapped)

    def add(self, us: float, overlapped: bool) -> None:
        index = self.count
        self.count += 1
        if us > self.slowest[1] or index == 0:
            self.slowest = (index, us, overlapped)
        if index % self.stride:
            return
        self.us.append(us)
        self.overlapped.append(overlapped)
        if len(self.us) >= self.CAP:  # keep every other one: still every stride-th step
            self.us, self.overlapped = self.us[::2], self.overlapped[::2]
            self.stride *= 2

    def timed(self) -> Any:
        """The fold's view (analysis/fold.TimedSteps)."""
        from ..analysis.fold import TimedSteps

        index, us, overlapped = self.slowest
        return TimedSteps(
            count=self.count,
            sample_us=list(self.us),
            sample_overlapped=[bool(o) for o in self.overlapped],
            slowest_index=index,
            slowest_us=us,
            slowest_overlapped=overlapped,
        )
