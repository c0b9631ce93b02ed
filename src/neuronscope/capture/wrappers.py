"""The one wrapper core of ``@profile_neuron``: whatever the decorated function is -- a function, a
coroutine function, a generator or an async generator -- a profiled call begins a capture
(capture/lifecycle.py) before the code runs and ends it after, with what the code raised.

Which calls are profiled is decided by wrapt's ``enabled=`` (the sampling policy's decider, in
C on the "no" path); only the body that runs the user's code differs by kind. The methods that
call the user's code (``profiled``, ``profiled_async``, ``profiled_gen``, ``profiled_agen``) and
``wrapper`` are on the stack while it runs: capture/watchdog.py's ``_CALL_THROUGH`` names them, so a
wake signal landing in the user's code below them may act.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import wrapt

from .. import _config, _ranks
from .._run import Run
from . import arming as _arming
from .lifecycle import Capture, CaptureSpec
from .sampling import SamplingPolicy, count_value

__all__ = ["CallProfiler", "decider", "wrap"]

#: an armed request handed to one call: (request, its number), False when the call was not armed
Stash = Any


def decider(policy: SamplingPolicy, name: str, ranks: frozenset[int] | None, *, profile_all: bool) -> Callable[[], bool]:
    """Whether the next call of the function named ``name`` is profiled (per call). With a
    trigger (``profile_all=False``), calls without sampling options are not all profiled: the
    trigger chooses."""
    attend = lambda: _arming.attend(name)  # noqa: E731 - asked only while something is armed
    if ranks is None:
        return policy.decider(enabled=_config.is_enabled, attend=attend, profile_all=profile_all)
    return policy.decider(enabled=lambda: _config.is_enabled() and _ranks.selected(ranks), attend=attend, profile_all=profile_all)


class CallProfiler:
    """How each profiled call of one decorated function begins and ends its capture."""

    def __init__(self, spec: CaptureSpec, name: str, save_trace: bool, policy: SamplingPolicy) -> None:
        self.spec, self.name, self.save_trace, self.policy = spec, name, save_trace, policy

    def new_capture(self) -> Capture:
        return Capture(self.spec, self.name, save_trace=self.save_trace)

    def start(self, capture: Capture, stash: Stash = None) -> Run:
        """Begin ``capture`` for this call (``stash``: its arm request, taken now when None)."""
        capture.first_call = self.policy.is_first_profiled_call
        # The policy counts every call: the n-th call of this function is call n on every rank.
        capture.call_index = count_value(self.policy.calls) - 1
        if stash is None:
            stash = _arming.take_stash()
        if stash:  # armed by ns.arm() / `neuronscope arm` (False: checked at call time, not armed)
            capture.trigger = _arming.trigger_for(*stash)
        run = capture.begin()
        if stash:
            _arming.attach_run(stash[0], run)
        return run

    def begin(self, stash: Stash) -> Capture:
        capture = self.new_capture()
        self.start(capture, stash)
        return capture

    # -- the bodies: the user's code runs inside these frames -------------------------------------
    def profiled(self, wrapped: Callable[..., Any], args: Any, kwargs: Any, stash: Stash) -> Any:
        capture = self.begin(stash)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            capture.end(exc)
            raise
        capture.end(None)
        return result

    async def profiled_async(self, wrapped: Callable[..., Awaitable[Any]], args: Any, kwargs: Any, stash: Stash) -> Any:
        capture = self.begin(stash)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            capture.end(exc)
            raise
        capture.end(None)
        return result

    # A generator (streaming responses) is profiled over its whole iteration: from its first
    # ``next()`` to its last (or to ``close()`` when the consumer stops early), not around the
    # creation of the generator object, which runs none of its body. Consume it on one thread:
    # the profiler session belongs to the thread that started it.
    def profiled_gen(
        self, wrapped: Callable[..., Generator[Any, Any, Any]], args: Any, kwargs: Any, stash: Stash
    ) -> Generator[Any, Any, Any]:
        capture = self.begin(stash)
        try:
            result = yield from wrapped(*args, **kwargs)
        except BaseException as exc:
            capture.end(_failure(exc))
            raise
        capture.end(None)
        return result

    async def profiled_agen(
        self, wrapped: Callable[..., AsyncIterator[Any]], args: Any, kwargs: Any, stash: Stash
    ) -> AsyncIterator[Any]:
        capture = self.begin(stash)
        try:
            async for item in wrapped(*args, **kwargs):
                yield item
        except BaseException as exc:
            capture.end(_failure(exc))
            raise
        capture.end(None)


def _failure(exc: BaseException) -> BaseException | None:
    """A generator's end: the consumer stopping early (close(), a client that disconnects) ends
    the profile normally."""
    return None if isinstance(exc, (GeneratorExit, StopIteration, StopAsyncIteration)) else exc


def wrap(calls: CallProfiler, func: Any, target: Callable[..., Any], decide: Callable[[], bool]) -> Any:
    """``func`` wrapped: each call ``decide()`` chooses runs in the body for ``target``'s kind."""
    if inspect.isasyncgenfunction(target):
        body: Callable[..., Any] = calls.profiled_agen
    elif inspect.isgeneratorfunction(target):
        body = calls.profiled_gen
    elif inspect.iscoroutinefunction(target):
        body = calls.profiled_async
    else:
        body = calls.profiled

    @wrapt.decorator(enabled=decide)
    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        # The arming decision is taken now, not when a coroutine or generator first runs: other
        # calls may be decided in between (asyncio.gather).
        return body(wrapped, args, kwargs, _arming.take_stash() or False)

    return wrapper(func)
