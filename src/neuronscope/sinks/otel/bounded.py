"""Calls into OpenTelemetry that must return by a deadline: a provider's ``force_flush`` and
``shutdown``.

The SDK does not bound them: ``BatchSpanProcessor.force_flush`` ignores its timeout and exports
on the calling thread, and an OTLP exporter retries a dead endpoint for up to
``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s) per batch. So the call runs on a helper thread and the
caller waits only until its deadline; a call that is still running then goes on in the
background (the exporter's own timeout, or an abort at exit, ends it).

The helper is one daemon thread, started the first time a provider is resolved or flushed —
never at interpreter exit, where Python 3.12 refuses to start threads. Without it (it could
not be started) the call runs inline, unbounded, as the SDK's own would.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_inline", "start_helper", "submit"]

_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


class _Job:
    __slots__ = ("args", "done", "fn", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.done = threading.Event()
        self.result: Any = None


def _serve() -> None:
    while True:
        job = _jobs.get()
        try:
            job.result = job.fn(*job.args)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller as the result
            job.result = exc
        finally:
            job.done.set()


def start_helper() -> bool:
    """Start the helper thread if it is not running; False when it cannot be (at exit)."""
    global _thread
    if _thread is not None:
        return True
    with _lock:
        if _thread is None:
            thread = threading.Thread(target=_serve, name="neuronscope-otel-flush", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown" (3.12)
                return False
            _thread = thread
    return True


def submit(fn: Callable[..., Any], *args: Any) -> _Job:
    """Run ``fn(*args)`` on the helper thread (inline when there is none: then it is done on
    return). ``job.done`` is set when it returned; ``job.result`` is its result or exception."""
    if not start_helper():
        return run_inline(fn, *args)
    job = _Job(fn, args)
    _jobs.put(job)
    return job


def run_inline(fn: Callable[..., Any], *args: Any) -> _Job:
    """``fn(*args)`` on this thread, as a finished job."""
    job = _Job(fn, args)
    try:
        job.result = fn(*args)
    except Exception as exc:  # noqa: BLE001
        job.result = exc
    job.done.set()
    return job


def _reset_after_fork() -> None:
    # The helper thread does not exist in a forked child; jobs queued in the parent are its own.
    global _jobs, _thread, _lock
    _jobs, _thread, _lock = queue.SimpleQueue(), None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
