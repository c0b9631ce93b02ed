"""``ns.arm()``: profile the next N calls of decorated functions, whatever their sampling says.

The decorators' hot path looks at one shared flag, :data:`attention` (a one-item list read
in their ``decide`` closure): while it is False — nothing armed and the control channel
already handled — an unsampled call pays one list lookup. When it is True the call goes to
:func:`attend`, which starts this process's control channel on the first decorated call
(:mod:`.control`), hands out armed calls, and clears the flag again when nothing is pending.

The request a call was armed by is handed from ``decide`` (which only answers yes/no to
wrapt) to the wrapper through a thread-local: both run on the calling thread, one right
after the other.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
import weakref
from pathlib import Path
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _stats
from ..errors import ConfigurationError
from .._trigger import Trigger
from .sampling import count_value, attention

if TYPE_CHECKING:
    from .._run import Run

__all__ = ["ArmRequest", "arm", "attention", "disarm"]

log = logging.getLogger("neuronscope")

#: True while decorated calls must look at arming: a request is pending, or this process's
#: control channel has not been started yet (the first decorated call starts it).

MAX_CALLS = 10_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
_MAX_NAME = 200

_lock = threading.RLock()
_changed = threading.Condition(_lock)
_pending: list[ArmRequest] = []
_recent: deque[ArmRequest] = deque(maxlen=256)  # the latest requests, for the control channel's polls
_ids = itertools.count(1)
_tls = threading.local()
#: called at the first decorated call of each process (capture/profile.py registers the
#: control channel's start here, so this module never imports the channel that drives it)
first_call_hooks: list[Callable[[], None]] = []
_control_pid: int | None = None  # the pid whose control channel was handled (started or found off)


class ArmRequest:
    """Calls armed by :func:`arm`. ``runs`` fills as armed calls are profiled.

    ``state``: ``"pending"`` (calls still to profile), ``"filled"``, ``"expired"`` (its
    ``timeout_s`` passed first; it was dropped and counted in ``ns.stats()["arm_expired"]``)
    or ``"cancelled"`` (:func:`disarm`).
    """

    def __init__(self, calls: int, name: str | None, timeout_s: float, source: str = "ns.arm()") -> None:
        self.id = next(_ids)
        self.calls = calls
        self.name = name
        self.timeout_s = timeout_s
        self.source = source
        self.created = time.monotonic()
        self.deadline = self.created + timeout_s
        self.state = "pending"
        self._remaining = calls
        self._inflight = 0  # armed calls being profiled whose Run is not attached yet
        self._given = 0  # calls handed out, for "call k of N"
        self._runs: list[Run] = []

    # -- public -------------------------------------------------------------------------
    @property
    def runs(self) -> list[Run]:
        """The runs produced so far (their results fill in as they are processed)."""
        with _lock:
            return list(self._runs)

    @property
    def done(self) -> bool:
        """True once the request is over (filled, expired or cancelled) and each of its runs
        is processed (files written, telemetry sent)."""
        with _lock:
            if self.state == "pending" and time.monotonic() >= self.deadline:
                _expire(self)
            if self.state == "pending" or self._inflight:
                return False
            runs = list(self._runs)
        return all(r.done for r in runs)

    def wait(self, timeout: float | None = None) -> list[Run]:
        """Wait until the request is over and its runs are written; return the runs.

        Returns early, with what there is, when ``timeout`` seconds pass first, or when the
        request expires (its ``timeout_s``) or is cancelled before every call was profiled.
        """
        end = None if timeout is None else time.monotonic() + timeout
        with _lock:
            while self.state == "pending" or self._inflight:
                now = time.monotonic()
                if self.state == "pending" and now >= self.deadline:
                    _expire(self)
                    continue
                limit = self.deadline - now if self.state == "pending" else 1.0
                if end is not None:
                    if now >= end:
                        return list(self._runs)
                    limit = min(limit, end - now)
                _changed.wait(max(min(limit, 1.0), 0.001))
            runs = list(self._runs)
        for r in runs:
            r.wait(None if end is None else max(end - time.monotonic(), 0.0))
        return runs

    @property
    def profiled(self) -> int:
        """Armed calls profiled so far."""
        with _lock:
            return len(self._runs)

    def describe(self) -> dict[str, Any]:
        """What the control channel reports about this request."""
        with _lock:
            if self.state == "pending" and time.monotonic() >= self.deadline:
                _expire(self)
            runs = list(self._runs)
            state, inflight = self.state, self._inflight
        # absolute: the caller (`neuronscope arm --wait`) runs in another working directory
        paths = [str(Path(r.path).absolute()) for r in runs if r.done and r.path is not None]
        return {
            "id": self.id,
            "state": state,
            "calls": self.calls,
            "name": self.name,
            "profiled": len(runs),
            "written": sum(1 for r in runs if r.done),
            "runs": paths,
            "done": state != "pending" and not inflight and all(r.done for r in runs),
            "seconds_left": max(round(self.deadline - time.monotonic(), 1), 0.0) if state == "pending" else 0.0,
        }

    def __repr__(self) -> str:
        what = f" name={self.name!r}" if self.name else ""
        return f"<neuronscope.ArmRequest {self.state} {len(self._runs)}/{self.calls} calls{what}>"

    # -- internal -----------------------------------------------------------------------
    def _take(self) -> int:
        """Hand out one call (under _lock); its 1-based number."""
        self._remaining -= 1
        self._inflight += 1
        self._given += 1
        if self._remaining <= 0:
            self.state = "filled"
            if self in _pending:
                _pending.remove(self)
        return self._given

    def _attach(self, run: Run) -> None:
        """The armed call started: keep its run, or give the call back if it could not be profiled."""
        with _lock:
            self._inflight -= 1
            if run.profiled:
                self._runs.append(run)
            else:  # another profile held the profiler: this call does not count
                self._remaining += 1
                self._given -= 1
                if self.state == "filled" and time.monotonic() < self.deadline:
                    self.state = "pending"
                    _pending.append(self)
                    attention[0] = True
            _changed.notify_all()
        if run.profiled:
            _stats.record("armed")


def arm(calls: int = 1, *, name: str | None = None, timeout_s: float = 600.0) -> ArmRequest:
    """Profile the next ``calls`` calls of decorated functions, whatever their sampling options
    say (warm-up included). With ``name``, only calls of profiles with that name count.

        req = ns.arm(3, name="infer")
        ...                          # the service keeps serving
        for run in req.wait(60):
            print(run.path, run.trigger.reason)

    The kill switch wins: with ``NEURONSCOPE_DISABLED=1`` or ``configure(enabled=False)``
    nothing is profiled. A request not filled within ``timeout_s`` seconds is dropped
    (``ns.stats()["arm_expired"]``). :func:`disarm` cancels what is pending.
    """
    return request(calls, name, timeout_s, "ns.arm()")


def request(calls: Any, name: Any, timeout_s: Any, source: str) -> ArmRequest:
    """An arm request from ``source`` (``ns.arm()``, the control channel's ``neuronscope arm``)."""
    calls, name, timeout_s = validate(calls, name, timeout_s)
    req = ArmRequest(calls, name, timeout_s, source)
    with _lock:
        _pending.append(req)
        _recent.append(req)
        attention[0] = True
    from .. import _config

    if not _config.is_enabled() or _config.disabled_by_environment():
        log.warning("neuronscope: armed %d call(s), but neuronscope is disabled: nothing will be profiled", calls)
    return req


def validate(calls: Any, name: Any, timeout_s: Any) -> tuple[int, str | None, float]:
    """Check arm()'s arguments (also what the control channel accepts from a client)."""
    if isinstance(calls, bool) or not isinstance(calls, int) or not 1 <= calls <= MAX_CALLS:
        raise ConfigurationError(f"arm(calls={calls!r}): use a whole number of calls from 1 to {MAX_CALLS}")
    if name is not None:
        if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME or not name.isprintable():
            raise ConfigurationError(
                f"arm(name={str(name)[:80]!r}): use a profile name (printable, 1 to {_MAX_NAME} characters) or None for any"
            )
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or not 0 < timeout_s <= MAX_TIMEOUT_S
    ):
        raise ConfigurationError(f"arm(timeout_s={timeout_s!r}): use a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}")
    return calls, name, float(timeout_s)


def disarm() -> int:
    """Cancel every pending arm request. Returns how many were cancelled."""
    with _lock:
        cancelled = list(_pending)
        for req in cancelled:
            req.state = "cancelled"
        _pending.clear()
        _changed.notify_all()
        return len(cancelled)


def _expire(req: ArmRequest) -> None:
    """Under _lock: the request's time is up."""
    if req.state != "pending":
        return
    req.state = "expired"
    if req in _pending:
        _pending.remove(req)
    _stats.record("arm_expired")
    log.info(
        "neuronscope: arm request %d expired after %.0f s with %d of %d call(s) profiled",
        req.id,
        req.timeout_s,
        len(req._runs) + req._inflight,
        req.calls,
    )
    _changed.notify_all()


def expire_old() -> None:
    """Drop requests whose time is up (the control channel calls this now and then)."""
    now = time.monotonic()
    with _lock:
        for req in [r for r in _pending if now >= r.deadline]:
            _expire(req)
        if not _pending and _control_pid == os.getpid():
            attention[0] = False


def attend(name: str) -> bool:
    """A decorated call of profile ``name`` saw :data:`attention`: True when it is armed
    (the request waits in a thread-local for :func:`take_stash`)."""
    global _control_pid
    try:
        if _control_pid != os.getpid():
            _control_pid = os.getpid()
            for hook in first_call_hooks:
                hook()
        now = time.monotonic()
        with _lock:
            for req in _pending:
                if now >= req.deadline:
                    _expire(req)
                elif req.name is None or req.name == name:
                    number = req._take()
                    _tls.request = (req, number)
                    return True
            if not _pending:
                attention[0] = False
    except Exception as exc:  # noqa: BLE001 - a bug here must not break the user's call
        _stats.contain("the arming check", exc)
        attention[0] = False
    return False


def attach_run(req: ArmRequest, run: Run) -> None:
    """The armed call handed out by :func:`attend` started as ``run`` (profiled, or not: the call
    is then given back to the request)."""
    req._attach(run)


def reopen_control() -> None:
    """``configure(control=...)`` turned the control channel on: it opens at the next decorated call."""
    global _control_pid
    _control_pid = None
    attention[0] = True


def take_stash() -> tuple[ArmRequest, int] | None:
    """The request :func:`attend` just handed this thread's call (None when not armed)."""
    stash = getattr(_tls, "request", None)
    if stash is not None:
        _tls.request = None
    return stash


def trigger_for(req: ArmRequest, number: int) -> Trigger:
    what = f" of {req.name!r}" if req.name else ""
    return Trigger(kind="arm", reason=f"armed by {req.source}: call {number} of {req.calls}{what}")


def find(request_id: int) -> ArmRequest | None:
    with _lock:
        for req in list(_pending) + list(_recent):
            if req.id == request_id:
                return req
    return None


def pending() -> list[ArmRequest]:
    with _lock:
        return list(_pending)


# -- what this process profiles (for `neuronscope arm --list`) --------------------------------
_profiles: dict[str, list[Any]] = {}
_MAX_PROFILES = 256


def register(name: str, policy: Any) -> None:
    """A function was decorated with profile name ``name``; ``policy`` counts its calls."""
    with _lock:
        refs = _profiles.get(name)
        if refs is None:
            if len(_profiles) >= _MAX_PROFILES:
                return
            refs = _profiles[name] = []
        refs[:] = [r for r in refs if r() is not None][:15]
        refs.append(weakref.ref(policy))


def profile_calls() -> dict[str, int]:
    """Profile name -> calls of its decorated functions so far in this process."""

    out: dict[str, int] = {}
    with _lock:
        items = [(n, [r() for r in refs]) for n, refs in _profiles.items()]
    for name, policies in items:
        out[name] = sum(count_value(p.calls) for p in policies if p is not None)
    return out


def _reset_after_fork() -> None:
    # The child starts with nothing armed; its first decorated call opens its own channel.
    global _lock, _changed, _tls, _control_pid
    _lock = threading.RLock()
    _changed = threading.Condition(_lock)
    _tls = threading.local()
    _pending.clear()
    _recent.clear()
    _control_pid = None
    attention[0] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
