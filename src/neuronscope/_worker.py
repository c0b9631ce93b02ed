"""A bounded background worker: post-processing off the caller's thread.

One daemon thread, a queue of fixed size. ``submit`` never blocks: when the queue is full
it returns False and the caller decides (drop and count, or run inline). The thread
disables torch's RecordFunction for itself, so the tensor maths of our analysis never shows
up inside a profile that is running at the same time on another thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable

__all__ = ["Worker", "get_worker"]

log = logging.getLogger("neuronscope")
_Task = Callable[[], None]


class Worker:
    def __init__(self, max_pending: int = 4) -> None:
        self._queue: queue.Queue[_Task | None] = queue.Queue(maxsize=max_pending)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, task: _Task) -> bool:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="neuronscope-worker", daemon=True)
                self._thread.start()
            try:
                self._queue.put_nowait(task)
            except queue.Full:
                return False
            self._pending += 1
            return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted task has run. False when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def _loop(self) -> None:
        try:
            import torch

            torch._C._autograd._enable_record_function(False)
        except Exception:  # noqa: BLE001 - only a hygiene measure; analysis still works
            log.debug("could not disable RecordFunction on the worker thread", exc_info=True)
        while True:
            task = self._queue.get()
            if task is None:
                return
            try:
                task()
            except Exception:  # noqa: BLE001 - a task failing must not kill the worker
                log.exception("neuronscope: background processing failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


_worker = Worker()


def get_worker() -> Worker:
    return _worker


def _reset_after_fork() -> None:
    # The worker thread does not exist in a forked child; start clean.
    global _worker
    _worker = Worker()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
