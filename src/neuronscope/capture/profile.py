"""``profile_neuron`` and ``region``: one object that is both decorator and context manager.

The calling thread only starts and stops torch.profiler (plus the device synchronize);
reading the Kineto results, the summary, the diagnosis, the run directory and the sinks run
on the background workers (:mod:`neuronscope._worker`).

PyTorch allows one profiler per process. A profile begun inside another one makes the
outer one yield (:mod:`.session`): each gets a complete Run, ready when it ends, and the
outer one still covers all its time. Nothing here raises into user code once the profile
has been validated at creation time.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch
import wrapt

from .. import _config, _env, _stats, _system, _worker
from .._run import Run, RunStatus
from ..errors import ConfigurationError
from ..result import CaptureFacts, Coverage
from ..sinks.otel import capture_parent_context
from .. import _ranks
from . import arming as _arming
from . import control as _control
from . import session, usdt
from . import signals as _signals
from .signals import Terminated
from . import wiring as _wiring  # noqa: F401 - the OpenTelemetry sink and the flush at exit, once
from . import budget as _budget
from .budget import Limits, Recording, Windows
from .devices import DeviceBackend, select_backend, validate_device
from .devices.neuron import NeuronOptions
from .processing import ProcessOptions, finish_windows, release_segments, set_last_run, submit
from .sampling import SamplingPolicy, count_value

_arming.first_call_hooks.append(_control.ensure_started)  # the channel opens at the first decorated call

__all__ = ["ProfileNeuron", "profile_neuron"]

log = logging.getLogger("neuronscope")
F = TypeVar("F", bound=Callable[..., Any])


class ProfileNeuron:
    """A configured profile: use as ``with`` (yields a :class:`Run`) or as a decorator.

    Create it with :func:`profile_neuron`; arguments are validated here, so a mistake fails
    at decoration time, not on the first request.

    ``memory=True`` also records the allocator (torch's ``profile_memory=True``, which implies
    it) and makes ``run.memory`` a :class:`~neuronscope.MemoryReport`: the peak, who holds it,
    growth per step (docs/memory.md). ``memory="history"`` adds, on CUDA, the allocator
    history as ``memory_snapshot.pickle`` in the run directory (pytorch.org/memory_viz).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        device: str = "auto",
        output_dir: str | os.PathLike[str] | None = None,
        save_trace: bool | None = None,
        schedule: Callable[[int], Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        neuron: NeuronOptions | None = None,
        sample: float | None = None,
        every: int | None = None,
        max_per_minute: int | None = None,
        warmup: int = 0,
        seed: int | None = None,
        sampler: Callable[[], bool] | None = None,
        all_threads: bool = False,
        ranks: Any = "all",
        trigger: Any = None,
        memory: bool | str = False,
        windows: Windows | int | None = None,
        max_events: int | None = None,
        max_seconds: float | None = None,
        max_steps: int | None = None,
        _policy_site: tuple[str, int] | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"profile_neuron(name={name!r}): name must be a non-empty string")
        self.device = validate_device(device)
        if self.device != "auto":
            select_backend(self.device)  # an explicitly requested device that is absent (or misconfigured) fails here
        self._sampling = dict(
            sample=sample, every=every, max_per_minute=max_per_minute, warmup=warmup, seed=seed, sampler=sampler
        )
        self.policy = _policy_for_site(self._sampling, _policy_site)
        if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
            raise ConfigurationError(f"profile_neuron(output_dir={output_dir!r}): use a path (str or os.PathLike)")
        if save_trace is not None and not isinstance(save_trace, bool):
            raise ConfigurationError(f"profile_neuron(save_trace={save_trace!r}): use True, False or None (auto)")
        if schedule is not None and not callable(schedule):
            raise ConfigurationError(
                "profile_neuron(schedule=...): pass torch.profiler.schedule(wait=..., warmup=..., active=...)"
            )
        if neuron is not None and not isinstance(neuron, NeuronOptions):
            raise ConfigurationError("profile_neuron(neuron=...): pass neuronscope.NeuronOptions(...)")
        for flag, value in (
            ("record_shapes", record_shapes),
            ("profile_memory", profile_memory),
            ("with_stack", with_stack),
            ("with_flops", with_flops),
            ("all_threads", all_threads),
        ):
            if not isinstance(value, bool):
                raise ConfigurationError(f"profile_neuron({flag}={value!r}): use True or False")
        if memory not in (True, False, "history"):
            raise ConfigurationError(f'profile_neuron(memory={memory!r}): use True, False or "history" (CUDA allocator history)')
        #: the memory stage: None (off), "on", or "history"; profile_memory=True implies "on"
        self.memory = "history" if memory == "history" else ("on" if (memory or profile_memory) else None)
        if self.memory:
            profile_memory = True
        self.name = name
        self.output_dir = output_dir
        self.save_trace = save_trace
        self.schedule = schedule
        self.torch_options = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
            "with_flops": with_flops,
        }
        self.neuron = neuron
        self.all_threads = all_threads
        #: ranks that profile (None: all); a single-process run counts as rank 0
        self.ranks = _ranks.parse_ranks(ranks)
        if trigger is not None:
            from .triggers import SlowCalls

            if not isinstance(trigger, SlowCalls):
                raise ConfigurationError("profile_neuron(trigger=...): pass neuronscope.SlowCalls(...)")
        self.trigger = trigger
        #: when recording stops (capture/budget.py): an event budget, a duration, a step count
        self.limits = Limits(max_events=max_events, max_seconds=max_seconds, max_steps=max_steps)
        #: profile a long run in windows folded into one run (capture/windows.py)
        self.windows = _windows_option(windows, schedule)
        self._local = threading.local()  # per-thread stack of active captures of this object

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> Run:
        if self.trigger is not None:
            raise ConfigurationError(
                "profile_neuron(trigger=...) times every call of a decorated function; use it as a decorator, not in `with`"
            )
        name = self.name or "profile"
        capture = _Capture(self, name, save_trace=True if self.save_trace is None else self.save_trace)
        capture.call_index = _next_call_index(name)  # counted sampled or not: the same on every rank
        self._stack().append(capture)
        if self.ranks is not None and not _ranks.selected(self.ranks):
            return capture._skipped(_not_selected_reason(self.ranks))
        if not self.policy.should_profile():
            return capture.unsampled()
        return capture.begin()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        capture = self._stack().pop()
        capture.end(exc)
        return False

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    def _stack(self) -> list["_Capture"]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # -- decorator -----------------------------------------------------------------------
    def _decider(self, policy: SamplingPolicy, name: str) -> Callable[[], bool]:
        """Whether the next call of the function named ``name`` is profiled (per call)."""
        attend = lambda: _arming.attend(name)  # noqa: E731 - asked only while something is armed
        # With a trigger, calls without sampling options are not all profiled: the trigger chooses.
        profile_all = self.trigger is None
        if self.ranks is None:
            return policy.decider(enabled=lambda: _config._settings.enabled, attend=attend, profile_all=profile_all)
        chosen = self.ranks
        return policy.decider(
            enabled=lambda: _config._settings.enabled and _ranks.selected(chosen), attend=attend, profile_all=profile_all
        )

    def __call__(self, func: F) -> F:
        target = func.__func__ if isinstance(func, (classmethod, staticmethod)) else func
        if not callable(target):
            raise ConfigurationError(f"profile_neuron(...) decorates functions and methods, not {type(func).__name__}")
        name = self.name or getattr(target, "__qualname__", None) or getattr(target, "__name__", "profile")
        save = False if self.save_trace is None else self.save_trace
        this = self
        if _config.disabled_by_environment():
            return func  # NEURONSCOPE_DISABLED=1: not even a wrapper
        _env.check()  # decorating is the user's call: a malformed NEURONSCOPE_* fails here, not per call
        policy = SamplingPolicy(**self._sampling)  # each decorated function samples on its own
        _arming.register(name, policy)
        decide = self._decider(policy, name)

        def start(capture: _Capture, stash: Any = None) -> Run:
            capture.first_call = policy.is_first_profiled_call
            # The policy counts every call: the n-th call of this function is call n on every rank.
            capture.call_index = count_value(policy.calls) - 1
            if stash is None:
                stash = _arming.take_stash()
            if stash:  # armed by ns.arm() / `neuronscope arm` (False: checked at call time, not armed)
                capture.trigger = _arming.trigger_for(*stash)
            run = capture.begin()
            if stash:
                stash[0]._attach(run)
            return run

        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            return self._wrap_generator(func, target, name, save, decide, start)

        if self.trigger is not None:
            from .triggers import wrap_with_trigger

            return wrap_with_trigger(
                self, func, target, name, save, policy, decide, start, lambda: _Capture(this, name, save_trace=save)
            )

        if inspect.iscoroutinefunction(target):

            async def profiled(wrapped: Any, args: Any, kwargs: Any, stash: Any) -> Any:
                capture = _Capture(this, name, save_trace=save)
                start(capture, stash)
                try:
                    result = await wrapped(*args, **kwargs)
                except BaseException as exc:
                    capture.end(exc)
                    raise
                capture.end(None)
                return result

            @wrapt.decorator(enabled=decide)
            def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                # The arming decision is taken now, not when the coroutine first runs: other
                # calls may be decided in between (asyncio.gather).
                return profiled(wrapped, args, kwargs, _arming.take_stash() or False)

            return async_wrapper(func)

        @wrapt.decorator(enabled=decide)
        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            capture = _Capture(this, name, save_trace=save)
            start(capture)
            try:
                result = wrapped(*args, **kwargs)
            except BaseException as exc:
                capture.end(exc)
                raise
            capture.end(None)
            return result

        return wrapper(func)

    def _wrap_generator(self, func: Any, target: Any, name: str, save: bool, decide: Any, start: Any) -> Any:
        """A generator (streaming responses) is profiled over its whole iteration: from its first
        ``next()`` to its last (or to ``close()`` when the consumer stops early), not around the
        creation of the generator object, which runs none of its body. Consume it on one thread:
        the profiler session belongs to the thread that started it."""
        this = self
        if self.trigger is not None:
            raise ConfigurationError(
                f"profile_neuron(trigger=...) on the generator {name!r}: triggers time calls, and a generator's call "
                "returns at once; profile it with sampling options (every=, sample=) instead"
            )

        def finish(capture: _Capture, exc: BaseException | None) -> None:
            # the consumer stopping early (close(), a client that disconnects) ends the profile normally
            capture.end(None if isinstance(exc, (GeneratorExit, StopIteration, StopAsyncIteration)) else exc)

        if inspect.isasyncgenfunction(target):

            async def profiled_agen(wrapped: Any, args: Any, kwargs: Any, stash: Any) -> Any:
                capture = _Capture(this, name, save_trace=save)
                start(capture, stash)
                try:
                    async for item in wrapped(*args, **kwargs):
                        yield item
                except BaseException as exc:
                    finish(capture, exc)
                    raise
                finish(capture, None)

            @wrapt.decorator(enabled=decide)
            def agen_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                return profiled_agen(wrapped, args, kwargs, _arming.take_stash() or False)

            return agen_wrapper(func)

        def profiled_gen(wrapped: Any, args: Any, kwargs: Any, stash: Any) -> Any:
            capture = _Capture(this, name, save_trace=save)
            start(capture, stash)
            try:
                result = yield from wrapped(*args, **kwargs)
            except BaseException as exc:
                finish(capture, exc)
                raise
            finish(capture, None)
            return result

        @wrapt.decorator(enabled=decide)
        def gen_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return profiled_gen(wrapped, args, kwargs, _arming.take_stash() or False)

        return gen_wrapper(func)

    def __repr__(self) -> str:
        return f"<neuronscope.profile_neuron name={self.name!r} device={self.device!r}>"


class _Capture:
    """One attempt to profile one call. Never raises after construction."""

    _serials = itertools.count(1)

    def __init__(self, spec: ProfileNeuron, name: str, *, save_trace: bool) -> None:
        self.spec = spec
        self.name = name
        self.save_trace = save_trace
        self.serial = next(_Capture._serials)
        self.all_threads = spec.all_threads
        self.schedule = spec.schedule  # session.Client: what the shared session needs to know
        self.run: Run | None = None
        self.segments: list[Any] = []  # session.Segment, appended by the session
        self._open = False
        self._region: Any = None
        self._backend: DeviceBackend | None = None
        self._run_dir: Path | None = None
        self._raw_dir: Path | None = None
        self._prof: Any = None  # a scheduled capture's own torch profile (for step())
        self._windows = 0
        self.last_window_results: Any = None  # a scheduled capture's last window (see session.share_window)
        self._torch_ns = 0  # time inside torch's start/stop (not ours)
        self._torch_cpu_ns = 0
        self._callback_ns = 0  # time spent in _on_trace_ready (inside torch's stop/step)
        self._callback_cpu_ns = 0
        self.first_call = False  # set by the decorator for its first profiled call
        self.call_index = 0  # the n-th call of this profile name in this process (for multi-rank traces)
        self.rank_info: _ranks.RankInfo | None = None  # set at start in a distributed job
        self.trigger: Any = None  # why it is profiled on demand (arming, a SlowCalls trigger)
        self.annotate: Any = None  # the trigger's hook adding baseline and explanation to the manifest
        self.call_ns: int | None = None  # the call's wall time, when a trigger timed it (for its manifest)
        self.paused = False  # session.Client: open but not recording (past a limit, between windows)
        self.recording: Recording | None = None  # the limits' state (capture/budget.py); None with a schedule
        self._windowed: Any = None  # capture/windows.WindowedRun, for a profile in windows
        self._window_start_ns = 0
        self._native_thread = threading.get_native_id()  # the profiled thread, for its CPU contention
        self._cpu_at_start: Any = None  # _system.cpu_sample when this session or window started
        self._last_window_cpu: Any = None  # the last window's contention, measured as the capture ended
        self._limit_lock = threading.Lock()  # one limit action at a time (capture/budget.py acts from two threads)

    # -- outcomes without a profile ------------------------------------------------------------
    def unsampled(self) -> Run:
        return self._skipped("sampled out")

    def _skipped(self, reason: str) -> Run:
        self.run = Run(self.name, "none")
        self.run.skip_reason = reason
        self.run._finish(RunStatus.SKIPPED)
        return self.run

    def begin(self) -> Run:
        if not _config.is_enabled():
            return self._skipped("neuronscope is disabled (configure(enabled=False) or NEURONSCOPE_DISABLED=1)")
        outcome = session.decide(self)
        if outcome is session.JOIN or outcome is session.FOREIGN:
            return self._join_as_region(outcome)
        if outcome is session.OTHER_THREAD:
            _stats.record("skipped")
            return self._skipped(
                "another profile is recording on another thread; torch.profiler records one session at a time and "
                "only the thread that started it (profile_neuron(all_threads=True) on the outer profile lets it nest)"
            )
        if _worker.backlog.over_budget() and not self._wait_for_backlog():
            _stats.record("skipped_backpressure")
            _warn_backpressure()
            return self._skipped("backpressure: profiles waiting to be written exceed max_pending_bytes")
        try:
            return self._start()
        except Exception as exc:  # noqa: BLE001 - profiling must never break the user's call
            session.abandon(self)
            _stats.contain("starting the profiler (running unprofiled)", exc, name=self.name, exc_info=False)
            _stats.record("failed")
            if self._run_dir is not None:
                _discard_dir(self._run_dir)
            self._open = False
            self.run = Run(self.name, getattr(self._backend, "name", "unknown"))
            self.run.skip_reason = f"the profiler could not start: {exc}"
            self.run._finish(RunStatus.FAILED)
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
        self.run = Run(self.name, getattr(outer_run, "device", "unknown"))
        if outcome is session.JOIN and outer_run is not None:
            self.run.parent = outer_run
            self.run.status = RunStatus.JOINED
            _stats.record("joined")
        else:
            self.run.skip_reason = "another torch.profiler (not neuronscope's) is running: recorded as a region of it"
            self.run._finish(RunStatus.SKIPPED)
            _stats.record("skipped")
        return self.run

    def _start(self) -> Run:
        _signals.install()  # SIGTERM ends this profile cleanly (once, from the main thread)
        t_begin, c_begin = time.perf_counter_ns(), time.thread_time_ns()
        spec = self.spec
        backend = select_backend(spec.device, neuron=spec.neuron)
        self._backend = backend
        self.rank_info = _ranks.current()
        facts = CaptureFacts(otel_parent=capture_parent_context(), trigger=self.trigger)
        self.run = Run(self.name, backend.name, schedule_handle=self if spec.schedule else None, capture=facts)
        self.run.start_ns = time.time_ns()
        if backend.needs_run_dir_at_start:
            # The device writes its raw files during the profile: the directory must exist now.
            self._run_dir = _make_run_dir(spec, self.name, self.run.start_ns, self.rank_info, status="recording")
            if self._run_dir is not None:
                self._raw_dir = self._run_dir / backend.name
                self._raw_dir.mkdir(mode=0o700, exist_ok=True)
        # Elsewhere the run directory is made by the output worker: mkdir and retention scans
        # are syscalls, and each can cost the caller a GIL hand-over (~5 ms) while a worker computes.
        if spec.memory:
            self.run.capture = replace(facts, device_start=backend.memory_start(spec.memory))
        session.enter(self)
        self._open = True
        session.mark_capture(self)
        self.run.start_ns = time.time_ns()
        self._cpu_at_start = _system.cpu_sample(self._native_thread)
        if spec.schedule is None:
            self._watch_limits(backend)
        # What neuronscope itself costs the caller, torch.profiler's own start/stop excluded:
        # wall time (includes waiting for the GIL) and this thread's CPU time (does not).
        self.run.caller_overhead_ns = time.perf_counter_ns() - t_begin - self._torch_ns
        self.run.caller_overhead_cpu_ns = time.thread_time_ns() - c_begin - self._torch_cpu_ns
        return self.run

    def _watch_limits(self, backend: DeviceBackend) -> None:
        """Record under the profile's limits (and in windows, if asked): capture/budget.py."""
        spec = self.spec
        self.recording = Recording(self, spec.limits, spec.windows)
        self._window_start_ns = self.run.start_ns if self.run is not None else time.time_ns()
        if spec.windows is not None:
            from .windows import WindowedRun

            name, start_ns, info = self.name, self._window_start_ns, self.rank_info
            make = None if self._run_dir is not None else (lambda: _make_run_dir(spec, name, start_ns, info, status="recording"))
            self._windowed = WindowedRun(name, backend.name, spec.windows, self.recording, self._run_dir, make)
        _budget.watch(self)

    def limit_action(self, action: str) -> None:
        """A limit or window boundary was reached (on a thread allowed to stop the session):
        "resume" starts the next window; anything else stops recording (a window's end, or for good)."""
        rec = self.recording
        if rec is None or not self._open:
            return
        with self._limit_lock:  # the watchdog and the stepping thread may both act at a boundary
            self._limit_action(rec, action)

    def _limit_action(self, rec: Recording, action: str) -> None:
        # on the capture's own thread, a window is delimited by the capture's markers as a whole
        # profile is (the diagnosis' window then holds its last step and the idle after it)
        own_thread = threading.get_ident() == rec.thread
        if action == "resume":
            if rec.recording:
                return  # resumed already (by the other thread): a second start would skip a window's number
            if rec.in_flight == 0 and session.resume(self):
                rec.session_started_now(time.monotonic_ns())
                self._window_start_ns = time.time_ns()
                self._cpu_at_start = _system.cpu_sample(self._native_thread)
                if own_thread:
                    session.mark_capture(self)
            return
        if not rec.recording:
            return  # stopped already (by the other thread)
        if own_thread and self._windowed is not None:
            session.mark_capture(self, end=True)
        now, wall = time.monotonic_ns(), time.time_ns()
        steps = rec.window_steps
        cpu = _system.cpu_contention(self._cpu_at_start, _system.cpu_sample(self._native_thread))
        taken = session.cut(self, take=self._windowed is not None)
        if taken is None:
            return
        rec.overhead.add(time.monotonic_ns() - now)  # torch's stop: synchronous, and it holds the GIL
        ended_by = rec.window_reason if action == "window" else action
        rec.session_ended(now, action)
        if self._windowed is not None:
            self._windowed.submit(
                rec.window_index, taken, ended_by, self._options(None), self._window_start_ns, wall, steps, cpu=cpu
            )
        elif self.run is not None:  # a profile that stopped at a limit: its recorded time
            self.run.capture = replace(self.run.capture, cpu_contention=cpu)
        if rec.stopped is not None and self.run is not None:
            log.info(
                "neuronscope: %r stopped recording at %s; the code runs on unprofiled", self.name, _budget.STOP_WORDS[action]
            )

    def start_session(self, all_threads: bool) -> Any:
        """Start a torch profiler with this capture's options (called by the session, also to resume)."""
        backend = self._backend
        assert backend is not None
        kwargs: dict[str, Any] = dict(self.spec.torch_options)
        config = backend.experimental_config(self._raw_dir, all_threads=all_threads)
        if config is not None:
            kwargs["experimental_config"] = config
        scheduled = self.spec.schedule is not None
        prof = torch.profiler.profile(
            activities=backend.activities(),
            schedule=self.spec.schedule,
            on_trace_ready=self._on_trace_ready if scheduled else None,
            **kwargs,
        )
        usdt.install()  # drops Kineto's USDT start/stop lines from stderr (capture/usdt.py)
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        prof.start()
        self._torch_ns += time.perf_counter_ns() - t0
        self._torch_cpu_ns += time.thread_time_ns() - c0
        if scheduled:
            self._prof = prof
        return prof

    def on_segment(self, prof: Any, seg: Any) -> None:
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

    def end(self, exc: BaseException | None) -> None:
        if self._region is not None:
            try:
                self._region.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                log.debug("neuronscope: leaving nested region failed", exc_info=True)
            return  # a JOINED run completes with the enclosing run
        if not self._open or self.run is None:
            return
        self._open = False
        run = self.run
        t_end, c_end = time.perf_counter_ns(), time.thread_time_ns()
        run.end_ns = time.time_ns()
        if isinstance(exc, Terminated):
            # the process was asked to stop: the profile covers until then, the code did not fail
            run.warn("stopped by SIGTERM: the profile covers the time until the process was asked to stop")
        elif exc is not None:
            run.error = type(exc).__name__
            run.error_message = str(exc)[:1024]
        session.mark_capture(self, end=True)
        self._measure_cpu_at_end(run)
        if self.recording is not None:
            _budget.unwatch(self)
        backend = self._backend
        t_stop, c_stop = time.perf_counter_ns(), time.thread_time_ns()
        try:
            segments = session.leave(self, before_stop=backend.synchronize if backend is not None else None)
        except Exception as exc_stop:  # noqa: BLE001
            _stats.contain("stopping the profiler", exc_stop, name=self.name, exc_info=False)
            segments = list(self.segments)
        if self.spec.memory and backend is not None:  # ... and at the end (leave() synchronized the device)
            try:
                run.capture = replace(run.capture, device_end=backend.memory_end(self.spec.memory))
            except Exception as exc:  # noqa: BLE001 - the run is kept without the device's totals
                _stats.contain("reading device memory at the end", exc, name=self.name, exc_info=False)
        # leave() = torch's stop (+ a restart for an outer capture) + the device exporter:
        # the exporter is ours, the rest torch's.
        torch_ns = time.perf_counter_ns() - t_stop - self._callback_ns
        torch_cpu_ns = time.thread_time_ns() - c_stop - self._callback_cpu_ns
        self._prof = None
        if self.spec.schedule is not None:
            release_segments(segments)  # a scheduled capture submitted each window on its own
            if not run.done:
                run._finish(RunStatus.COMPLETE if run.windows else RunStatus.SKIPPED)
            return
        if self._windowed is not None and (
            self.recording is None or self.recording.window_index > 1 or not self.recording.recording
        ):
            self._end_windows(run, segments)
        elif not segments:  # (a profile in windows that ended in its first is an ordinary run)
            _stats.record("failed")
            run._finish(RunStatus.FAILED)
            return
        else:
            set_last_run(run)
            self._submit(run, segments, self._run_dir, window=None)
        spent = time.perf_counter_ns() - t_end
        spent_cpu = time.thread_time_ns() - c_end
        run.caller_overhead_ns += spent - torch_ns
        run.caller_overhead_cpu_ns += spent_cpu - torch_cpu_ns

    def _measure_cpu_at_end(self, run: Run) -> None:
        """Whether the thread had a CPU since the session (or the last window) started."""
        if self.recording is not None and not self.recording.recording:
            return  # stopped at a limit, or between windows: measured when it stopped
        cpu = _system.cpu_contention(self._cpu_at_start, _system.cpu_sample(self._native_thread))
        if self._windowed is not None:
            self._last_window_cpu = cpu
        else:
            run.capture = replace(run.capture, cpu_contention=cpu)

    def _coverage(self, run: Run) -> Coverage | None:
        """What a profile that stopped at a limit covers (events are counted by the analysis)."""
        rec = self.recording
        if rec is None or rec.stopped is None:
            return None
        return Coverage(
            wall_ns=max(run.end_ns - run.start_ns, 0),
            recorded_ns=rec.recorded_ns,
            events=0,
            stopped=rec.stopped,
            max_events=rec.max_events,
            budget_source=rec.budget_source,
            steps=rec.steps.count,
        )

    def _end_windows(self, run: Run, segments: list[Any]) -> None:
        """The last window, then the fold of all of them as the run (on the analysis worker)."""
        rec, windowed = self.recording, self._windowed
        assert rec is not None and windowed is not None
        was_recording = rec.recording
        rec.session_ended(time.monotonic_ns(), "end")
        taken = list(segments)
        self.segments.clear()
        if taken:
            end = run.end_ns if was_recording else self._window_start_ns
            start = self._window_start_ns
            cpu = self._last_window_cpu if was_recording else None
            windowed.submit(
                rec.window_index, taken, "end", self._options(None), start, max(end, start), rec.window_steps, cpu=cpu
            )
        set_last_run(run)
        options = self._options(None)
        where: Any = self._run_dir if self._run_dir is not None else windowed._dir
        _worker.get_worker().submit(lambda: finish_windows(run, windowed, rec.stopped, where, options))

    def _options(self, window: int | None) -> ProcessOptions:
        assert self._backend is not None
        return ProcessOptions(
            sampling=self.spec.policy.describe(),
            save_trace=self.save_trace,
            backend_info=self._backend.describe(),
            window=window,
            backend=self._backend,
            raw_dir=self._raw_dir,
            first_call=self.first_call,
            serial=self.serial,
            only_own_thread=not self.all_threads,
            extra_manifest=self._rank_manifest(),
            annotate=self.annotate,
            memory=self.spec.memory,
            coverage=self._coverage(self.run) if self.run is not None and window is None else None,
            limits=self._device_limits(),
        )

    def _device_limits(self) -> Any:
        """The roofs a profile with shapes is measured against: configured, else the device's own
        (a CPU's are measured here once per host, 1-3 s, while no profile records; then cached)."""
        if not self.spec.torch_options["record_shapes"]:
            return None
        configured = _config.current().device_limits
        if configured is not None:
            return configured
        assert self._backend is not None
        try:
            return self._backend.device_limits()
        except Exception as exc:  # noqa: BLE001 - no roofs is a missing column, never a failed run
            _stats.contain("device limits", exc, name=self.name, warnings=self.run.warn if self.run else None, exc_info=False)
            return None

    def _rank_manifest(self) -> dict[str, Any]:
        info = self.rank_info
        if info is None:
            return {}  # a single-process run: the manifest is as it always was
        facts = info.manifest()
        facts["distributed"]["call_index"] = self.call_index
        facts["distributed"]["profiled_ranks"] = sorted(self.spec.ranks) if self.spec.ranks is not None else "all"
        return facts

    def _submit(self, run: Run, segments: list[Any], run_dir: Path | None, window: int | None) -> None:
        spec, name, start_ns, info = self.spec, self.name, run.start_ns, self.rank_info
        where: Any = run_dir if run_dir is not None else (lambda: _make_run_dir(spec, name, start_ns, info))
        submit(run, segments, where, self._options(window))

    def _on_trace_ready(self, prof: Any) -> None:
        """torch.profiler calls this when a scheduled profile's active window is ready."""
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            run = self.run
            assert run is not None and self._backend is not None
            # Each active window becomes its own Run with its own directory.
            window = Run(self.name, run.device, capture=run.capture)
            window.start_ns = run.start_ns
            window.end_ns = time.time_ns()
            run_dir = self._run_dir if self._windows == 0 else None
            self._windows += 1
            run.windows.append(window)
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
            seg._refs = 1
            _worker.backlog.add(id(seg), _worker.backlog.estimate(seg.stop_ns - seg.start_ns, name=self.name))
            session.share_window(self, seg)  # the profiles this one runs inside hold every window too
            set_last_run(window)
            self._submit(window, [seg], run_dir, window=self._windows)
        except Exception as exc:  # noqa: BLE001
            _stats.contain("handling the finished trace", exc, name=self.name, exc_info=False)
        finally:
            self._callback_ns += time.perf_counter_ns() - t0
            self._callback_cpu_ns += time.thread_time_ns() - c0


def _windows_option(windows: Any, schedule: Any) -> Windows | None:
    if isinstance(windows, int) and not isinstance(windows, bool):
        windows = Windows(steps=windows)
    if windows is not None and not isinstance(windows, Windows):
        raise ConfigurationError(
            f"profile_neuron(windows={windows!r}): pass neuronscope.Windows(steps=N, seconds=T, keep=K) or a step count"
        )
    if windows is not None and schedule is not None:
        raise ConfigurationError("profile_neuron(windows=..., schedule=...): use one; windows replace a schedule on long runs")
    return windows


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


#: the longest a profile without sampling options waits for the backlog before it is skipped
#: (only a stalled write -- a hung disk or sink -- takes that long: 400,000 events drain in ~2 s)
BACKLOG_WAIT_LIMIT_S = 120.0
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


def _discard_dir(path: Path) -> None:
    import shutil

    from ..sinks.rundir import mark_complete

    shutil.rmtree(path, ignore_errors=True)
    mark_complete(path)


_warned_dirs: set[str] = set()


def _make_run_dir(
    spec: ProfileNeuron, name: str, start_ns: int, rank: "_ranks.RankInfo | None" = None, status: str = "processing"
) -> Path | None:
    """Create the run directory (its manifest saying ``status``); on failure warn once per
    output dir and carry on in memory."""
    from ..sinks.rundir import create_run_dir

    settings = _config.current()
    output_dir = settings.resolved_output_dir(spec.output_dir)
    if rank is not None:  # <output_dir>/<job id>/rank<N>/: ranks never share a directory
        output_dir = output_dir / rank.job_dir / f"rank{rank.rank}"
    max_runs, max_bytes = settings.retention()  # a malformed NEURONSCOPE_MAX_*: warned once, default used
    try:
        return create_run_dir(output_dir, name, start_ns, max_runs=max_runs, max_bytes=max_bytes, status=status)
    except OSError as exc:
        key = str(output_dir)
        if key not in _warned_dirs:
            _warned_dirs.add(key)
            message = (
                f"neuronscope: cannot write run directories under {output_dir} ({exc.strerror or exc}); "
                "summaries stay in memory (run.summary). Set output_dir= or NEURONSCOPE_OUTPUT_DIR to a writable path."
            )
            # once, as a RuntimeWarning (filterable); no logging line too. It is raised on the
            # output worker, so no frame of the user's is there to point at: one plain line.
            warnings.warn_explicit(message, RuntimeWarning, "neuronscope", 0, module="neuronscope")
        return None


_call_counters: dict[str, Any] = {}


def _next_call_index(name: str) -> int:
    """0, 1, 2... per profile name: ``with profile_neuron(name=...)`` blocks counted in this process."""
    counter = _call_counters.get(name)
    if counter is None:
        counter = _call_counters.setdefault(name, itertools.count())
    return next(counter)


def _not_selected_reason(chosen: frozenset[int]) -> str:
    info = _ranks.current()
    me = f"rank {info.rank}" if info is not None else "this single process (rank 0)"
    return f"{me} is not in profile_neuron(ranks={sorted(chosen)})"


_site_policies: dict[tuple, SamplingPolicy] = {}
_site_lock = threading.Lock()


def _policy_for_site(sampling: dict[str, Any], site: tuple[str, int] | None) -> SamplingPolicy:
    """The ``with`` form's policy. ``with profile_neuron(every=100):`` written inside a loop makes
    a new object each time; keyed by its source line, its calls are still counted together."""
    trivial = all(v is None for k, v in sampling.items() if k != "warmup") and not sampling["warmup"]
    if site is None or trivial:
        return SamplingPolicy(**sampling)
    key = (site, tuple(sorted((k, id(v) if callable(v) else v) for k, v in sampling.items())))
    with _site_lock:
        policy = _site_policies.get(key)
        if policy is None:
            if len(_site_policies) > 1024:  # generated code: do not grow without bound
                _site_policies.clear()
            policy = _site_policies[key] = SamplingPolicy(**sampling)
        return policy


class _ProfileNeuronFactory:
    """Profile the wrapped code with torch.profiler on the detected device.

        with neuronscope.profile_neuron() as run:      # run.summary, run.path after the block
            model(x)

        @neuronscope.profile_neuron                      # bare decorator
        @neuronscope.profile_neuron(name="infer", output_dir="runs/")   # with options

    Options: ``name``, ``device`` ("auto" | "neuron" | "cuda" | "cpu"), ``output_dir``,
    ``save_trace`` (default: on for ``with``, off for decorators), ``schedule``
    (``torch.profiler.schedule``; advance with ``run.step()``), ``record_shapes``,
    ``profile_memory``, ``with_stack``, ``with_flops``, ``neuron`` (:class:`NeuronOptions`),
    ``all_threads`` (record every thread, not only the calling one; profiles begun on other
    threads then nest into this one — ``neuronscope run`` uses it),
    ``ranks`` (in a torchrun job: ``"all"``, the default, or the ranks that profile, e.g.
    ``[0]``; run directories go to ``<output_dir>/<job id>/rank<N>/``),
    and sampling (decided on each rank by itself): ``sample`` (probability), ``every`` (every Nth call), ``max_per_minute``,
    ``warmup`` (skip the first N calls), ``seed`` or ``sampler`` (a callable deciding a call).
    Long runs (docs/long-runs.md): ``max_events`` (the event budget past which recording
    stops; default sized from the memory available, 0: none), ``max_seconds``, ``max_steps``
    (stop recording after that long / that many steps), ``windows`` (:class:`Windows`, or a
    step count: profile in windows folded into one run, in bounded memory); ``run.coverage``
    says what was recorded.
    Invalid values raise :class:`ConfigurationError` here, not on the first call.
    """

    def __call__(self, func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        if func is None:
            caller = sys._getframe(1)
            return ProfileNeuron(**options, _policy_site=(caller.f_code.co_filename, caller.f_lineno))
        if isinstance(func, str):
            raise ConfigurationError(f"profile_neuron({func!r}): pass the name as a keyword: profile_neuron(name={func!r})")
        if not (callable(func) or isinstance(func, (classmethod, staticmethod))):
            raise ConfigurationError(f"profile_neuron() takes a function to decorate or keyword options, not {func!r}")
        return ProfileNeuron(**options)(func)

    def __enter__(self) -> None:
        raise ConfigurationError("use `with neuronscope.profile_neuron():` — with brackets")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None

    def __repr__(self) -> str:
        return "<function neuronscope.profile_neuron>"


profile_neuron = _ProfileNeuronFactory()
profile_neuron.__doc__ = _ProfileNeuronFactory.__doc__
