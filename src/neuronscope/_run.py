"""``Run``: the result of one profiled call or ``with`` block.

A Run is handed to the user when the profile starts (``with profile_neuron() as run``) and
filled in by the background workers in stages; each attribute waits for its own stage only:

1. ``summary`` (and ``trace``): the per-op summary, ready right after the block;
2. ``diagnosis``: why it is slow, computed right after the summary;
3. ``path`` / ``wait()``: the run directory written and the telemetry sent.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis.diagnosis import Diagnosis
    from .analysis.memory_model import MemoryReport
    from .analysis.summary import Summary
    from .trace.model import Trace

__all__ = ["Run", "RunStatus"]


class RunStatus:
    PENDING = "pending"  #: capturing or being processed
    COMPLETE = "complete"
    ERROR = "error"  #: processed completely, but the profiled code raised (``run.error``): an OOM, say
    SKIPPED = "skipped"  #: ran unprofiled (sampled out, under backpressure, or no profiler could run)
    JOINED = "joined"  #: nested inside a scheduled or foreign profile: recorded as a region of that one
    DROPPED = "dropped"  #: no longer produced (a decided sample is always processed); kept for old manifests
    FAILED = "failed"  #: neuronscope failed to process it (logged); the user's call was unaffected


class Run:
    """One profile. Each result attribute waits for the processing stage that produces it."""

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
        self.skip_reason: str | None = None  #: why a SKIPPED run was not profiled
        self.manifest: dict[str, Any] = {}
        self.windows: list[Run] = []  #: with a schedule: one completed Run per active window
        self.parent: Run | None = None  #: for a JOINED run, the enclosing run
        self._summary: Summary | None = None
        self._diagnosis: Diagnosis | None = None
        self._memory: MemoryReport | None = None
        self._trace: Trace | None = None
        self._path: Path | None = None
        self._summarised = threading.Event()  # stage 1: summary and trace model ready
        self._diagnosed = threading.Event()  # stage 2: diagnosis ready
        self._done = threading.Event()  # stage 3: run directory written, sinks done
        self._schedule_handle = schedule_handle
        self._otel_parent: Any = None  # OpenTelemetry context current when the profile started
        #: why this call was profiled on demand (``ns.arm()``, ``neuronscope arm``, a SlowCalls trigger); else None
        self.trigger: Any = None
        self._baseline: Path | None = None  # set when written (see .baseline)
        self._explanation: Any = None

    # -- completion ----------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until processing has finished (files written, telemetry sent).
        False if ``timeout`` seconds passed first."""
        return self._wait("_done", timeout)

    def _wait(self, stage: str, timeout: float | None = None) -> bool:
        if self.parent is not None:
            return self.parent._wait(stage, timeout)
        if self.windows:  # a scheduled profile: done when every window is
            return all(w._wait(stage, timeout) for w in list(self.windows)) and getattr(self, stage).wait(timeout)
        return getattr(self, stage).wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def profiled(self) -> bool:
        """True when this call was (or is being) profiled; False when it ran unprofiled."""
        return self.status in (RunStatus.PENDING, RunStatus.COMPLETE, RunStatus.ERROR, RunStatus.JOINED)

    def _set_summary(self, summary: "Summary | None", trace: "Trace | None") -> None:
        self._summary, self._trace = summary, trace
        self._summarised.set()

    def _set_diagnosis(self, diagnosis: "Diagnosis | None") -> None:
        self._diagnosis = diagnosis
        self._diagnosed.set()

    def _finish(self, status: str) -> None:
        self.status = status
        self._summarised.set()
        self._diagnosed.set()
        self._done.set()

    # -- results -------------------------------------------------------------------------
    @property
    def summary(self) -> "Summary | None":
        """The per-op summary, as soon as it is computed (the run directory and telemetry
        follow in the background). None for runs that were not profiled (``run.skip_reason``
        says why).

        A JOINED run gives the enclosing run's summary of the region it was recorded as,
        once the enclosing run has been summarised (None before). With a schedule, the
        latest window's summary.
        """
        if self.parent is not None:
            if not self.parent._summarised.is_set():
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
        self._summarised.wait()
        return self._summary

    @property
    def diagnosis(self) -> "Diagnosis | None":
        """Why the run is slow (:class:`~neuronscope.Diagnosis`): device busy/idle, the
        classified gaps, steps, a verdict and advice. None for runs that were not profiled."""
        if self.parent is not None:
            return None  # a region of another run: see the enclosing run's diagnosis
        if self.windows:
            return self.windows[-1].diagnosis
        self._diagnosed.wait()
        return self._diagnosis

    @property
    def memory(self) -> "MemoryReport | None":
        """Why memory is high (:class:`~neuronscope.MemoryReport`): the peak, who holds it, growth
        per step. None unless the run was profiled with ``memory=True`` (or ``profile_memory=True``)."""
        if self.parent is not None:
            return None
        if self.windows:
            return self.windows[-1].memory
        self._diagnosed.wait()
        return self._memory

    @property
    def trace(self) -> "Trace | None":
        """The full trace model (waits for the summary stage). None when not captured."""
        if self.windows:
            return self.windows[-1].trace
        self._summarised.wait()
        if self._trace is None:
            self.wait()
            if self._path is not None and (self._path / "trace.json.gz").is_file():
                from .trace.chrome import load_trace

                self._trace = load_trace(self._path / "trace.json.gz", device=self.device)
        return self._trace

    @property
    def path(self) -> Path | None:
        """The run directory (waits until it is written; None when it could not be, or for
        runs that were not profiled)."""
        if self.parent is not None:
            return self.parent.path
        if self.windows:
            return self.windows[-1].path
        self.wait()
        return self._path

    # -- on-demand captures (triggers) ----------------------------------------------------------
    @property
    def baseline(self) -> Path | None:
        """For a triggered run: the run directory of the normal call it is compared with
        (waits until this run is written; None when there was no baseline yet)."""
        if self.trigger is not None:
            self.wait()
        return self._baseline

    @property
    def explanation(self) -> Any:
        """For a triggered run with a baseline: where the extra wall time went, the
        :class:`~neuronscope.analysis.diff.Explanation` that ``neuronscope diff BASELINE RUN``
        prints (ops and idle classes, largest change first). None otherwise."""
        if self.trigger is not None:
            self.wait()
        return self._explanation

    # -- schedules -----------------------------------------------------------------------
    def step(self) -> None:
        """Advance ``torch.profiler.schedule`` (call once per training/serving step)."""
        if self._schedule_handle is None:
            raise RuntimeError("run.step() needs profile_neuron(schedule=torch.profiler.schedule(...)); use ns.step() to mark steps")
        self._schedule_handle.step()

    def __repr__(self) -> str:
        where = f" path={str(self._path)!r}" if self._path else ""
        return f"<neuronscope.Run name={self.name!r} device={self.device!r} status={self.status}{where}>"
