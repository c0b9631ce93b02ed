"""The one capture this process may run at a time (PyTorch allows a single profiler)."""

from __future__ import annotations

import contextvars
import os
import threading
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .._run import Run

__all__ = ["ACQUIRED", "FOREIGN", "OTHER_THREAD", "SAME_THREAD", "release", "try_acquire"]


class _Outcome:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ACQUIRED = _Outcome("ACQUIRED")
SAME_THREAD = _Outcome("SAME_THREAD")  #: called from inside the active capture: nest as a region
OTHER_THREAD = _Outcome("OTHER_THREAD")  #: another thread or asyncio task holds it: run unprofiled
FOREIGN = _Outcome("FOREIGN")  #: someone else's torch.profiler is running: nest as a region

_lock = threading.Lock()
_owner: Any = None
_owner_thread: int | None = None
_active_run: "Run | None" = None
# Which capture the *current* call chain runs inside. A ContextVar, not the thread id:
# asyncio tasks share a thread, but a task started elsewhere is not part of the profiled
# call, while tasks the profiled coroutine creates itself inherit the context and are.
_inside: contextvars.ContextVar[Any] = contextvars.ContextVar("neuronscope_inside_capture", default=None)
_tokens: dict[int, contextvars.Token] = {}


def _torch_profiler_running() -> bool:
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover - older torch
        return False


def try_acquire(capture: Any) -> _Outcome:
    global _owner, _owner_thread, _active_run
    me = threading.get_ident()
    with _lock:
        if _owner is not None:
            return SAME_THREAD if _owner_thread == me and _inside.get() is _owner else OTHER_THREAD
        if _torch_profiler_running():
            return FOREIGN
        _owner, _owner_thread, _active_run = capture, me, None
        _tokens[id(capture)] = _inside.set(capture)
        return ACQUIRED


def release(capture: Any) -> None:
    global _owner, _owner_thread, _active_run
    with _lock:
        if _owner is capture:
            _owner, _owner_thread, _active_run = None, None, None
        token = _tokens.pop(id(capture), None)
    if token is not None:
        try:
            _inside.reset(token)
        except ValueError:  # released from another context (should not happen); the var is harmless
            _inside.set(None)


def set_active_run(run: "Run") -> None:
    global _active_run
    with _lock:
        _active_run = run


def active_run() -> "Run | None":
    return _active_run


def _reset_after_fork() -> None:
    global _lock, _owner, _owner_thread, _active_run
    _lock = threading.Lock()
    _owner, _owner_thread, _active_run = None, None, None
    _tokens.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
