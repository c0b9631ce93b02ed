"""Keep Kineto's ``USDT: ... profiler_start`` / ``profiler_stop`` lines out of stderr.

Where they come from: libkineto's ``SyncActivityProfilerHandler`` logs a ``USDT`` message
(``USDT_EMIT_START_TRACE()`` / ``USDT_EMIT_STOP_TRACE()``, a marker for tracing tools) each
time torch starts or stops a trace, i.e. inside ``torch.autograd.profiler``'s
``_enable_profiler()`` and ``_disable_profiler()``. Kineto's logger writes every message at or
above its severity threshold to ``std::cerr`` (fd 2)::

    USDT:2026-01-05 10:15:00 4242:4242 SyncActivityProfilerHandler.cpp:52] profiler_start

No setting drops them alone: the severities are VERBOSE 0, INFO 1, WARNING 2, STAGE 3,
ERROR 4, USDT 5, and ``KINETO_LOG_LEVEL`` is one threshold (read once, at Kineto's first
start). torch's default threshold is ERROR, so USDT lines print; ``KINETO_LOG_LEVEL=6`` hides
them but hides Kineto's errors too.

So, while neuronscope starts or stops its own trace (only then: a plain ``torch.profiler`` of
the application is left alone), fd 2 points at an in-memory file for the duration of that one
call; afterwards every line is written back to the real stderr, in order, except those two
lines. Nothing else is dropped. The costs, documented in docs/production.md: stderr written
by other threads during that call (milliseconds; longer when stopping a large trace) comes out
when it returns, and a hard crash inside that call would lose what it wrote.
``ns.configure(keep_usdt_lines=True)`` or ``NEURONSCOPE_KEEP_USDT=1`` keeps the lines (no fd
redirection at all).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("neuronscope")

__all__ = ["USDT_LINE", "filter_usdt", "install", "suppressing"]

#: exactly the two lines Kineto writes at a trace's start and stop (nothing else it logs)
USDT_LINE = re.compile(rb"^USDT:[^\n]*\] profiler_(?:start|stop)\r?$")
_WRAPPED = "__neuronscope_usdt__"
_install_lock = threading.Lock()
_redirect_lock = threading.RLock()  # fd 2 is process-wide: one redirection at a time


def filter_usdt(data: bytes) -> bytes:
    """``data`` without Kineto's start/stop USDT lines (every other byte kept, in order)."""
    if b"USDT:" not in data:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(line for line in lines if not USDT_LINE.match(line.rstrip(b"\n")))


def suppressing() -> bool:
    """Whether neuronscope drops the lines now (``keep_usdt_lines`` / ``NEURONSCOPE_KEEP_USDT``)."""
    from .. import _config, _env

    keep = _config.current().keep_usdt_lines
    if keep is None:
        keep = _env.KEEP_USDT.get(lenient=True)  # read at each start and stop: never raise there
    return not keep


def _ours() -> bool:
    """A neuronscope capture is open: the trace being started or stopped is ours."""
    from . import session

    return session.any_open()


def _flush_python_stderr() -> None:
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed or replaced sys.stderr: nothing buffered to order
        pass


def _buffer_fd() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("neuronscope-stderr", os.MFD_CLOEXEC)
    import tempfile

    with tempfile.TemporaryFile() as f:  # the dup outlives the file object
        return os.dup(f.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Point fd 2 at a memory file for the block, then write it back without the USDT lines."""
    with _redirect_lock:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing to filter
            yield
            return
        try:
            buf = _buffer_fd()
        except OSError:
            os.close(saved)
            yield
            return
        _flush_python_stderr()
        os.dup2(buf, 2)
        try:
            yield
        finally:
            _flush_python_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            try:
                os.lseek(buf, 0, os.SEEK_SET)
                chunks = []
                while chunk := os.read(buf, 1 << 16):
                    chunks.append(chunk)
                kept = filter_usdt(b"".join(chunks))
                if kept:
                    _write_all(2, kept)
            except OSError:
                log.debug("neuronscope: writing back stderr around the profiler's start/stop failed", exc_info=True)
            finally:
                os.close(buf)


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not (_ours() and suppressing()):
            return fn(*args, **kwargs)
        with _filtered_stderr():
            return fn(*args, **kwargs)

    setattr(wrapper, _WRAPPED, fn)
    return wrapper


def install() -> None:
    """Wrap torch's trace start/stop (``torch.autograd.profiler._enable_profiler`` and
    ``_disable_profiler``, the calls that print the lines) once; idempotent, never raises."""
    try:
        import torch.autograd.profiler as tap
    except Exception:  # noqa: BLE001 - no torch profiler: nothing prints the lines
        return
    with _install_lock:
        for name in ("_enable_profiler", "_disable_profiler"):
            fn = getattr(tap, name, None)
            if fn is not None and not hasattr(fn, _WRAPPED):
                setattr(tap, name, _wrap(fn))
