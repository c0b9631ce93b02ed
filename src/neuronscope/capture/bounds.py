"""A capture's bounded recording: the target of the budget's watchdog and the host of its windows.

The capture (capture/lifecycle.py) owns the profiler session; this object owns what limits it --
the :class:`~.budget.Recording` state, the :class:`~.windows.WindowedRun` that analyses and folds
each window, and the CPU contention measured over each stretch of recording. The watchdog
(capture/watchdog.py) watches this object, not the capture: ``recording``, ``all_threads``, ``name``
and :meth:`limit_action` are what it needs.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from .. import _system, _worker
from .._run import Run
from ..result import Coverage
from . import session, watchdog
from .budget import STOP_WORDS, Limits, Recording, Windows
from .processing import ProcessOptions, finish_windows, set_last_run
from .windows import WindowedRun

__all__ = ["Bounds", "CpuSpan", "LimitedCapture"]

log = logging.getLogger("neuronscope")


class LimitedCapture(session.Client, Protocol):
    """What the bounds need of their capture (capture/lifecycle.py's ``Capture``)."""

    run: Run | None
    run_dir: Path | None
    is_open: bool  #: between a started session and the capture's end

    def options(self, window: int | None) -> ProcessOptions: ...


class CpuSpan:
    """Whether the profiled thread had a CPU since a start (the session's, or a window's)."""

    def __init__(self) -> None:
        self.native_thread = threading.get_native_id()  # the profiled thread
        self.at_start: Any = None  # _system.cpu_sample when this session or window started

    def restart(self) -> None:
        self.at_start = _system.cpu_sample(self.native_thread)

    def contention(self) -> Any:
        return _system.cpu_contention(self.at_start, _system.cpu_sample(self.native_thread))


class Bounds:
    """The limits' side of one capture: act at a limit or a window's boundary, end the windows."""

    def __init__(
        self, capture: LimitedCapture, limits: Limits, windows: Windows | None, cpu: CpuSpan, window_start_ns: int
    ) -> None:
        self.capture = capture
        self.name = capture.name
        self.all_threads = capture.all_threads
        self.recording = Recording(self, limits, windows)
        self.cpu = cpu
        self.window_start_ns = window_start_ns
        self.windowed: WindowedRun | None = None  # capture/windows.WindowedRun, for a profile in windows
        self.last_window_cpu: Any = None  # the last window's contention, measured as the capture ended
        self.recorded_steps = 0  # the steps recorded before a limit stopped a profile not in windows
        self._lock = threading.Lock()  # one limit action at a time (the watchdog and the stepping thread act)

    def host_windows(self, windows: Windows, device: str, make_dir: Any) -> None:
        """Profile in windows: each analysed as it ends (capture/windows.py); ``make_dir()`` makes
        their run directory when the capture has none yet."""
        self.windowed = WindowedRun(self.name, device, windows, self.recording, self.capture.run_dir, make_dir)

    def watch(self) -> None:
        watchdog.watch(self)

    def unwatch(self) -> None:
        watchdog.unwatch(self)

    def limit_action(self, action: str) -> None:
        """A limit or window boundary was reached (on a thread allowed to stop the session):
        "resume" starts the next window; anything else stops recording (a window's end, or for good)."""
        if not self.capture.is_open:
            return
        with self._lock:  # the watchdog and the stepping thread may both act at a boundary
            if action == "resume":
                self._resume()
            else:
                self._stop(action)

    def _resume(self) -> None:
        rec = self.recording
        if rec.recording:
            return  # resumed already (by the other thread): a second start would skip a window's number
        if rec.in_flight == 0 and session.resume(self.capture):
            rec.session_started_now(time.monotonic_ns())
            self.window_start_ns = time.time_ns()
            self.cpu.restart()
            if threading.get_ident() == rec.thread:
                # on the capture's own thread, a window is delimited by the capture's markers as a
                # whole profile is (the diagnosis' window then holds its last step and the idle after it)
                session.mark_capture(self.capture)

    def _stop(self, action: str) -> None:
        rec, capture = self.recording, self.capture
        if not rec.recording:
            return  # stopped already (by the other thread)
        if threading.get_ident() == rec.thread and self.windowed is not None:
            session.mark_capture(capture, end=True)
        now, wall = time.monotonic_ns(), time.time_ns()
        steps = rec.window_steps
        cpu = self.cpu.contention()
        taken = session.cut(capture, take=self.windowed is not None)
        if taken is None:
            return
        rec.overhead.add(time.monotonic_ns() - now)  # torch's stop: synchronous, and it holds the GIL
        ended_by = rec.window_reason if action == "window" else action
        rec.session_ended(now, action)
        if self.windowed is not None:
            self.windowed.submit(
                rec.window_index, taken, ended_by, capture.options(None), self.window_start_ns, wall, steps, cpu=cpu
            )
        elif capture.run is not None:  # a profile that stopped at a limit: its recorded time
            self.recorded_steps = steps
            capture.run.note_capture(cpu_contention=cpu)
        if rec.stopped is not None and capture.run is not None:
            log.info("neuronscope: %r stopped recording at %s; the code runs on unprofiled", self.name, STOP_WORDS[action])

    # -- the capture's end ----------------------------------------------------------------------
    def measure_cpu_at_end(self, run: Run) -> None:
        """Whether the thread had a CPU since the session (or the last window) started."""
        if not self.recording.recording:
            return  # stopped at a limit, or between windows: measured when it stopped
        cpu = self.cpu.contention()
        if self.windowed is not None:
            self.last_window_cpu = cpu
        else:
            run.note_capture(cpu_contention=cpu)

    def coverage(self, run: Run) -> Coverage | None:
        """What a profile that stopped at a limit covers (events are counted by the analysis)."""
        rec = self.recording
        if rec.stopped is None:
            return None
        return Coverage(
            wall_ns=max(run.end_ns - run.start_ns, 0),
            recorded_ns=rec.recorded_ns,
            events=0,
            stopped=rec.stopped,
            max_events=rec.max_events,
            budget_source=rec.budget_source,
            steps=rec.steps.count,
            recorded_steps=self.recorded_steps,
        )

    def ends_in_windows(self) -> bool:
        """Whether the run is the fold of its windows (one that ended in its first is an ordinary run)."""
        return self.windowed is not None and (self.recording.window_index > 1 or not self.recording.recording)

    def end_windows(self, run: Run, segments: list[Any], ended_mono_ns: int) -> None:
        """The last window, then the fold of all of them as the run (on the analysis worker).
        ``ended_mono_ns``: when the profile ended (before torch's stop, which is not recorded time)."""
        rec, windowed, capture = self.recording, self.windowed, self.capture
        assert windowed is not None
        was_recording = rec.recording
        rec.session_ended(ended_mono_ns, "end")
        taken = list(segments)
        capture.segments.clear()
        if taken:
            end = run.end_ns if was_recording else self.window_start_ns
            start = self.window_start_ns
            cpu = self.last_window_cpu if was_recording else None
            windowed.submit(
                rec.window_index, taken, "end", capture.options(None), start, max(end, start), rec.window_steps, cpu=cpu
            )
        set_last_run(run)
        options = capture.options(None)
        where: Any = capture.run_dir if capture.run_dir is not None else windowed.directory
        _worker.windows_worker().submit(lambda: finish_windows(run, windowed, rec.stopped, where, options))
