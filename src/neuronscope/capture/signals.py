"""SIGTERM ends a profile cleanly: the profile in flight is stopped and written before the
process exits.

Python's default for SIGTERM kills the process at once: no ``finally``, no ``atexit``, so the
profile in flight and everything still queued for writing are lost — a Kubernetes pod being
rescheduled, ``timeout``, a job scheduler. While the program leaves SIGTERM at its default,
neuronscope turns it into :class:`Terminated` (a ``SystemExit`` with code 143, what a shell
reports for SIGTERM) raised in the main thread: ``with`` blocks and decorated calls end their
captures, and the exit handler writes them within ``NEURONSCOPE_EXIT_FLUSH_TIMEOUT`` seconds
(10 by default) before the process exits. A handler the program installed itself is left
alone (installed before neuronscope's: called after the profile is stopped; installed after:
it replaces neuronscope's). SIGINT needs nothing: Python raises ``KeyboardInterrupt``, which
unwinds the same way.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["WAKE", "Terminated", "add_wake_callback", "install", "wake_main_thread"]

_installed = False
_previous: Any = None
#: a real-time signal neuronscope sends its own main thread so that a profile recording only
#: that thread can be stopped at once when its budget or window ends (capture/watchdog.py):
#: torch stops a thread's profile only from that thread. None where there are none, or when
#: the program handles this signal itself.
WAKE: int | None = None
_on_wake: list[Any] = []


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM (exit code 143): the program unwinds, profiles end."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def install() -> None:
    """Install the SIGTERM handler once, from the main thread (elsewhere it cannot be)."""
    global _installed, _previous
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    _installed = True
    _install_wake()
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is signal.SIG_IGN or current is None:
            return  # the program ignores SIGTERM (or set it from C): not ours to change
        _previous = current
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no signals here (embedded interpreter, Windows)
        return


def _on_sigterm(signum: int, frame: Any) -> None:
    previous = _previous
    if callable(previous):
        _stop_open_profiles()
        previous(signum, frame)  # the program's own handler decides what happens next
        return
    raise Terminated()  # the default: unwind, so open profiles end and are written at exit


def _stop_open_profiles() -> None:
    """End the captures still open and write them (before the program's own handler runs, which
    may exit without unwinding), within ``NEURONSCOPE_EXIT_FLUSH_TIMEOUT``."""
    from .. import _env, _stats
    from . import session, wiring

    try:
        for capture in reversed(session.open_captures()):
            capture.end(Terminated())
        wiring.flush(_env.EXIT_FLUSH_TIMEOUT.get(lenient=True))
    except Exception as exc:  # noqa: BLE001 - best effort; the program's handler still runs
        _stats.contain("writing the profiles in flight on SIGTERM", exc, exc_info=False)


def _install_wake() -> None:
    global WAKE
    number = getattr(signal, "SIGRTMAX", None)
    if number is None:
        return
    number = int(number) - 2  # SIGRTMAX itself is the one programs pick first
    try:
        if signal.getsignal(number) not in (signal.SIG_DFL, None):
            return  # the program uses it
        signal.signal(number, _woken)
        signal.siginterrupt(number, False)  # restart the system calls it lands in (C extensions' reads)
        WAKE = number
    except (ValueError, OSError):
        return


def add_wake_callback(callback: Any) -> None:
    """Call ``callback(frame)`` in the main thread on the wake signal (once, however often added)."""
    if callback not in _on_wake:
        _on_wake.append(callback)


def _woken(signum: int, frame: Any) -> None:
    for callback in list(_on_wake):
        try:
            callback(frame)
        except Exception:  # noqa: BLE001 - a signal handler must never raise into user code
            pass


def wake_main_thread() -> bool:
    """Run the wake callbacks in the main thread soon (between two of its bytecodes; a sleep
    or a blocking read is interrupted and resumed). False where that is not possible."""
    if WAKE is None:
        return False
    try:
        signal.pthread_kill(threading.main_thread().ident or 0, WAKE)
        return True
    except (OSError, ValueError, AttributeError):
        return False
