"""``profile_neuron``: one object that is both decorator and context manager.

This module validates a profile's options (a mistake fails when the profile is made) and wraps:
``with`` makes one :class:`~.lifecycle.Capture` per block, a decorated function one per profiled
call (capture/wrappers.py; capture/timed.py with ``trigger=``). The capture's lifecycle --
start, limits and windows, stop -- is capture/lifecycle.py's.

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
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast

from .. import _config, _env, _ranks
from .._run import Run
from ..errors import ConfigurationError
from . import arming as _arming
from . import control as _control
from . import wiring as _wiring  # noqa: F401 - the OpenTelemetry sink and the flush at exit, once
from .budget import Limits, Windows
from .devices import select_backend, validate_device
from .devices.neuron import NeuronOptions
from .lifecycle import Capture
from .sampling import SamplingPolicy
from .wrappers import CallProfiler, decider, wrap

_arming.first_call_hooks.append(_control.ensure_started)  # the channel opens at the first decorated call

__all__ = ["ProfileNeuron", "profile_neuron"]

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
        self._sampling: dict[str, Any] = dict(
            sample=sample, every=every, max_per_minute=max_per_minute, warmup=warmup, seed=seed, sampler=sampler
        )
        self.policy = _policy_for_site(self._sampling, _policy_site)
        flags = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
        _check_options(output_dir, save_trace, schedule, neuron, {**flags, "with_flops": with_flops, "all_threads": all_threads})
        if memory not in (True, False, "history"):
            raise ConfigurationError(f'profile_neuron(memory={memory!r}): use True, False or "history" (CUDA allocator history)')
        #: the memory stage: None (off), "on", or "history"; profile_memory=True implies "on"
        self.memory: str | None = "history" if memory == "history" else ("on" if (memory or profile_memory) else None)
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
        capture = Capture(self, name, save_trace=True if self.save_trace is None else self.save_trace)
        capture.call_index = _next_call_index(name)  # counted sampled or not: the same on every rank
        self._stack().append(capture)
        if self.ranks is not None and not _ranks.selected(self.ranks):
            return capture.skipped(_not_selected_reason(self.ranks))
        if not self.policy.should_profile():
            return capture.unsampled()
        return capture.begin()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        capture = self._stack().pop()
        capture.end(exc)
        return False

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        return self.__exit__(exc_type, exc, tb)

    def _stack(self) -> list[Capture]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # -- decorator -----------------------------------------------------------------------
    def __call__(self, func: F) -> F:
        target = func.__func__ if isinstance(func, (classmethod, staticmethod)) else func
        if not callable(target):
            raise ConfigurationError(f"profile_neuron(...) decorates functions and methods, not {type(func).__name__}")
        name = self.name or str(getattr(target, "__qualname__", None) or getattr(target, "__name__", "profile"))
        save = False if self.save_trace is None else self.save_trace
        if _config.disabled_by_environment():
            return func  # NEURONSCOPE_DISABLED=1: not even a wrapper
        _env.check()  # decorating is the user's call: a malformed NEURONSCOPE_* fails here, not per call
        policy = SamplingPolicy(**self._sampling)  # each decorated function samples on its own
        _arming.register(name, policy)
        decide = decider(policy, name, self.ranks, profile_all=self.trigger is None)
        calls = CallProfiler(self, name, save, policy)
        if self.trigger is None:
            return cast(F, wrap(calls, func, target, decide))
        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            raise ConfigurationError(
                f"profile_neuron(trigger=...) on the generator {name!r}: triggers time calls, and a generator's call "
                "returns at once; profile it with sampling options (every=, sample=) instead"
            )
        from .timed import wrap_with_trigger

        return cast(F, wrap_with_trigger(self, func, target, name, save, policy, decide, calls.start, calls.new_capture))

    def __repr__(self) -> str:
        return f"<neuronscope.profile_neuron name={self.name!r} device={self.device!r}>"


def _check_options(output_dir: Any, save_trace: Any, schedule: Any, neuron: Any, flags: dict[str, Any]) -> None:
    if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
        raise ConfigurationError(f"profile_neuron(output_dir={output_dir!r}): use a path (str or os.PathLike)")
    if save_trace is not None and not isinstance(save_trace, bool):
        raise ConfigurationError(f"profile_neuron(save_trace={save_trace!r}): use True, False or None (auto)")
    if schedule is not None and not callable(schedule):
        raise ConfigurationError("profile_neuron(schedule=...): pass torch.profiler.schedule(wait=..., warmup=..., active=...)")
    if neuron is not None and not isinstance(neuron, NeuronOptions):
        raise ConfigurationError("profile_neuron(neuron=...): pass neuronscope.NeuronOptions(...)")
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigurationError(f"profile_neuron({flag}={value!r}): use True or False")


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


_call_counters: dict[str, itertools.count[int]] = {}


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


_site_policies: dict[tuple[Any, ...], SamplingPolicy] = {}
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
