"""The per-process control channel that ``neuronscope arm PID`` talks to.

A Unix stream socket ``<dir>/<pid>.sock``, where ``<dir>`` is ``$NEURONSCOPE_CONTROL_DIR`` or
``/tmp/neuronscope-<uid>`` (made 0700 and checked: ours, not a symlink, nobody else's
access). The socket is 0600 and each peer's uid is checked with ``SO_PEERCRED``: the same
user or root. There is no network listener. Linux only (elsewhere the channel stays off and
``ns.arm()`` still works).

The first decorated call opens it (:func:`ensure_started`); one daemon thread serves it with
a selector, never blocking on a client: a request is one JSON line of at most
:data:`MAX_REQUEST_BYTES`, read within :data:`CLIENT_DEADLINE_S`; anything else gets an error
reply and the connection is closed; at most :data:`MAX_CLIENTS` connections and
:data:`RATE_PER_S` requests a second are served (the rest are told so), and each kind of
misbehaviour is logged once. A request can only say ``calls``, ``name`` and ``timeout_s``
(validated by :func:`.arming.validate`); nothing in it names a path. A forked child opens its
own socket on its first decorated call; the socket is removed at exit.

Requests (one line each, one reply line)::

    {"op": "status"}
    {"op": "arm", "calls": 3, "name": "infer", "timeout_s": 600}
    {"op": "poll", "id": 7}
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import selectors
import socket
import stat
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .. import _env

__all__ = ["ControlError", "control_dir", "ensure_started", "list_processes", "request", "socket_path", "stop"]

log = logging.getLogger("neuronscope")

CONTROL_DIR_ENV = _env.CONTROL_DIR.name
MAX_REQUEST_BYTES = 4096
CLIENT_DEADLINE_S = 2.0
MAX_CLIENTS = 16
RATE_PER_S = 20.0
MAX_PENDING_FROM_CLIENTS = 32
PROTOCOL = 1


class ControlError(Exception):
    """A control-channel problem to report as one line (the CLI exits 1 with it)."""


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and hasattr(socket, "SO_PEERCRED")


def control_dir(uid: int | None = None) -> Path:
    """Where the sockets of ``uid``'s processes live (``$NEURONSCOPE_CONTROL_DIR`` wins)."""
    env = _env.CONTROL_DIR.get()
    if env is not None:
        return env
    return Path("/tmp") / f"neuronscope-{os.geteuid() if uid is None else uid}"


def socket_path(pid: int, directory: Path | None = None) -> Path:
    return (directory or control_dir()) / f"{pid}.sock"


def _private_dir(path: Path, *, create: bool) -> Path:
    """``path`` as a directory only this user can enter; raise ControlError when it is not."""
    if create:
        try:
            path.mkdir(mode=0o700, parents=False, exist_ok=True)
        except FileNotFoundError:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise ControlError(f"{path} is not a directory (a symlink or a file); remove it or set {CONTROL_DIR_ENV}")
    if st.st_uid != os.geteuid():
        raise ControlError(f"{path} belongs to uid {st.st_uid}, not to this user; remove it or set {CONTROL_DIR_ENV}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours: make it private again
    return path


# -- server ----------------------------------------------------------------------------------
class _Client:
    __slots__ = ("buf", "deadline", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.deadline = time.monotonic() + CLIENT_DEADLINE_S


class _Server:
    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path)  # a stale socket of an earlier process with this pid
            except FileNotFoundError:
                pass
            sock.bind(str(path))
            os.chmod(path, 0o600)  # the directory is 0700 already: nobody else could reach it meanwhile
            sock.listen(MAX_CLIENTS)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ, None)
        self.clients: dict[int, _Client] = {}
        self.stopping = False
        self.tokens = RATE_PER_S
        self.refilled = time.monotonic()
        self.thread = threading.Thread(target=self._loop, name="neuronscope-control", daemon=True)
        self.thread.start()

    def _once(self, what: str, message: str) -> None:
        _logged_once(what, message)  # each misbehaviour is logged once per process

    def _loop(self) -> None:
        from . import arming

        last_sweep = time.monotonic()
        while not self.stopping:
            try:
                events = self.selector.select(timeout=0.5)
            except (OSError, ValueError):
                if self.stopping:
                    return
                time.sleep(0.1)
                continue
            for key, _ in events:
                try:
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                except Exception:
                    self._once("internal", "a request failed")
                    log.debug("control request failed", exc_info=True)
                    if key.data is not None:
                        self._close(key.data)
            now = time.monotonic()
            for client in [c for c in self.clients.values() if now >= c.deadline]:
                self._once("slow", "a client connected but sent no complete request in time; closed")
                self._reply(client, {"ok": False, "error": f"no complete request within {CLIENT_DEADLINE_S:g} s"})
            if now - last_sweep >= 1.0:
                last_sweep = now
                try:
                    arming.expire_old()
                except Exception:
                    log.debug("expiring arm requests failed", exc_info=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._once("fds", f"cannot accept: {exc.strerror}")
                    return
                raise
            conn.setblocking(False)
            client = _Client(conn)
            if not _peer_allowed(conn):
                self._once("uid", "refused a client of another user (only the same user or root may arm)")
                self._reply(client, {"ok": False, "error": "permission denied: only the same user or root may use this channel"})
                continue
            if len(self.clients) >= MAX_CLIENTS:
                self._once("busy", f"more than {MAX_CLIENTS} clients at once; refusing the rest")
                self._reply(client, {"ok": False, "error": "busy: too many clients at once, try again"})
                continue
            self.clients[conn.fileno()] = client
            self.selector.register(conn, selectors.EVENT_READ, client)

    def _read(self, client: _Client) -> None:
        try:
            chunk = client.sock.recv(MAX_REQUEST_BYTES + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        if not chunk:  # the client left without a complete request
            self._close(client)
            return
        client.buf += chunk
        line, newline, _ = client.buf.partition(b"\n")
        if len(line) > MAX_REQUEST_BYTES or (not newline and len(client.buf) > MAX_REQUEST_BYTES):
            self._once("big", f"a request over {MAX_REQUEST_BYTES} bytes; refused")
            self._reply(client, {"ok": False, "error": f"request too large (at most {MAX_REQUEST_BYTES} bytes)"})
            return
        if not newline:
            return  # partial: wait for the rest (until the deadline)
        if not self._take_token():
            self._once("rate", f"more than {RATE_PER_S:g} requests a second; refusing the excess")
            self._reply(client, {"ok": False, "error": "rate limited: too many requests, try again in a second"})
            return
        self._reply(client, handle(line))

    def _take_token(self) -> bool:
        now = time.monotonic()
        self.tokens = min(RATE_PER_S, self.tokens + (now - self.refilled) * RATE_PER_S)
        self.refilled = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def _reply(self, client: _Client, reply: dict[str, Any]) -> None:
        try:
            data = json.dumps(reply, default=str).encode() + b"\n"
            client.sock.send(data)  # small; a client that does not read loses it, we never wait
        except OSError:
            pass
        self._close(client)

    def _close(self, client: _Client) -> None:
        fd = client.sock.fileno()
        if fd >= 0:
            self.clients.pop(fd, None)
            try:
                self.selector.unregister(client.sock)
            except (KeyError, ValueError):
                pass
        try:
            client.sock.close()
        except OSError:
            pass

    def close(self, *, unlink: bool) -> None:
        self.stopping = True
        for client in list(self.clients.values()):
            self._close(client)
        try:
            self.selector.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _allowed_uids() -> set[int]:
    return {os.geteuid(), 0}


def _peer_allowed(conn: socket.socket) -> bool:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
    except OSError:
        return False
    return uid in _allowed_uids()


def handle(line: bytes) -> dict[str, Any]:
    """One request line -> the reply (never raises)."""
    from . import arming

    try:
        req = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        _logged_once("garbage", "a request that is not JSON; refused")
        return {"ok": False, "error": "not a JSON request"}
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        return {"ok": False, "error": 'a request is a JSON object with "op": "status" | "arm" | "poll"'}
    op = req["op"]
    allowed = {"status": {"op"}, "arm": {"op", "calls", "name", "timeout_s"}, "poll": {"op", "id"}}.get(op)
    if allowed is None:
        return {"ok": False, "error": f'unknown op {op[:40]!r}: use "status", "arm" or "poll"'}
    extra = set(req) - allowed
    if extra:
        return {"ok": False, "error": f"unknown field(s) for {op}: {sorted(extra)[:5]}"}
    try:
        if op == "status":
            return {"ok": True, **status()}
        if op == "arm":
            from .. import _config

            if not _config.is_enabled():  # the kill switch wins: say so rather than let the client wait
                return {
                    "ok": False,
                    "error": "neuronscope is disabled in this process (configure(enabled=False) or "
                    "NEURONSCOPE_DISABLED=1): nothing would be profiled",
                }
            if len(arming.pending()) >= MAX_PENDING_FROM_CLIENTS:
                return {"ok": False, "error": f"already {MAX_PENDING_FROM_CLIENTS} arm requests pending; wait or disarm"}
            r = arming.request(req.get("calls", 1), req.get("name"), req.get("timeout_s", 600.0), "neuronscope arm")
            return {"ok": True, **r.describe()}
        rid = req.get("id")
        if isinstance(rid, bool) or not isinstance(rid, int):
            return {"ok": False, "error": "poll needs an integer id"}
        found = arming.find(rid)
        if found is None:
            return {"ok": False, "error": f"no arm request {rid} in this process"}
        return {"ok": True, **found.describe()}
    except Exception as exc:
        from ..errors import ConfigurationError

        if not isinstance(exc, ConfigurationError):
            log.debug("control request failed", exc_info=True)
        return {"ok": False, "error": str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}


_logged: set[str] = set()


def _logged_once(what: str, message: str) -> None:
    if what not in _logged:
        _logged.add(what)
        log.warning("neuronscope control channel: %s (logged once)", message)


def status() -> dict[str, Any]:
    from .. import _stats
    from . import arming

    counts = _stats.stats()
    return {
        "protocol": PROTOCOL,
        "pid": os.getpid(),
        "service": _service_name(),
        "profiles": arming.profile_calls(),
        "armed": [r.describe() for r in arming.pending()],
        "stats": {k: counts.get(k, 0) for k in ("profiled", "armed", "triggered", "unsampled")},
    }


def _service_name() -> str:
    otel = sys.modules.get("neuronscope.sinks.otel")
    name = None
    if otel is not None:
        try:
            name = otel.settings().service_name
        except Exception:  # noqa: BLE001
            name = None
    name = name or _env.env_str("OTEL_SERVICE_NAME", None) or (os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "")
    return str(name or "python")[:100]


_server: _Server | None = None
_start_lock = threading.Lock()
_start_failed: set[str] = set()


def ensure_started() -> None:
    """Open this process's channel unless it is off, open already, or unsupported here.
    Problems are logged once; the service carries on without the channel."""
    global _server
    from .. import _config

    if not _config.current().control_enabled() or not supported():
        return
    with _start_lock:
        if _server is not None and _server.pid == os.getpid():
            return
        directory = control_dir()
        try:
            _private_dir(directory, create=True)
            _server = _Server(socket_path(os.getpid(), directory))
        except (OSError, ControlError) as exc:
            key = str(directory)
            if key not in _start_failed:
                _start_failed.add(key)
                log.warning(
                    "neuronscope: no control channel for `neuronscope arm` (%s); ns.arm() still works. "
                    "Set %s to a private directory, or NEURONSCOPE_CONTROL=0 to silence this.",
                    exc,
                    CONTROL_DIR_ENV,
                )


def stop() -> None:
    """Close this process's channel and remove its socket."""
    global _server
    with _start_lock:
        server, _server = _server, None
    if server is not None:
        server.close(unlink=server.pid == os.getpid())


def current_path() -> Path | None:
    """The socket this process listens on (None when the channel is not open)."""
    server = _server
    return server.path if server is not None and server.pid == os.getpid() else None


def settings_changed() -> None:
    """``configure(control=...)`` changed: close now, or open on the next decorated call."""
    from .. import _config
    from . import arming

    if _config.current().control_enabled():
        arming.reopen_control()
    else:
        stop()


def _after_fork_in_child() -> None:
    # The parent's socket and thread are not ours: drop them without removing the parent's file.
    global _server, _start_lock
    server, _server = _server, None
    _start_lock = threading.Lock()
    if server is not None:
        server.stopping = True
        try:
            server.sock.close()
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(stop)


# -- client (the CLI) -------------------------------------------------------------------------
def _pid_state(pid: int) -> str:
    """ "alive", "dead" or "other-user"."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        return "other-user"
    return "alive"


def _owner_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def locate(pid: int) -> Path:
    """The socket of process ``pid``, or a ControlError saying in one line why there is none."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ControlError(f"{pid!r} is not a process id")
    state = _pid_state(pid)
    uid = _owner_uid(pid) if state != "dead" else None
    path = socket_path(pid, control_dir(uid))
    if state == "dead":
        if path.exists():
            _remove_stale(path)
            raise ControlError(f"process {pid} is not running (removed its stale control socket {path})")
        raise ControlError(f"no process with pid {pid}")
    if state == "other-user" and os.geteuid() != 0:
        raise ControlError(f"process {pid} belongs to another user: run `neuronscope arm` as that user (or root)")
    if not path.exists():
        raise ControlError(
            f"process {pid} has no neuronscope control channel at {path} (not using neuronscope, no decorated function "
            f"called yet, control disabled with NEURONSCOPE_CONTROL=0, or {CONTROL_DIR_ENV} differs)"
        )
    return path


def _remove_stale(path: Path) -> None:
    try:
        if os.lstat(path).st_uid == os.geteuid():
            os.unlink(path)
    except OSError:
        pass


def request(pid: int, payload: dict[str, Any], timeout: float = 5.0, path: Path | None = None) -> dict[str, Any]:
    """Send one request to process ``pid``; its reply (ControlError when there is none)."""
    path = path or locate(pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            if _pid_state(pid) == "dead":
                _remove_stale(path)
                raise ControlError(f"process {pid} is not running (removed its stale control socket {path})") from exc
            raise ControlError(
                f"stale control socket {path}: process {pid} does not listen on it (it may have been restarted or forked)"
            ) from exc
        except PermissionError as exc:
            raise ControlError(f"{path}: permission denied: run `neuronscope arm` as the service's user (or root)") from exc
        except OSError as exc:
            raise ControlError(f"cannot connect to {path}: {exc.strerror or exc}") from exc
        try:
            try:
                sock.sendall(json.dumps(payload).encode() + b"\n")
            except BrokenPipeError:
                pass  # refused before it read the request: its reply says why
            data = b""
            while not data.endswith(b"\n") and len(data) < 1 << 20:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError as exc:
            raise ControlError(f"process {pid} did not answer within {timeout:g} s") from exc
        except OSError as exc:
            raise ControlError(f"talking to process {pid} failed: {exc.strerror or exc}") from exc
    try:
        reply = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlError(f"process {pid} sent an unreadable reply") from exc
    if not isinstance(reply, dict):
        raise ControlError(f"process {pid} sent an unreadable reply")
    if not reply.get("ok"):
        raise ControlError(f"process {pid}: {reply.get('error', 'request refused')}")
    return reply


def list_processes(timeout: float = 2.0) -> list[dict[str, Any]]:
    """This user's neuronscope processes on this host: their status, or why it is missing.
    Sockets of processes that are gone are removed."""
    directory = control_dir()
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for entry in entries:
        stem, _, suffix = entry.name.partition(".")
        if suffix != "sock" or not stem.isdigit():
            continue
        pid = int(stem)
        if _pid_state(pid) == "dead":
            _remove_stale(entry)
            continue
        try:
            out.append(request(pid, {"op": "status"}, timeout, path=entry))
        except ControlError as exc:
            out.append({"pid": pid, "error": str(exc)})
    out.sort(key=lambda r: r.get("pid", 0))
    return out
