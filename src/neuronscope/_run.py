"""``Run``: the result of one profiled call or ``with`` block.

A Run is handed to the user when the profile starts (``with profile_neuron() as run``) and
filled in once the capture has been processed, possibly on the background worker. Reading
``summary``/``trace``/``path`` waits for that (``run.wait()`` does so explicitly).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis.summary import Summary
    from .trace.model import Trace

__all__ = ["Run", "RunStatus"]


class RunStatus:
    PENDING = "pending"  #: capturing or being processed
    COMPLETE = "complete"
    SKIPPED = "skipped"  #: ran unprofiled (another capture was active, or sampled out)
    JOINED = "joined"  #: nested inside another profile: recorded as a region of that one
    DROPPED = "dropped"  #: captured, but discarded because the background worker was full
    FAILED = "failed"  #: neuronscope failed to process it (logged); the user's call was unaffected


class Run:
    """One profile. Attributes are valid once :meth:`wait` returns True."""

    def __init__(self, name: str, device: str, *, schedule_handle: Any = None) -> None:
        self.name = name
        self.device = device
        self.status = RunStatus.PENDING
        self.start_ns: int = 0
        self.end_ns: int = 0
        self.error: str | None = None  #: type name of the exception the profiled code raised
        self.caller_overhead_ns: int = 0  #: wall time neuronscope spent on the calling thread (torch's start/stop excluded)
        self.caller_overhead_cpu_ns: int = 0  #: the same as this thread's CPU time (no GIL waits)
        self.error_message: str | None = None  #: its message (capped); the exception itself is not kept
        self.warnings: list[str] = []
        self.manifest: dict[str, Any] = {}
        self.windows: list[Run] = []  #: with a schedule: one completed Run per active window
        self.parent: Run | None = None  #: for a JOINED run, the enclosing run
        self._summary: Summary | None = None
        self._trace: Trace | None = None
        self._path: Path | None = None
        self._done = threading.Event()
        self._schedule_handle = schedule_handle
        self._otel_parent: Any = None  # OpenTelemetry context current when the profile started

    # -- completion ----------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until processing has finished. False if ``timeout`` seconds passed first."""
        if self.parent is not None:
            return self.parent.wait(timeout)
        if self.windows and not self._done.is_set():
            return all(w.wait(timeout) for w in self.windows)
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, status: str) -> None:
        self.status = status
        self._done.set()

    # -- results -------------------------------------------------------------------------
    @property
    def summary(self) -> "Summary | None":
        """The per-op summary (waits for processing). None for skipped/dropped runs.

        A JOINED run gives the enclosing run's summary of the region it was recorded as,
        once the enclosing run has finished (None before).
        With a schedule, the latest window's summary.
        """
        if self.parent is not None:
            if not self.parent.done:
                return None  # the enclosing profile is still running: waiting here would deadlock
            outer = self.parent.summary
            if outer is None:
                return None
            for path, region in outer.regions.items():
                if path == self.name or path.endswith("/" + self.name):
                    return region
            return None
        if self.windows:
            return self.windows[-1].summary
        self.wait()
        return self._summary

    @property
    def trace(self) -> "Trace | None":
        """The full trace model (waits for processing). None when not captured."""
        if self.windows:
            return self.windows[-1].trace
        self.wait()
        if self._trace is None and self._path is not None and (self._path / "trace.json.gz").is_file():
            from .trace.chrome import load_trace

            self._trace = load_trace(self._path / "trace.json.gz", device=self.device)
        return self._trace

    @property
    def path(self) -> Path | None:
        """The run directory (None when it could not be written, or for skipped runs)."""
        if self.parent is not None:
            return self.parent.path
        if self.windows:
            return self.windows[-1].path
        self.wait()
        return self._path

    # -- schedules -----------------------------------------------------------------------
    def step(self) -> None:
        """Advance ``torch.profiler.schedule`` (call once per training/serving step)."""
        if self._schedule_handle is None:
            raise RuntimeError("run.step() needs profile_neuron(schedule=torch.profiler.schedule(...))")
        self._schedule_handle.step()

    def __repr__(self) -> str:
        where = f" path={str(self._path)!r}" if self._path else ""
        return f"<neuronscope.Run name={self.name!r} device={self.device!r} status={self.status}{where}>"
