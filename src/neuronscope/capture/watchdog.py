"""Who acts on a limit or a window's boundary, and when it is safe to stop the profiler.

torch lets only the thread that started a profile stop it, unless it records every thread
(``all_threads``, what ``neuronscope run`` uses). A watchdog thread polls the open limited
captures (capture/bounds.py) every 50 ms; it stops an all-threads session itself, wakes the main
thread with a signal of its own (capture/signals.py) for a main-thread session, and otherwise
leaves the action to the capture's thread at its next ``ns.step()`` (:func:`on_step`).

A window ends only at a safe point: never while torch code holds a ``record_function`` open
(a compiled region, an optimizer step, a DataLoader fetch: :func:`safe_to_stop`, :func:`when_safe`);
a session of every thread starts outside compiled code (a compiled region entered before the
start fails as it exits).
What is watched has ``recording`` (capture/budget.py's :class:`~.budget.Recording`),
``all_threads``, ``name`` and ``limit_action(action)``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import _stats, _worker
from ..trace.kinds import MARKER_OPTIMIZER_STEP
from .budget import POLL_S

__all__ = ["on_step", "safe_to_stop", "unwatch", "watch", "when_safe"]

_watched: list[Any] = []  # open captures with a Recording
_watch_lock = threading.Lock()
_thread: threading.Thread | None = None
_hook: Any = None


def watch(capture: Any) -> None:
    """Watch ``capture`` (it has ``.recording``) until it ends; starts the watchdog once."""
    global _thread
    from . import signals

    with _watch_lock:
        _watched.append(capture)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="neuronscope-budget", daemon=True)
            _thread.start()
    signals.add_wake_callback(_on_wake)
    _hook_optimizer_steps()


def unwatch(capture: Any) -> None:
    with _watch_lock:
        if capture in _watched:
            _watched.remove(capture)


def _loop() -> None:
    try:
        import torch

        torch._C._autograd._enable_record_function(False)  # nothing of ours in the user's profile
    except Exception:  # noqa: BLE001
        pass
    while True:
        time.sleep(POLL_S)
        with _watch_lock:
            captures = list(_watched)
        now = time.monotonic_ns()
        busy = bool(_worker.busy[0])
        for capture in captures:
            if busy:
                capture.recording.workers_ran()
            try:
                rec = capture.recording
                # a deferred action, one due now, or a wake signal that landed at no safe point
                action = rec.take_deferred() or rec.due(now) or (rec.pending if not rec.signalled else None)
                if action is not None:
                    _dispatch(capture, action)
            except Exception as exc:  # noqa: BLE001 - the watchdog must outlive any capture's bug
                _stats.contain("the recording budget", exc, name=getattr(capture, "name", None))


def _dispatch(capture: Any, action: str) -> None:
    """Run ``action`` on a thread allowed to: here (all threads recorded), the main thread (woken
    by a signal), or the capture's own thread at its next step."""
    from . import session, signals

    rec = capture.recording
    main = rec.thread == threading.main_thread().ident
    all_threads = capture.all_threads or session.recording_all_threads()
    if all_threads and (action == "resume" or not main or signals.WAKE is None):
        # a start too: a session recording every thread is global in torch, and a compiled
        # region's record_function entered before it starts fails as it exits ("Trying to exit
        # an active record_function_fast context but no guard is set": a compiled loop in 0.3 s
        # windows beside two busy processes, measured)
        if not _thread_at_safe_point(rec.thread, starting=action == "resume"):
            rec.deferred = action  # the thread holds a torch record_function open: the next poll tries again
            return
        capture.limit_action(action)
        return
    # A stop of a main-thread capture -- recording every thread or not -- is the main thread's:
    # from here it would race with the op the main thread is in (a C++ op runs without the GIL,
    # its RecordFunction open: `neuronscope run` on a forward/backward loop in 0.2 s windows
    # crashed in 4 of 5 runs, with or without the user's regions). Woken, the main thread acts
    # between two bytecodes, outside any op, and closes its own open regions first.
    rec.pending = action
    if main and not rec.signalled:
        rec.signalled = True  # one signal per action (cleared when acted on, or deferred)
        signals.wake_main_thread()


#: neuronscope's frames that only call the user's code through (a decorated function's
#: wrapper): no lock is held in them, so a wake signal may act while the user's code runs below
_CALL_THROUGH = frozenset(
    {
        "wrapper",
        "sync_wrapper",
        "async_wrapper",
        "gen_wrapper",
        "agen_wrapper",
        "profiled",
        "profiled_gen",
        "profiled_agen",
        "profiled_async",
        "timed_call",
        "_run_profiled",
        "run",
        "main",
        "invoke",
        "__call__",
    }
)
_OURS = ("neuronscope", "torch.profiler", "torch.autograd.profiler", "wrapt")
#: torch's code that runs inside a ``record_function`` of its own (a compiled region and its graph
#: call, an optimizer's step, a DataLoader's ``__next__``; autograd: a custom Function's
#: forward and the Python a backward pass calls run inside the engine's RecordFunctions): stopping
#: the profiler while one is open corrupts memory (torch 2.13: a compiled loop under 0.3 s windows
#: crashed in 5 of 6 runs, in the garbage collector, long after; 0 of 8 once stops waited for
#: these frames to return)
_OPEN_RECORD_FUNCTION = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch",
    "torch.optim",
    "torch.utils.data",
    "torch.autograd",
)


#: torch's compiled code, whose ``_RecordFunctionFast`` makes its RecordFunction only if a profile
#: runs as it enters and fails as it exits if one runs then ("Trying to exit an active
#: record_function_fast context but no guard is set")
_FAST_RECORD_FUNCTION = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx")


def _safe_to_act(frame: Any) -> bool:
    """Whether the main thread, interrupted at ``frame``, is in the user's code: not inside
    neuronscope or torch.profiler, whose locks it may hold (a signal handler runs on the
    interrupted thread: taking a lock it holds would deadlock, an RLock would be re-entered),
    and not inside torch code that holds a ``record_function`` open (:func:`safe_to_stop`)."""
    from . import session

    if session.lock_held_here():
        return False
    f = frame
    while f is not None:
        module = f.f_globals.get("__name__", "") or ""
        if module.startswith(_OURS) and f.f_code.co_name not in _CALL_THROUGH:
            return False
        f = f.f_back
    return safe_to_stop(frame)


def safe_to_stop(frame: Any) -> bool:
    """Whether the profiler may stop while a thread runs at ``frame``: no frame of torch code that
    holds a ``record_function`` open (a compiled region, an optimizer step, a DataLoader fetch)."""
    return not _inside(frame, _OPEN_RECORD_FUNCTION)


def _inside(frame: Any, modules: tuple[str, ...]) -> bool:
    """Whether ``frame`` or a frame below which it runs is code of one of ``modules``."""
    while frame is not None:
        if (frame.f_globals.get("__name__", "") or "").startswith(modules):
            return True
        frame = frame.f_back
    return False


def when_safe(frame: Any, act: Callable[[str], None], action: str) -> bool:
    """Call ``act(action)`` on this thread as soon as it leaves the torch code that holds a
    ``record_function`` open around ``frame`` (the return of the outermost such frame, caught
    with a trace function for that one return). False where another tracer (a debugger, coverage)
    owns this thread's trace hook: the caller then leaves the action to the watchdog."""
    outermost = None
    f = frame
    while f is not None:
        if (f.f_globals.get("__name__", "") or "").startswith(_OPEN_RECORD_FUNCTION):
            outermost = f
        f = f.f_back
    if outermost is None:
        act(action)
        return True
    if sys.gettrace() is not None:
        return False

    def on_return(f: Any, event: str, arg: Any) -> Any:
        if event != "return":
            return on_return
        sys.settrace(None)
        f.f_trace = None
        try:
            act(action)
        except Exception as exc:  # noqa: BLE001 - never into the user's code
            _stats.contain("the recording budget", exc)
        return None

    outermost.f_trace_lines = False
    outermost.f_trace = on_return
    sys.settrace(_no_new_frames)  # the hook that lets one frame's f_trace fire; no other frame traced
    return True


def _no_new_frames(frame: Any, event: str, arg: Any) -> None:
    return None


def _thread_at_safe_point(thread: int, starting: bool = False) -> bool:
    """For a stop (``starting``: a start) from another thread (a session recording every thread):
    whether ``thread`` is at a safe point now (a snapshot: the window is then acted on at once,
    else at a later poll). A start is unsafe inside compiled code only (_FAST_RECORD_FUNCTION):
    torch's other record_functions exit fine when a profile started meanwhile."""
    frame = sys._current_frames().get(thread)
    return frame is None or not _inside(frame, _FAST_RECORD_FUNCTION if starting else _OPEN_RECORD_FUNCTION)


def _on_wake(frame: Any) -> None:
    """In the main thread (the wake signal): the actions due for captures of this thread --
    unless the signal landed inside neuronscope or torch.profiler (the watchdog signals again
    50 ms later)."""
    if not _safe_to_act(frame):
        _unsent(threading.get_ident())
        return
    _run_pending(threading.get_ident())


def _unsent(thread: int) -> None:
    """The wake signal was not acted on: let the watchdog send it again. No lock: this runs
    exactly when the interrupted thread may hold ``_watch_lock`` (in watch/unwatch)."""
    for capture in list(_watched):
        if capture.recording.thread == thread:
            capture.recording.signalled = False


def _run_pending(thread: int) -> None:
    with _watch_lock:
        captures = [c for c in _watched if c.recording.thread == thread and c.recording.pending]
    for capture in captures:
        action, capture.recording.pending = capture.recording.pending, None
        capture.recording.signalled = False
        capture.limit_action(action)


def on_step(source: str = "ns.step") -> None:
    """A step ended on this thread (``ns.step()``, or an optimizer step): windows and limits act."""
    if not _watched:
        return
    now = time.monotonic_ns()
    me = threading.get_ident()
    with _watch_lock:
        captures = list(_watched)
    for capture in captures:
        rec = capture.recording
        if source == "ns.step":
            rec.steps_seen = True
        elif rec.steps_seen:
            continue  # the code marks its steps itself: an optimizer step is part of one
        if rec.thread != me and not capture.all_threads:
            continue
        try:
            action = rec.step(now)
            if rec.pending and rec.thread == me:
                action, rec.pending = rec.pending, None
                rec.signalled = False  # acted on: the next action is signalled again (_dispatch)
            if action is None:
                continue
            if source == "optimizer" and action != "resume":
                # the step hook runs inside the optimizer's record_function: stopping now would
                # close it under torch's feet -- act as the optimizer's step returns (else the
                # watchdog acts at its next poll)
                if not when_safe(sys._getframe(), capture.limit_action, action):
                    rec.deferred = action
                continue
            capture.limit_action(action)
        except Exception as exc:  # noqa: BLE001
            _stats.contain("the recording budget", exc, name=getattr(capture, "name", None))


def _optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _watched:
        return
    from . import session

    # the diagnosis finds the steps in the trace: these mark the steps of code that marks none
    # itself (its ns.step() calls and its own repeated regions come first: analysis/diagnosis/steps.py)
    if any(not c.recording.steps_seen for c in _watched):
        session.mark(MARKER_OPTIMIZER_STEP)
    on_step("optimizer")


def _hook_optimizer_steps() -> None:
    """Every optimizer's step is a step of a limited profile (torch lets a profiler hook them all)."""
    global _hook
    if _hook is not None:
        return
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _hook = register_optimizer_step_post_hook(_optimizer_step)
    except Exception:  # noqa: BLE001 - an older torch: steps come from ns.step() only
        _hook = False
