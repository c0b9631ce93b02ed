"""``Run``: the user's handle on one profiled call or ``with`` block.

A Run is handed to the user when the profile starts (``with profile_neuron() as run``). The
stages never write into it: each publishes its frozen product (:mod:`neuronscope.result`)
through the handle, and each attribute waits for the product it reads:

1. ``summary`` (and ``trace``): the analysis worker's summary, right after the block;
2. ``diagnosis``, ``memory``: its :class:`~neuronscope.result.Analysis`, right after that;
3. ``path``, ``manifest``, ``wait()``: the :class:`~neuronscope.result.RunResult` — the run
   directory written and the telemetry sent.

What the capture itself knows (start and end, the profiled code's error, what it cost the
caller, why it was skipped) it sets through the handle's own methods (``not_profiled``,
``started``, ``ended``, ``note_capture``, ``add_caller_overhead``...), on the user's thread.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .result import CaptureFacts, Coverage

if TYPE_CHECKING:
    from .analysis.diagnosis import Diagnosis
    from .analysis.explain import Explanation
    from .analysis.memory_model import MemoryReport
    from .analysis.summary import Summary
    from ._trigger import Trigger
    from .result import Analysis, RunResult
    from .trace.model import Trace

__all__ = ["Run", "RunStatus"]


class RunStatus:
    PENDING = "pending"  #: capturing or being processed
    COMPLETE = "complete"
    ERROR = "error"  #: processed completely, but the profiled code raised (``run.error``): an OOM, say
    SKIPPED = "skipped"  #: ran unprofiled (sampled out, under backpressure, or no profiler could run)
    JOINED = "joined"  #: nested inside a scheduled or foreign profile: recorded as a region of that one
    FAILED = "failed"  #: neuronscope failed to process it (logged); the user's call was unaffected
    INCOMPLETE = "incomplete"  #: read back from a run directory its process never finished (killed mid-write)


class Run:
    """One profile. Each result attribute waits for the processing stage that produces it."""

    def __init__(self, name: str, device: str, *, schedule_handle: Any = None, capture: CaptureFacts | None = None) -> None:
        self.name = name
        self.device = device
        self.status = RunStatus.PENDING
        self.start_ns: int = 0
        self.end_ns: int = 0
        self.error: str | None = None  #: type name of the exception the profiled code raised
        self.caller_overhead_ns: int = 0  #: wall time neuronscope spent on the calling thread (torch's profiler excluded)
        self.caller_overhead_cpu_ns: int = 0  #: the same as this thread's CPU time (no GIL waits)
        self.error_message: str | None = None  #: its message (capped); the exception itself is not kept
        self.skip_reason: str | None = None  #: why a SKIPPED run was not profiled
        self.windows: list[Run] = []  #: with a schedule: one completed Run per active window
        self.parent: Run | None = None  #: for a JOINED run, the enclosing run
        self.origin: Path | None = None  #: for a run read back from disk: the directory it came from
        self.capture = capture or CaptureFacts()  #: what the capture knew (see neuronscope.result)
        self._capture_warnings: list[str] = []  # the capture's own, until processing takes them
        self._summary: Summary | None = None
        self._trace: Trace | None = None
        self._analysis: Analysis | None = None
        self._result: RunResult | None = None
        self._summarised = threading.Event()  # stage 1: summary and trace model ready
        self._diagnosed = threading.Event()  # stage 2: the whole analysis ready
        self._done = threading.Event()  # stage 3: run directory written, sinks done
        self._schedule_handle = schedule_handle

    # -- what the stages publish (each once, in this order) ---------------------------------------
    def warn(self, message: str) -> None:
        """A problem the capture ran into (on the user's thread): kept with the run's warnings."""
        self._capture_warnings.append(message)

    def capture_warnings(self) -> tuple[str, ...]:
        return tuple(self._capture_warnings)

    def publish_summary(self, summary: Summary, trace: Trace) -> None:
        """The analysis worker's summary (stage 1): ``run.summary`` and ``run.trace`` stop waiting."""
        self._summary, self._trace = summary, trace
        self._summarised.set()

    def publish_analysis(self, analysis: Analysis) -> None:
        """The whole analysis (stage 2): ``run.diagnosis``, ``run.memory`` and ``run.coverage`` stop waiting."""
        self._analysis = analysis
        self._summary, self._trace = analysis.summary, analysis.trace
        self._summarised.set()
        self._diagnosed.set()

    def complete(self, result: RunResult) -> None:
        """The final product: the run is done (``status`` from the result)."""
        self._result = result
        if result.analysis is not None:
            self._analysis = result.analysis
            self._summary, self._trace = result.analysis.summary, result.analysis.trace
        self.finish(result.status)

    def finish(self, status: str) -> None:
        """No (more) products: skipped, joined, failed, or completed through :meth:`complete`."""
        self.status = status
        self._summarised.set()
        self._diagnosed.set()
        self._done.set()

    # -- what the capture sets, on the user's thread (capture/lifecycle.py) -----------------------
    @classmethod
    def not_profiled(cls, name: str, device: str, reason: str, status: str = RunStatus.SKIPPED) -> Run:
        """A finished handle on a call that ran unprofiled (skipped, or the profiler failed to start)."""
        run = cls(name, device)
        run.skip_reason = reason
        run.finish(status)
        return run

    def join(self, parent: Run) -> None:
        """Recorded as a region of ``parent`` (a scheduled profile it ran inside): done when that is."""
        self.parent = parent
        self.status = RunStatus.JOINED

    def started(self, start_ns: int) -> None:
        self.start_ns = start_ns

    def ended(self, end_ns: int, error: BaseException | None = None) -> None:
        """The profiled code returned at ``end_ns`` (or raised ``error``: its type and message are kept)."""
        self.end_ns = end_ns
        if error is not None:
            self.error = type(error).__name__
            self.error_message = str(error)[:1024]

    def note_capture(self, **facts: Any) -> None:
        """What the capture learnt since it started (device memory, CPU contention): CaptureFacts' fields."""
        self.capture = replace(self.capture, **facts)

    def add_caller_overhead(self, wall_ns: int, cpu_ns: int) -> None:
        """Time neuronscope spent on the calling thread (torch's profiler: making it, start, stop, excluded)."""
        self.caller_overhead_ns += wall_ns
        self.caller_overhead_cpu_ns += cpu_ns

    def add_window(self, window: Run) -> None:
        """A scheduled profile's active window finished as its own run."""
        self.windows.append(window)

    @property
    def result(self) -> RunResult | None:
        """The finished run as the sinks saw it (:class:`~neuronscope.result.RunResult`); waits
        for processing. None for runs that were not profiled or whose processing failed early."""
        if self.parent is not None:
            return None
        if self.windows:
            return self.windows[-1].result
        self.wait()
        return self._result

    def analysis_if_ready(self) -> Analysis | None:
        """The analysis if it is already published (never waits; for triggers comparing runs)."""
        return self._analysis if self._diagnosed.is_set() else None

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
        return bool(getattr(self, stage).wait(timeout))

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def profiled(self) -> bool:
        """True when this call was (or is being) profiled; False when it ran unprofiled."""
        return self.status in (RunStatus.PENDING, RunStatus.COMPLETE, RunStatus.ERROR, RunStatus.JOINED)

    # -- results -------------------------------------------------------------------------
    @property
    def trigger(self) -> Trigger | None:
        """Why this call was profiled on demand (``ns.arm()``, ``neuronscope arm``, a SlowCalls
        trigger); None otherwise."""
        return self.capture.trigger

    @property
    def warnings(self) -> list[str]:
        """Problems met while capturing and processing (the run is kept regardless)."""
        if self._result is not None:
            return list(self._result.warnings)
        if self._analysis is not None:
            return list(self._analysis.warnings)
        return list(self._capture_warnings)

    @property
    def manifest(self) -> dict[str, Any]:
        """manifest.json's fields (waits until the run is written; {} for runs not profiled)."""
        if self.parent is not None:
            return {}
        if self.windows:
            return self.windows[-1].manifest
        self.wait()
        return dict(self._result.manifest) if self._result is not None else {}

    @property
    def summary(self) -> Summary | None:
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
        if self._result is not None and self._result.summary is not None:
            return self._result.summary  # with the notes of the enrichment that ran after it
        return self._summary

    @property
    def diagnosis(self) -> Diagnosis | None:
        """Why the run is slow (:class:`~neuronscope.Diagnosis`): device busy/idle, the
        classified gaps, steps, a verdict and advice. None for runs that were not profiled."""
        if self.parent is not None:
            return None  # a region of another run: see the enclosing run's diagnosis
        if self.windows:
            return self.windows[-1].diagnosis
        self._diagnosed.wait()
        return self._analysis.diagnosis if self._analysis is not None else None

    @property
    def coverage(self) -> Coverage | None:
        """How much of the run was recorded and why recording stopped (waits for the analysis);
        None when it recorded all of it (no limit reached, not in windows)."""
        if not self._wait("_diagnosed"):
            return None
        return self._analysis.coverage if self._analysis is not None else None

    @property
    def memory(self) -> MemoryReport | None:
        """Why memory is high (:class:`~neuronscope.MemoryReport`): the peak, who holds it, growth
        per step. None unless the run was profiled with ``memory=True`` (or ``profile_memory=True``)."""
        if self.parent is not None:
            return None
        if self.windows:
            return self.windows[-1].memory
        self._diagnosed.wait()
        return self._analysis.memory if self._analysis is not None else None

    @property
    def trace(self) -> Trace | None:
        """The full trace model (waits for the summary stage). None when not captured."""
        if self.windows:
            return self.windows[-1].trace
        self._summarised.wait()
        if self._trace is None:
            self.wait()
            path = self._result.path if self._result is not None else None
            if path is not None and (path / "trace.json.gz").is_file():
                from .trace.chrome import load_trace

                self._trace = load_trace(path / "trace.json.gz", device=self.device)
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
        return self._result.path if self._result is not None else None

    # -- on-demand captures (triggers) ----------------------------------------------------------
    @property
    def baseline(self) -> Path | None:
        """For a triggered run: the run directory of the normal call it is compared with
        (waits until this run is written; None when there was no baseline yet)."""
        if self.trigger is not None:
            self.wait()
        return self._result.baseline if self._result is not None else None

    @property
    def explanation(self) -> Explanation | None:
        """For a triggered run with a baseline: where the extra wall time went, the
        :class:`~neuronscope.analysis.explain.Explanation` that ``neuronscope diff BASELINE RUN``
        prints (ops and idle classes, largest change first). None otherwise."""
        if self.trigger is not None:
            self.wait()
        return self._result.explanation if self._result is not None else None

    # -- schedules -----------------------------------------------------------------------
    def step(self) -> None:
        """Advance ``torch.profiler.schedule`` (call once per training/serving step)."""
        if self._schedule_handle is None:
            from .errors import ConfigurationError

            raise ConfigurationError(
                "run.step() needs profile_neuron(schedule=torch.profiler.schedule(...)); use ns.step() to mark steps"
            )
        self._schedule_handle.step()

    @classmethod
    def from_result(cls, result: RunResult) -> Run:
        """A completed handle on a result read back from disk (``ns.load_run``)."""
        run = cls(result.name, result.device, capture=result.capture)
        run.start_ns, run.end_ns = result.start_ns, result.end_ns
        run.error, run.error_message = result.error, result.error_message
        run.origin = result.path
        run.complete(result)
        return run

    def _repr_html_(self) -> str:
        """What Jupyter shows: name, device, status, run directory, the diagnosis' headline and the
        top 10 ops (waits for the analysis; a run still capturing says so instead)."""
        from .analysis.notebook import run_html

        return run_html(self)

    def __repr__(self) -> str:
        path = self._result.path if self._result is not None else None
        where = f" path={str(path)!r}" if path else ""
        return f"<neuronscope.Run name={self.name!r} device={self.device!r} status={self.status}{where}>"
