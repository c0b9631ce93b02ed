"""``profile_neuron`` and ``region``: one object that is both decorator and context manager.

The calling thread only starts and stops torch.profiler (plus the device synchronize);
reading the Kineto results, the summary, the run directory and the sinks run on the
background worker (:mod:`neuronscope._worker`).

PyTorch allows one profiler per process. A profile entered while ours is active on the
same thread joins it as a ``record_function`` region; on another thread it runs unprofiled
and is counted as skipped. Nothing here raises into user code once the profile has been
validated at creation time.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import wrapt

from .. import _config, _stats
from .. import api as _api  # noqa: F401 - registers the OpenTelemetry sink and the flush at exit
from .._run import Run, RunStatus
from .._worker import get_worker
from ..errors import ConfigurationError
from . import _registry
from .devices import DeviceBackend, select_backend, validate_device
from .devices.neuron import NeuronBackend, NeuronOptions, refuse_env_capture
from .sampling import SamplingPolicy
from ..sinks.otel import capture_parent_context
from .processing import ProcessOptions, process_capture

__all__ = ["ProfileNeuron", "profile_neuron"]

log = logging.getLogger("neuronscope")
F = TypeVar("F", bound=Callable[..., Any])


class ProfileNeuron:
    """A configured profile: use as ``with`` (yields a :class:`Run`) or as a decorator.

    Create it with :func:`profile_neuron`; arguments are validated here, so a mistake fails
    at decoration time, not on the first request.
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
        _policy_site: tuple[str, int] | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"profile_neuron(name={name!r}): name must be a non-empty string")
        self.device = validate_device(device)
        if self.device != "auto":
            select_backend(self.device)  # an explicitly requested device that is absent fails here
        if self.device == "neuron":
            refuse_env_capture()
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
        ):
            if not isinstance(value, bool):
                raise ConfigurationError(f"profile_neuron({flag}={value!r}): use True or False")
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
        self._local = threading.local()  # per-thread stack of active captures of this object

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> Run:
        capture = _Capture(self, self.name or "profile", save_trace=True if self.save_trace is None else self.save_trace)
        self._stack().append(capture)
        if not self.policy.should_profile():
            return capture.unsampled()
        return capture.begin()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        capture = self._stack().pop()
        capture.end(exc, inline_if_busy=True)
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
    def __call__(self, func: F) -> F:
        target = func.__func__ if isinstance(func, (classmethod, staticmethod)) else func
        if not callable(target):
            raise TypeError(f"profile_neuron(...) decorates functions and methods, not {type(func).__name__}")
        name = self.name or getattr(target, "__qualname__", None) or getattr(target, "__name__", "profile")
        save = False if self.save_trace is None else self.save_trace
        this = self
        if _config.disabled_by_environment():
            return func  # NEURONSCOPE_DISABLED=1: not even a wrapper
        policy = SamplingPolicy(**self._sampling)  # each decorated function samples on its own
        # wrapt evaluates `enabled` per call and skips the wrapper entirely when it says no.
        decide = policy.decider(enabled=lambda: _config._settings.enabled)

        def start(capture: _Capture) -> None:
            capture.first_call = policy.is_first_profiled_call
            capture.begin()

        if inspect.iscoroutinefunction(target):

            @wrapt.decorator(enabled=decide)
            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                capture = _Capture(this, name, save_trace=save)
                start(capture)
                try:
                    result = await wrapped(*args, **kwargs)
                except BaseException as exc:
                    capture.end(exc)
                    raise
                capture.end(None)
                return result

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

    def __repr__(self) -> str:
        return f"<neuronscope.profile_neuron name={self.name!r} device={self.device!r}>"


class _Capture:
    """One attempt to profile one call. Never raises after construction."""

    def __init__(self, spec: ProfileNeuron, name: str, *, save_trace: bool) -> None:
        self.spec = spec
        self.name = name
        self.save_trace = save_trace
        self.run: Run | None = None
        self._prof: Any = None
        self._region: Any = None
        self._backend: DeviceBackend | None = None
        self._run_dir: Path | None = None
        self._windows = 0
        self._callback_ns = 0  # time spent in _on_trace_ready (inside torch's stop/step)
        self._callback_cpu_ns = 0
        self._inline_if_busy = False  # the `with` form processes inline rather than drop
        self._raw_dir: Path | None = None
        self.first_call = False  # set by the decorator for its first profiled call

    def unsampled(self) -> Run:
        self.run = Run(self.name, "none")
        self.run._finish(RunStatus.SKIPPED)
        return self.run

    def begin(self) -> Run:
        if not _config.is_enabled():
            self.run = Run(self.name, "none")
            self.run._finish(RunStatus.SKIPPED)
            return self.run
        outer = _registry.try_acquire(self)
        if outer is not _registry.ACQUIRED:
            return self._run_unprofiled(outer)
        try:
            return self._start()
        except Exception as exc:  # noqa: BLE001 - profiling must never break the user's call
            _registry.release(self)
            _stats.record("errors")
            log.warning("neuronscope: could not start profiling %r (%s); running unprofiled", self.name, exc)
            if self._run_dir is not None:
                _discard_dir(self._run_dir)
            self._prof = None
            self.run = Run(self.name, getattr(self._backend, "name", "unknown"))
            self.run._finish(RunStatus.FAILED)
            return self.run

    def _run_unprofiled(self, outer: Any) -> Run:
        if outer is _registry.SAME_THREAD or outer is _registry.FOREIGN:
            # Nested inside a running profile: show up in it as a region.
            self._region = torch.profiler.record_function(self.name)
            self._region.__enter__()
            self.run = Run(self.name, getattr(outer, "device", "unknown"))
            if outer is _registry.SAME_THREAD and _registry.active_run() is not None:
                self.run.parent = _registry.active_run()
                self.run.device = self.run.parent.device
                self.run.status = RunStatus.JOINED
                _stats.record("joined")
            else:
                self.run._finish(RunStatus.SKIPPED)
                _stats.record("skipped")
        else:
            self.run = Run(self.name, "unknown")
            self.run._finish(RunStatus.SKIPPED)
            _stats.record("skipped")
        return self.run

    def _start(self) -> Run:
        t_begin, c_begin = time.perf_counter_ns(), time.thread_time_ns()
        spec = self.spec
        backend = select_backend(spec.device)
        if isinstance(backend, NeuronBackend):
            refuse_env_capture()
            if spec.neuron is not None:
                backend = NeuronBackend(spec.neuron)
        self._backend = backend
        self.run = Run(self.name, backend.name, schedule_handle=self if spec.schedule else None)
        self.run._otel_parent = capture_parent_context()
        self.run.start_ns = time.time_ns()
        raw_dir = None
        if backend.name == "neuron":
            # The Neuron runtime writes its raw files during the profile: the directory must exist now.
            self._run_dir = _make_run_dir(spec, self.name, self.run.start_ns)
            if self._run_dir is not None:
                raw_dir = self._run_dir / "neuron"
                raw_dir.mkdir(mode=0o700, exist_ok=True)
        # Elsewhere the run directory is made by the worker: mkdir and retention scans are
        # syscalls, and each one can cost the caller a GIL hand-over (~5 ms) while the worker computes.
        self._raw_dir = raw_dir
        kwargs: dict[str, Any] = dict(spec.torch_options)
        config = backend.experimental_config(raw_dir)
        if config is not None:
            kwargs["experimental_config"] = config
        self._prof = torch.profiler.profile(
            activities=backend.activities(),
            schedule=spec.schedule,
            on_trace_ready=self._on_trace_ready,
            **kwargs,
        )
        t_torch, c_torch = time.perf_counter_ns(), time.thread_time_ns()
        self._prof.start()
        t_started, c_started = time.perf_counter_ns(), time.thread_time_ns()
        _registry.set_active_run(self.run)
        self.run.start_ns = time.time_ns()
        # What neuronscope itself costs the caller, torch.profiler's own start/stop excluded:
        # wall time (includes waiting for the GIL) and this thread's CPU time (does not).
        self.run.caller_overhead_ns = (t_torch - t_begin) + (time.perf_counter_ns() - t_started)
        self.run.caller_overhead_cpu_ns = (c_torch - c_begin) + (time.thread_time_ns() - c_started)
        return self.run

    def step(self) -> None:
        if self._prof is not None:
            self._prof.step()

    def end(self, exc: BaseException | None, *, inline_if_busy: bool = False) -> None:
        if self._region is not None:
            try:
                self._region.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                log.debug("neuronscope: leaving nested region failed", exc_info=True)
            return  # a JOINED run completes with the enclosing run
        if self._prof is None or self.run is None:
            return
        run = self.run
        t_end, c_end = time.perf_counter_ns(), time.thread_time_ns()
        run.end_ns = time.time_ns()
        if exc is not None:
            run.error = type(exc).__name__
            run.error_message = str(exc)[:1024]
        self._inline_if_busy = inline_if_busy
        t_torch, c_torch = time.perf_counter_ns(), time.thread_time_ns()
        try:
            try:
                self._backend.synchronize()  # type: ignore[union-attr]
            finally:
                self._prof.stop()
                # on_trace_ready ran inside stop(): that part is ours, the rest is torch's.
                run.caller_overhead_ns += (t_torch - t_end) + self._callback_ns
                run.caller_overhead_cpu_ns += (c_torch - c_end) + self._callback_cpu_ns
        except Exception as exc:  # noqa: BLE001
            _stats.record("errors")
            log.warning("neuronscope: stopping the profiler for %r failed: %s", self.name, exc)
            if not run.done and not run.windows:
                run._finish(RunStatus.FAILED)
        finally:
            _registry.release(self)
            self._prof = None
        if self.spec.schedule is not None and not run.done:
            run._finish(RunStatus.COMPLETE if run.windows else RunStatus.SKIPPED)

    def _on_trace_ready(self, prof: Any) -> None:
        """torch.profiler calls this when a window (or the whole profile) is ready."""
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            run = self.run
            assert run is not None and self._backend is not None
            if self.spec.schedule is not None:
                # Each active window becomes its own Run with its own directory.
                window = Run(self.name, run.device)
                window.start_ns = run.start_ns
                window.end_ns = time.time_ns()
                window._otel_parent = run._otel_parent
                run_dir = self._run_dir if self._windows == 0 else None
                self._windows += 1
                run.windows.append(window)
                target = window
            else:
                target, run_dir = run, self._run_dir
                run.end_ns = run.end_ns or time.time_ns()
            try:
                self._backend.on_trace_ready(prof, self._raw_dir)
            except Exception as exc:  # noqa: BLE001
                target.warnings.append(f"device exporter failed: {exc!r}")
                log.warning("neuronscope: %s exporter failed: %s", self._backend.name, exc)
            options = ProcessOptions(
                sampling=self.spec.policy.describe(),
                save_trace=self.save_trace,
                backend_info=self._backend.describe(),
                window=self._windows if self.spec.schedule is not None else None,
                backend=self._backend,
                raw_dir=self._raw_dir,
                first_call=self.first_call,
            )
            results = prof.profiler.kineto_results
            spec, name, start_ns = self.spec, self.name, target.start_ns
            where = run_dir if run_dir is not None else (lambda: _make_run_dir(spec, name, start_ns))
            _submit(target, results, where, options, inline_if_busy=self._inline_if_busy)
        except Exception as exc:  # noqa: BLE001
            _stats.record("errors")
            log.warning("neuronscope: handling the finished trace of %r failed: %s", self.name, exc)
        finally:
            self._callback_ns += time.perf_counter_ns() - t0
            self._callback_cpu_ns += time.thread_time_ns() - c0


def _submit(
    run: Run,
    results: Any,
    run_dir: Path | Callable[[], Path | None],
    options: ProcessOptions,
    *,
    inline_if_busy: bool,
) -> None:
    """Hand a stopped capture to the worker. ``run_dir`` may be a callable that makes it there."""

    def task() -> None:
        where: Path | None
        try:
            where = run_dir() if callable(run_dir) else run_dir
        except Exception as exc:  # noqa: BLE001 - no directory, but the run still completes in memory
            _stats.record("errors")
            log.warning("neuronscope: could not create the run directory of %r: %s", run.name, exc)
            where = None
        process_capture(run, results, where, options)

    if get_worker().submit(task):
        return
    if inline_if_busy:
        task()
        return
    _stats.record("dropped")
    log.warning("neuronscope: background worker full; dropped the profile of %r", run.name)
    if isinstance(run_dir, Path):
        _discard_dir(run_dir)
    run._finish(RunStatus.DROPPED)


def _discard_dir(path: Path) -> None:
    import shutil

    from ..sinks.rundir import mark_complete

    shutil.rmtree(path, ignore_errors=True)
    mark_complete(path)


_warned_dirs: set[str] = set()


def _make_run_dir(spec: ProfileNeuron, name: str, start_ns: int) -> Path | None:
    """Create the run directory; on failure warn once per output dir and carry on in memory."""
    from ..sinks.rundir import create_run_dir

    settings = _config.current()
    output_dir = settings.resolved_output_dir(spec.output_dir)
    try:
        max_runs, max_bytes = settings.retention()
    except ConfigurationError as exc:  # a bad NEURONSCOPE_MAX_* must not cost the run
        if "retention" not in _warned_dirs:
            _warned_dirs.add("retention")
            log.warning("neuronscope: %s; keeping every run directory", exc)
        max_runs = max_bytes = None
    try:
        return create_run_dir(output_dir, name, start_ns, max_runs=max_runs, max_bytes=max_bytes)
    except OSError as exc:
        key = str(output_dir)
        if key not in _warned_dirs:
            _warned_dirs.add(key)
            message = (
                f"neuronscope: cannot write run directories under {output_dir} ({exc.strerror or exc}); "
                "summaries stay in memory (run.summary). Set output_dir= or NEURONSCOPE_OUTPUT_DIR to a writable path."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=4)
            log.warning(message)
        return None


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
    and sampling: ``sample`` (probability), ``every`` (every Nth call), ``max_per_minute``,
    ``warmup`` (skip the first N calls), ``seed`` or ``sampler`` (a callable deciding a call).
    Invalid values raise :class:`ConfigurationError` here, not on the first call.
    """

    def __call__(self, func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        if func is None:
            caller = sys._getframe(1)
            return ProfileNeuron(**options, _policy_site=(caller.f_code.co_filename, caller.f_lineno))
        if isinstance(func, str):
            raise TypeError(f"profile_neuron({func!r}): pass the name as a keyword: profile_neuron(name={func!r})")
        if not (callable(func) or isinstance(func, (classmethod, staticmethod))):
            raise TypeError(f"profile_neuron() takes a function to decorate or keyword options, not {func!r}")
        return ProfileNeuron(**options)(func)

    def __enter__(self) -> None:
        raise TypeError("use `with neuronscope.profile_neuron():` — with brackets")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None

    def __repr__(self) -> str:
        return "<function neuronscope.profile_neuron>"


profile_neuron = _ProfileNeuronFactory()
profile_neuron.__doc__ = _ProfileNeuronFactory.__doc__
