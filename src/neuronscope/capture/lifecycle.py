"""One capture's lifecycle, on the calling thread: begin (skip, join or start the profiler), record
(under limits or in windows: capture/bounds.py), end (stop, hand the segments to processing).

The wrapping -- ``with``, decorator, generator, coroutine, trigger -- is capture/profile.py's and
capture/wrappers.py's: each makes a :class:`Capture` per call and calls :meth:`Capture.begin` and
:meth:`Capture.end`. A capture is also the profiler session's client (capture/session.py): the
session starts torch's profiler through :meth:`Capture.start_session` and hands back segments.

Nothing here raises into user code once the profile has been validated at creation time.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from .. import _config, _ranks, _stats, _worker
from .._run import Run, RunStatus
from ..result import CaptureFacts
from ..sinks.otel import capture_parent_context
from . import session, usdt
from . import signals as _signals
from .bounds import Bounds, CpuSpan
from .devices import DeviceBackend, select_backend
from .handoff import device_limits, discard_dir, make_run_dir, rank_manifest
from .processing import ProcessOptions, release_segments, set_last_run, submit
from .signals import Terminated

if TYPE_CHECKING:
    from .budget import Limits, Windows
    from .devices.neuron import NeuronOptions
    from .sampling import SamplingPolicy

__all__ = ["BACKLOG_WAIT_LIMIT_S", "Capture", "CaptureSpec"]

log = logging.getLogger("neuronscope")

#: the longest a profile without sampling options waits for the backlog before it is skipped
#: (only a stalled write -- a hung disk or sink -- takes that long: 400,000 events drain in ~2 s)
BACKLOG_WAIT_LIMIT_S = 120.0


class CaptureSpec(Protocol):
    """What a capture reads of its profile (capture/profile.py's ``ProfileNeuron`` is one)."""

    device: str
    neuron: NeuronOptions | None
    output_dir: Any
    schedule: Any
    torch_options: dict[str, bool]
    all_threads: bool
    memory: str | None
    ranks: frozenset[int] | None
    limits: Limits
    windows: Windows | None
    policy: SamplingPolicy


class CallerCost:
    """What neuronscope costs the calling thread, torch.profiler's own work excluded (making
    the profiler, its start and stop): wall time (includes waiting for the GIL) and this
    thread's CPU time (does not)."""

    def __init__(self) -> None:
        self.torch_ns = 0  # time inside torch's start/stop (not ours)
        self.torch_cpu_ns = 0
        self.callback_ns = 0  # time spent in on_trace_ready (inside torch's stop/step)
        self.callback_cpu_ns = 0

    @staticmethod
    def now() -> tuple[int, int]:
        return time.perf_counter_ns(), time.thread_time_ns()

    def since(self, start: tuple[int, int]) -> tuple[int, int]:
        wall, cpu = self.now()
        return wall - start[0], cpu - start[1]


class Capture:
    """One attempt to profile one call. Never raises after construction."""

    _serials = itertools.count(1)

    def __init__(self, spec: CaptureSpec, name: str, *, save_trace: bool) -> None:
        self.spec = spec
        self.name = name
        self.save_trace = save_trace
        self.serial = next(Capture._serials)
        self.all_threads = spec.all_threads
        self.schedule = spec.schedule  # session.Client: what the shared session needs to know
        self.run: Run | None = None
        self.segments: list[Any] = []  # session.Segment, appended by the session
        self.is_open = False  # between a started session and end()
        self.paused = False  # session.Client: open but not recording (past a limit, between windows)
        self.last_window_results: Any = None  # a scheduled capture's last window (see session.share_window)
        self.run_dir: Path | None = None  # made at the start for devices that write raw files while recording
        self.first_call = False  # set by the decorator for its first profiled call
        self.call_index = 0  # the n-th call of this profile name in this process (for multi-rank traces)
        self.rank_info: _ranks.RankInfo | None = None  # set at start in a distributed job
        self.trigger: Any = None  # why it is profiled on demand (arming, a SlowCalls trigger)
        self.annotate: Any = None  # the trigger's hook adding baseline and explanation to the manifest
        self.call_ns: int | None = None  # the call's wall time, when a trigger timed it (for its manifest)
        self.bounds: Bounds | None = None  # the limits and windows (capture/bounds.py); None with a schedule
        self._region: Any = None
        self._backend: DeviceBackend | None = None
        self._raw_dir: Path | None = None
        self._prof: Any = None  # a scheduled capture's own torch profile (for step())
        self._windows = 0
        self._cost = CallerCost()
        self._cpu = CpuSpan()

    # -- outcomes without a profile ------------------------------------------------------------
    def unsampled(self) -> Run:
        return self.skipped("sampled out")

    def skipped(self, reason: str) -> Run:
        self.run = Run.not_profiled(self.name, "none", reason)
        return self.run

    def begin(self) -> Run:
        if not _config.is_enabled():
            return self.skipped("neuronscope is disabled (configure(enabled=False) or NEURONSCOPE_DISABLED=1)")
        outcome = session.decide(self)
        if outcome is session.JOIN or outcome is session.FOREIGN:
            return self._join_as_region(outcome)
        if outcome is session.OTHER_THREAD:
            _stats.record("skipped")
            return self.skipped(
                "another profile is recording on another thread; torch.profiler records one session at a time and "
                "only the thread that started it (profile_neuron(all_threads=True) on the outer profile lets it nest)"
            )
        if _worker.backlog.over_budget() and not self._wait_for_backlog():
            _stats.record("skipped_backpressure")
            _warn_backpressure()
            return self.skipped("backpressure: profiles waiting to be written exceed max_pending_bytes")
        try:
            return self._start()
        except Exception as exc:  # noqa: BLE001 - profiling must never break the user's call
            session.abandon(self)
            _stats.contain("starting the profiler (running unprofiled)", exc, name=self.name, exc_info=False)
            _stats.record("failed")
            if self.run_dir is not None:
                discard_dir(self.run_dir)
            self.is_open = False
            device = getattr(self._backend, "name", "unknown")
            self.run = Run.not_profiled(self.name, device, f"the profiler could not start: {exc}", RunStatus.FAILED)
            return self.run

    def _wait_for_backlog(self) -> bool:
        """Over budget: a sampled call is expendable and is skipped; a profile asked for without
        sampling options (a ``with`` block in a script, a decorator that profiles every call)
        waits for earlier profiles to be written instead, so none is lost and memory stays
        bounded. True when this capture may start."""
        if not self.spec.policy.trivial:
            return False
        t0 = time.monotonic()
        ok = _worker.backlog.wait_until_under_budget(BACKLOG_WAIT_LIMIT_S)
        waited = time.monotonic() - t0
        _stats.record("backpressure_waits")
        _warn_backpressure_wait(self.name, waited)
        return ok

    def _join_as_region(self, outcome: Any) -> Run:
        # Inside a scheduled profile (its windows cannot be split) or someone else's profiler:
        # show up in it as a region.
        self._region = torch.profiler.record_function(self.name)
        self._region.__enter__()
        outer_run = session.active_run()
        if outcome is session.JOIN and outer_run is not None:
            self.run = Run(self.name, getattr(outer_run, "device", "unknown"))
            self.run.join(outer_run)
            _stats.record("joined")
        else:
            reason = "another torch.profiler (not neuronscope's) is running: recorded as a region of it"
            self.run = Run.not_profiled(self.name, getattr(outer_run, "device", "unknown"), reason)
            _stats.record("skipped")
        return self.run

    def _start(self) -> Run:
        _signals.install()  # SIGTERM ends this profile cleanly (once, from the main thread)
        begun = CallerCost.now()
        spec = self.spec
        backend = select_backend(spec.device, neuron=spec.neuron)
        self._backend = backend
        self.rank_info = _ranks.current()
        facts = CaptureFacts(otel_parent=capture_parent_context(), trigger=self.trigger)
        run = self.run = Run(self.name, backend.name, schedule_handle=self if spec.schedule else None, capture=facts)
        run.started(time.time_ns())
        if backend.needs_run_dir_at_start:
            # The device writes its raw files during the profile: the directory must exist now.
            self.run_dir = make_run_dir(spec.output_dir, self.name, run.start_ns, self.rank_info, status="recording")
            if self.run_dir is not None:
                self._raw_dir = self.run_dir / backend.name
                self._raw_dir.mkdir(mode=0o700, exist_ok=True)
        # Elsewhere the run directory is made by the output worker: mkdir and retention scans
        # are syscalls, and each can cost the caller a GIL hand-over (~5 ms) while a worker computes.
        if spec.memory:
            run.note_capture(device_start=backend.memory_start(spec.memory))
        session.enter(self)
        self.is_open = True
        session.mark_capture(self)
        run.started(time.time_ns())
        self._cpu.restart()
        if spec.schedule is None:
            self._watch_limits(backend, run.start_ns)
        wall, cpu = self._cost.since(begun)
        run.add_caller_overhead(wall - self._cost.torch_ns, cpu - self._cost.torch_cpu_ns)
        return run

    def _watch_limits(self, backend: DeviceBackend, start_ns: int) -> None:
        """Record under the profile's limits (and in windows, if asked): capture/bounds.py."""
        spec = self.spec
        self.bounds = Bounds(self, spec.limits, spec.windows, self._cpu, start_ns)
        if spec.windows is not None:
            output_dir, name, info = spec.output_dir, self.name, self.rank_info
            make = (
                None if self.run_dir is not None else (lambda: make_run_dir(output_dir, name, start_ns, info, status="recording"))
            )
            self.bounds.host_windows(spec.windows, backend.name, make)
        self.bounds.watch()

    # -- the session's client (capture/session.py) ----------------------------------------------
    def start_session(self, all_threads: bool) -> Any:
        """Start a torch profiler with this capture's options (called by the session, also to resume)."""
        backend = self._backend
        assert backend is not None
        kwargs: dict[str, Any] = dict(self.spec.torch_options)
        config = backend.experimental_config(self._raw_dir, all_threads=all_threads)
        if config is not None:
            kwargs["experimental_config"] = config
        scheduled = self.spec.schedule is not None
        activities = backend.activities()
        usdt.install()  # drops Kineto's USDT start/stop lines from stderr (capture/usdt.py)
        t0 = CallerCost.now()  # torch's time from here: making its profiler (~40 us warm) and starting it
        prof = torch.profiler.profile(
            activities=activities,
            schedule=self.spec.schedule,
            on_trace_ready=self._on_trace_ready if scheduled else None,
            **kwargs,
        )
        prof.start()
        wall, cpu = self._cost.since(t0)
        self._cost.torch_ns += wall
        self._cost.torch_cpu_ns += cpu
        if scheduled:
            self._prof = prof
        return prof

    def on_segment(self, prof: Any, seg: session.Segment) -> None:
        """The session stopped while this capture owned it (inside torch's stop for the time)."""
        _worker.backlog.add(id(seg), _worker.backlog.estimate(seg.stop_ns - seg.start_ns, seg.rss_growth, self.name))
        if self.spec.schedule is not None or self._backend is None:
            return
        try:
            self._backend.on_trace_ready(prof, self._raw_dir)
        except Exception as exc:  # noqa: BLE001
            _stats.contain(
                "device exporter", exc, name=self.name, warnings=self.run.warn if self.run is not None else None, exc_info=False
            )

    def stop_failed(self, exc: BaseException) -> None:
        _stats.contain("stopping the profiler", exc, name=self.name)

    def resume_failed(self, exc: BaseException) -> None:
        # the run keeps what it recorded; its time after the nested profile is missing
        _stats.contain(
            "resuming after a nested profile",
            exc,
            name=self.name,
            warnings=self.run.warn if self.run is not None else None,
            exc_info=False,
        )

    def step(self) -> None:
        if self._prof is not None:
            self._prof.step()

    # -- the end --------------------------------------------------------------------------------
    def end(self, exc: BaseException | None) -> None:
        if self._region is not None:
            try:
                self._region.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                log.debug("neuronscope: leaving nested region failed", exc_info=True)
            return  # a JOINED run completes with the enclosing run
        if not self.is_open or self.run is None:
            return
        self.is_open = False
        run = self.run
        ending = CallerCost.now()
        ended_mono_ns = time.monotonic_ns()  # recording ends here, not after torch's stop below
        if isinstance(exc, Terminated):
            # the process was asked to stop: the profile covers until then, the code did not fail
            run.ended(time.time_ns())
            run.warn("stopped by SIGTERM: the profile covers the time until the process was asked to stop")
        else:
            run.ended(time.time_ns(), exc)
        session.mark_capture(self, end=True)
        self._measure_cpu_at_end(run)
        if self.bounds is not None:
            self.bounds.unwatch()
        segments, torch_ns, torch_cpu_ns = self._stop(run)
        if self.spec.schedule is not None:
            release_segments(segments)  # a scheduled capture submitted each window on its own
            if not run.done:
                run.finish(RunStatus.COMPLETE if run.windows else RunStatus.SKIPPED)
            return
        if self.bounds is not None and self.bounds.ends_in_windows():
            self.bounds.end_windows(run, segments, ended_mono_ns)
        elif not segments:  # (a profile in windows that ended in its first is an ordinary run)
            _stats.record("failed")
            run.finish(RunStatus.FAILED)
            return
        else:
            set_last_run(run)
            self._submit(run, segments, self.run_dir, window=None)
        wall, cpu = self._cost.since(ending)
        run.add_caller_overhead(wall - torch_ns, cpu - torch_cpu_ns)

    def _stop(self, run: Run) -> tuple[list[Any], int, int]:
        """Stop the session (after the device's synchronize): this capture's segments, and the
        time torch's stop took (wall, CPU)."""
        backend = self._backend
        stopping = CallerCost.now()
        try:
            segments = session.leave(self, before_stop=backend.synchronize if backend is not None else None)
        except Exception as exc_stop:  # noqa: BLE001
            _stats.contain("stopping the profiler", exc_stop, name=self.name, exc_info=False)
            segments = list(self.segments)
        if self.spec.memory and backend is not None:  # ... and at the end (leave() synchronized the device)
            try:
                run.note_capture(device_end=backend.memory_end(self.spec.memory))
            except Exception as exc:  # noqa: BLE001 - the run is kept without the device's totals
                _stats.contain("reading device memory at the end", exc, name=self.name, exc_info=False)
        # leave() = torch's stop (+ a restart for an outer capture) + the device exporter:
        # the exporter is ours, the rest torch's.
        wall, cpu = self._cost.since(stopping)
        self._prof = None
        return segments, wall - self._cost.callback_ns, cpu - self._cost.callback_cpu_ns

    def _measure_cpu_at_end(self, run: Run) -> None:
        """Whether the thread had a CPU since the session (or the last window) started."""
        if self.bounds is not None:
            self.bounds.measure_cpu_at_end(run)
        else:
            run.note_capture(cpu_contention=self._cpu.contention())

    # -- what processing gets ---------------------------------------------------------------------
    def options(self, window: int | None) -> ProcessOptions:
        """How processing treats this capture's segments (a window of a schedule: ``window``)."""
        backend = self._backend
        assert backend is not None
        run = self.run
        return ProcessOptions(
            sampling=self.spec.policy.describe(),
            save_trace=self.save_trace,
            backend_info=backend.describe(),
            window=window,
            backend=backend,
            raw_dir=self._raw_dir,
            first_call=self.first_call,
            serial=self.serial,
            only_own_thread=not self.all_threads,
            extra_manifest=rank_manifest(self.rank_info, self.call_index, self.spec.ranks),
            annotate=self.annotate,
            memory=self.spec.memory,
            coverage=self.bounds.coverage(run) if self.bounds is not None and run is not None and window is None else None,
            limits=device_limits(
                self.spec.torch_options["record_shapes"], backend, self.name, run.warn if run is not None else None
            ),
        )

    def _submit(self, run: Run, segments: list[Any], run_dir: Path | None, window: int | None) -> None:
        output_dir, name, start_ns, info = self.spec.output_dir, self.name, run.start_ns, self.rank_info
        where: Any = run_dir if run_dir is not None else (lambda: make_run_dir(output_dir, name, start_ns, info))
        submit(run, segments, where, self.options(window))

    def _on_trace_ready(self, prof: Any) -> None:
        """torch.profiler calls this when a scheduled profile's active window is ready."""
        t0 = CallerCost.now()
        try:
            run = self.run
            assert run is not None and self._backend is not None
            # Each active window becomes its own Run with its own directory.
            window = Run(self.name, run.device, capture=run.capture)
            window.started(run.start_ns)
            window.ended(time.time_ns())
            run_dir = self.run_dir if self._windows == 0 else None
            self._windows += 1
            run.add_window(window)
            try:
                self._backend.on_trace_ready(prof, self._raw_dir)
            except Exception as exc:  # noqa: BLE001
                _stats.contain("device exporter", exc, name=self.name, warnings=window.warn, exc_info=False)
            seg = session.Segment(
                results=prof.profiler.kineto_results,
                owner=self,
                start_ns=window.start_ns,
                stop_ns=window.end_ns,
                all_threads=session.recording_all_threads(),
            )
            seg.hold()
            _worker.backlog.add(id(seg), _worker.backlog.estimate(seg.stop_ns - seg.start_ns, name=self.name))
            session.share_window(self, seg)  # the profiles this one runs inside hold every window too
            set_last_run(window)
            self._submit(window, [seg], run_dir, window=self._windows)
        except Exception as exc:  # noqa: BLE001
            _stats.contain("handling the finished trace", exc, name=self.name, exc_info=False)
        finally:
            wall, cpu = self._cost.since(t0)
            self._cost.callback_ns += wall
            self._cost.callback_cpu_ns += cpu


_backpressure_warned = False


def _warn_backpressure() -> None:
    global _backpressure_warned
    if not _backpressure_warned:
        _backpressure_warned = True
        log.warning(
            "neuronscope: profiles waiting to be written hold more than max_pending_bytes (%d MiB); "
            "skipping new samples until they are written (counted as skipped_backpressure in ns.stats()). "
            "Sample less often, or raise configure(max_pending_bytes=...).",
            _worker.backlog.budget() // 2**20,
        )


_backpressure_wait_warned = False


def _warn_backpressure_wait(name: str, waited_s: float) -> None:
    global _backpressure_wait_warned
    if not _backpressure_wait_warned:
        _backpressure_wait_warned = True
        log.warning(
            "neuronscope: %r waited %.1f s for earlier profiles to be written before starting (they held more "
            "than max_pending_bytes, %d MiB; counted as backpressure_waits in ns.stats()). Profiles with sampling "
            "options (every=, sample=, ...) are skipped instead of waiting; raise configure(max_pending_bytes=...) "
            "to hold more in memory.",
            name,
            waited_s,
            _worker.backlog.budget() // 2**20,
        )
