"""The process's one torch.profiler session, shared by every open capture.

PyTorch runs one profiler at a time (a second concurrent session crashes torch 2.13 at
stop), and a session records only the thread that started it — unless it was started with
``profile_all_threads``, which also lets any thread stop it. So nesting works like this:

* the first capture starts a session; it is *open*;
* a capture begun inside it (same thread and call chain, or any thread when a session
  records all threads) makes the session **yield**: the running session stops, its events
  become a :class:`Segment` shared by every open capture, and a new session starts with the
  newcomer's options;
* when a capture ends, the session stops (one more segment for everyone open), the capture
  is processed from its own segments — so its summary is ready when *it* ends — and, if
  captures remain open, a session restarts for the innermost of them.

An outer capture therefore holds its time as consecutive segments; processing concatenates
them, so every event is counted exactly once. ``neuronscope.region`` blocks that were open
across a yield are re-entered when the session restarts and stitched back into one region.
A capture on another thread while a thread-local session runs cannot be profiled at all
(torch would record nothing of it): it runs unprofiled and says so.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .._system import process_rss

# the markers a capture leaves in the trace
from ..trace.kinds import MARKER_CAPTURE, MARKER_CAPTURE_END, MARKER_SEGMENT


class Client(Protocol):
    """What the session needs of an open capture; capture/lifecycle.py's ``Capture`` is one.
    The session calls only these, so it never imports the capture (which imports it)."""

    name: str
    serial: int
    all_threads: bool  #: record every thread (lets other threads nest and stop the session)
    schedule: Any  #: the capture's torch.profiler schedule, or None
    segments: list[Segment]  #: what the session recorded for this capture, in order
    last_window_results: Any  #: a scheduled capture's last window (see share_window)
    paused: bool  #: open but not recording (between windows, past its budget): not resumed after a nested profile

    def start_session(self, all_threads: bool) -> Any:
        """Start (and return) the torch.profiler session, configured for this capture."""

    def on_segment(self, prof: Any, seg: "Segment") -> None:
        """The session stopped while this capture owned it: ``seg`` is what it recorded."""

    def stop_failed(self, exc: BaseException) -> None:
        """torch's stop raised ``exc``; the session is gone."""

    def resume_failed(self, exc: BaseException) -> None:
        """Restarting the session for this capture (after an inner one) raised ``exc``."""

    def step(self) -> None:
        """Advance a scheduled capture's torch.profiler schedule (``ns.step()``)."""

    def end(self, exc: BaseException | None) -> None:
        """End the capture (SIGTERM ends the open ones: capture/signals.py)."""


__all__ = [
    "FOREIGN",
    "Client",
    "JOIN",
    "NEST",
    "OTHER_THREAD",
    "START",
    "Segment",
    "active_run",
    "cut",
    "enter",
    "leave",
    "resume",
]


class _Outcome:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


START = _Outcome("START")  #: nothing open: start a session
NEST = _Outcome("NEST")  #: inside an open capture: the session yields to the newcomer
JOIN = _Outcome("JOIN")  #: inside a scheduled capture (whose windows cannot be split): record as a region
OTHER_THREAD = _Outcome("OTHER_THREAD")  #: a thread-local session runs on another thread: unprofiled
FOREIGN = _Outcome("FOREIGN")  #: someone else's torch.profiler runs: record as a region of theirs


@dataclass
class Segment:
    """The events of one session, shared by the captures open while it ran."""

    results: Any  #: torch's Kineto results (``prof.profiler.kineto_results``)
    owner: Any  #: the capture whose options the session ran with
    start_ns: int
    stop_ns: int
    #: neuronscope regions re-entered on the starting thread at this session's start
    continued: tuple[str, ...] = ()
    all_threads: bool = False  #: the session recorded every thread
    rss_growth: int | None = None  #: process RSS growth over the session (Linux), bytes
    trace: Any = None  #: the segment's trace model, read once for every capture that shares it
    #: Kineto's JSON of this segment when the memory stage saved it (Kineto saves once: the run
    #: directory's trace.json.gz is then made from this file); removed with the segment
    saved_json: Any = None
    _refs: int = field(default=0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def lock(self) -> threading.Lock:
        """Held while one capture reads or saves the segment's shared data (its Kineto JSON)."""
        return self._lock

    def hold(self) -> None:
        """One more capture holds the segment (each :meth:`release` gives one back)."""
        with self._lock:
            self._refs += 1

    def release(self) -> bool:
        """One capture is done with the segment; True when it was the last (free it then)."""
        with self._lock:
            self._refs -= 1
            if self._refs <= 0:
                self.results = None
                self.trace = None
                if self.saved_json is not None:
                    try:
                        os.unlink(self.saved_json)
                    except OSError:
                        pass
                    self.saved_json = None
                return True
            return False


_lock = threading.RLock()
_open: list[Client] = []
_session: Any = None  # the running torch.profiler.profile
_session_owner: "Client | None" = None
_session_thread: int | None = None
_session_all_threads = False
_session_start_ns = 0
_session_continued: tuple[str, ...] = ()
_session_rss = 0
# Which capture the current call chain runs inside. A ContextVar, not the thread id:
# asyncio tasks share a thread, but a task started elsewhere is not part of the profiled
# call, while tasks the profiled coroutine creates itself inherit the context and are.
_inside: contextvars.ContextVar[Any] = contextvars.ContextVar("neuronscope_inside_capture", default=None)
_tokens: dict[int, contextvars.Token] = {}


def _torch_profiler_running() -> bool:
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover - older torch
        return False


def decide(capture: Client) -> _Outcome:
    """What ``capture`` may do now (no state changes)."""
    with _lock:
        if not _open:
            return FOREIGN if _torch_profiler_running() else START
        me = threading.get_ident()
        inside = _inside.get()
        same_chain = _session_thread == me and inside is not None and inside in _open
        if any(c.schedule is not None for c in _open):
            return JOIN if same_chain else OTHER_THREAD
        if same_chain or _session_all_threads:
            return NEST
        return OTHER_THREAD


def enter(capture: Client) -> None:
    """Open ``capture``: stop the running session if any (a segment for everyone open),
    then start one with ``capture.start_session(all_threads)``. Raises what that raises."""
    with _lock:
        if _session is not None:
            _cut_segment()
        _open.append(capture)
        _tokens[id(capture)] = _inside.set(capture)
        try:
            _start(capture)
        except BaseException:
            _open.remove(capture)
            _reset_token(capture)
            _resume()  # the captures we cut keep recording
            raise


def leave(capture: Client, before_stop: Any = None) -> list[Segment]:
    """Close ``capture``: stop the session, hand back the capture's segments, and restart a
    session for the captures still open. ``before_stop()`` runs just before torch's stop
    (the device synchronize)."""
    with _lock:
        if capture not in _open:
            return []
        try:
            if before_stop is not None:
                before_stop()
        finally:
            if _session is not None:
                _cut_segment()
            _open.remove(capture)
            _reset_token(capture)
            segments = capture.segments
            if _open:
                _resume()
            else:
                from .region import forget_open_regions

                forget_open_regions()
        return segments


def cut(capture: Client, take: bool = False) -> list[Segment] | None:
    """End the running session while ``capture`` owns it, and start none: its events become a
    segment of every open capture. A window ending, or a budget reached (capture/budget.py).
    The capture stays open, paused, until :func:`resume`. Returns the capture's segments so far
    (handed over and cleared when ``take``: a window's), or None when it does not own the session."""
    with _lock:
        if _session is None or _session_owner is not capture or capture not in _open:
            return None
        capture.paused = True
        _cut_segment()
        segments = list(capture.segments)
        if take:
            capture.segments.clear()
        return segments


def owner() -> Client | None:
    """The capture whose options the running session has (None: no session)."""
    return _session_owner


def resume(capture: Client) -> bool:
    """Start recording again for a paused ``capture`` (the next window). False when it is not the
    innermost open capture (a profile nested in it records now; the window starts after it)."""
    with _lock:
        if capture not in _open or _open[-1] is not capture:
            return False
        capture.paused = False
        if _session is not None:
            return True
        try:
            _start(capture)
        except Exception as exc:  # noqa: BLE001 - the capture goes on without more windows
            capture.paused = True
            capture.resume_failed(exc)
            return False
        from .region import continue_open_regions

        global _session_continued
        _session_continued = continue_open_regions()  # this thread's regions, closed at the cut
        return True


def recording_since() -> tuple[Client | None, int, int]:
    """(owner, start ns, process RSS at start) of the running session: what the budget watchdog estimates from."""
    with _lock:
        return _session_owner, _session_start_ns, _session_rss


def abandon(capture: Client) -> None:
    """Forget a capture whose start failed (nothing to process)."""
    with _lock:
        if capture in _open:
            _open.remove(capture)
        _reset_token(capture)


def active_run() -> Any:
    """The Run of the capture the current call chain is inside (for joins), or None."""
    inside = _inside.get()
    return getattr(inside, "run", None) if inside is not None and inside in _open else None


def any_open() -> bool:
    """Whether a capture is open (no lock: a flag check on ns.step()'s path)."""
    return bool(_open)


def lock_held_here() -> bool:
    """Whether this thread holds the session's lock (a signal handler that interrupted it must
    not take it again)."""
    owned = getattr(_lock, "_is_owned", None)
    return bool(owned is not None and owned())


def innermost() -> "Client | None":
    with _lock:
        return _open[-1] if _open else None


def open_captures() -> list[Client]:
    with _lock:
        return list(_open)


def _start(capture: Client) -> None:
    """Start a session owned by ``capture`` (the regions it continues are set by _resume)."""
    global _session, _session_owner, _session_thread, _session_all_threads, _session_start_ns, _session_continued
    global _session_rss
    all_threads = any(c.all_threads for c in _open)
    _session = capture.start_session(all_threads)
    # measured after torch's start: its first start initialises Kineto (time and memory that
    # are not this segment's events)
    _session_rss = process_rss() or 0
    _session_start_ns = time.time_ns()
    _session_owner = capture
    _session_thread = threading.get_ident()
    _session_all_threads = all_threads
    _session_continued = ()
    mark(MARKER_SEGMENT)


def _cut_segment() -> None:
    """Stop the running session; its events become a segment of every open capture."""
    global _session, _session_owner
    prof, owner = _session, _session_owner
    _session, _session_owner = None, None
    stop_ns = time.time_ns()
    from .region import close_open_regions

    close_open_regions()  # never stop under an open record_function (this thread's regions)
    try:
        prof.stop()
        # None when a schedule had run its course (repeat=N): nothing recorded since its last window
        results = prof.profiler.kineto_results if prof.profiler is not None else None
    except Exception as exc:  # noqa: BLE001 - a broken stop loses this segment, not the program
        if owner is not None:
            owner.stop_failed(exc)
        results = None
    if results is None:
        return
    if owner is not None and results is owner.last_window_results:
        return  # a scheduled capture's last window: already a segment of everyone (share_window)
    rss = process_rss()
    seg = Segment(
        rss_growth=None if rss is None or not _session_rss else max(rss - _session_rss, 0),
        results=results,
        owner=owner,
        start_ns=_session_start_ns,
        stop_ns=stop_ns,
        continued=_session_continued,
        all_threads=_session_all_threads,
    )
    if owner is not None:
        owner.on_segment(prof, seg)
    for c in _open:
        c.segments.append(seg)
        seg.hold()


def recording_all_threads() -> bool:
    """Whether the running session records every thread (for a scheduled window's segment)."""
    return _session_all_threads


def share_window(capture: Client, seg: Segment) -> None:
    """A scheduled capture's window is a segment of the captures it is nested in as well.

    torch clears a scheduled profile's events at the end of each cycle, so the outer captures
    get each window as it is ready; the results its final stop hands back are the last window's
    again, and :func:`_cut_segment` does not count them twice.
    """
    with _lock:
        capture.last_window_results = seg.results
        for other in _open:
            if other is not capture:
                other.segments.append(seg)
                seg.hold()


def _resume() -> None:
    """Restart a session for the innermost open capture, re-entering its thread's open regions."""
    if not _open or _session is not None:
        return
    capture = _open[-1]
    if capture.schedule is not None:
        return  # a scheduled capture's session is never yielded, so never resumed
    if getattr(capture, "paused", False):
        return  # between windows, or past its budget: it resumes itself (capture/bounds.py)
    from .region import continue_open_regions

    try:
        _start(capture)
    except Exception as exc:  # noqa: BLE001 - the outer capture goes on without more segments
        capture.resume_failed(exc)
        return
    global _session_continued
    _session_continued = continue_open_regions()


def _reset_token(capture: Client) -> None:
    token = _tokens.pop(id(capture), None)
    if token is not None:
        try:
            _inside.reset(token)
        except ValueError:  # released from another context (an async task): harmless
            pass


def mark(name: str) -> None:
    """A zero-length record_function: tells which Kineto thread id and trace time a point has."""
    try:
        handle = torch.profiler.record_function(name)
        handle.__enter__()
        handle.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - markers only refine the analysis
        pass


def mark_capture(capture: Client, end: bool = False) -> None:
    mark(f"{MARKER_CAPTURE_END if end else MARKER_CAPTURE}#{capture.serial}:{capture.name}")


def _reset_after_fork() -> None:
    global _lock, _session, _session_owner, _session_thread, _session_all_threads
    _lock = threading.RLock()
    _open.clear()
    _session, _session_owner, _session_thread, _session_all_threads = None, None, None, False
    _tokens.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
