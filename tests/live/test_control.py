"""`neuronscope arm PID`: a real second process armed from the command line, through its
control channel; permissions, the peer check, fuzzed clients, stale sockets, fork."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope.capture import arming, control

pytestmark = pytest.mark.skipif(not control.supported(), reason="the control channel needs Linux")

SERVICE = Path(__file__).with_name("_service.py")


@pytest.fixture
def ctl_dir(monkeypatch):
    """A private control directory (short: Unix socket paths are limited to 107 bytes)."""
    parent = Path(tempfile.mkdtemp(prefix="nsctl-", dir="/tmp"))
    d = parent / "ctl"
    monkeypatch.setenv("NEURONSCOPE_CONTROL_DIR", str(d))
    control.stop()
    control.settings_changed()  # this process reopens its channel there on its next decorated call
    yield d
    ns.disarm()
    control.stop()
    control.settings_changed()
    shutil.rmtree(parent, ignore_errors=True)


def _env(ctl: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NEURONSCOPE_CONTROL_DIR"] = str(ctl)
    env["NEURONSCOPE_OUTPUT_DIR"] = str(out)
    env.pop("NEURONSCOPE_DISABLED", None)
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuronscope", *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def service(ctl_dir, tmp_path):
    env = _env(ctl_dir, tmp_path / "service-runs")
    proc = subprocess.Popen([sys.executable, str(SERVICE), "serve", "120"], env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("ready"), line
    _, pid, path = line.split()
    yield proc, int(pid), Path(path), env
    proc.kill()
    proc.wait(30)


def test_a_running_process_is_armed_from_the_cli_and_its_runs_are_printed(service):
    proc, pid, path, env = service
    assert path == env_dir(env) / f"{pid}.sock"
    out = _cli(env, "arm", str(pid), "--calls", "2", "--name", "serve", "--timeout", "60", "--wait")
    assert out.returncode == 0, out.stderr
    dirs = [Path(line) for line in out.stdout.splitlines()]
    assert len(dirs) == 2
    assert f"armed pid {pid}: the next 2 call(s) of 'serve'" in out.stderr
    for d in dirs:
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["pid"] == pid
        assert manifest["trigger"]["kind"] == "arm" and "neuronscope arm" in manifest["trigger"]["reason"]
        assert (d / "summary.json").is_file()
        run = ns.load_run(d)
        assert run.trigger.kind == "arm" and any(r.name == "aten::mm" for r in run.summary.rows)
    assert proc.poll() is None  # the service never noticed


def test_wait_prints_absolute_run_directories_whatever_the_services_working_directory(ctl_dir, tmp_path):
    # the documented `neuronscope show "$(neuronscope arm PID --wait)"`, run from elsewhere
    svc_cwd, cli_cwd = tmp_path / "service", tmp_path / "elsewhere"
    svc_cwd.mkdir()
    cli_cwd.mkdir()
    env = _env(ctl_dir, Path("relative-runs"))  # the service's default kind: relative to its cwd
    proc = subprocess.Popen([sys.executable, str(SERVICE), "serve", "120"], env=env, stdout=subprocess.PIPE, text=True, cwd=svc_cwd)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready"), line
        pid = int(line.split()[1])
        out = subprocess.run(
            [sys.executable, "-m", "neuronscope", "arm", str(pid), "--name", "serve", "--timeout", "60", "--wait"],
            env=env, capture_output=True, text=True, timeout=120, cwd=cli_cwd,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        (printed,) = out.stdout.splitlines()
        assert Path(printed).is_absolute() and Path(printed).parent == svc_cwd / "relative-runs"
        shown = subprocess.run([sys.executable, "-m", "neuronscope", "show", printed], env=env, capture_output=True, text=True, timeout=120, cwd=cli_cwd)
        assert shown.returncode == 0 and "aten::mm" in shown.stdout, shown.stderr
    finally:
        proc.kill()
        proc.wait(30)


def test_list_shows_the_process_with_its_profiles_and_arming(service):
    proc, pid, path, env = service
    out = _cli(env, "arm", "--list")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:4] == ["PID", "SERVICE", "CALLS", "ARMED"]
    row = next(r for r in rows if r.split()[0] == str(pid))
    assert "_service.py" in row and "serve (" in row and " no " in row
    assert _cli(env, "arm", str(pid), "--name", "nothing-calls-this").returncode == 0
    listed = json.loads(_cli(env, "arm", "--list", "--json").stdout)
    mine = next(p for p in listed["processes"] if p["pid"] == pid)
    assert mine["profiles"]["serve"] > 0 and mine["armed"][0]["name"] == "nothing-calls-this"


def test_a_request_that_expires_makes_wait_fail_with_one_line(service):
    proc, pid, path, env = service
    out = _cli(env, "arm", str(pid), "--name", "never-called", "--timeout", "1", "--wait")
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()[-1:]
    assert "expired after 1 s with 0 of 1 call(s) profiled" in line


def env_dir(env: dict[str, str]) -> Path:
    return Path(env["NEURONSCOPE_CONTROL_DIR"])


def _open_channel() -> Path:
    @ns.profile_neuron(name="local", sample=0.0)
    def local(a):
        return a + 1

    local(torch.ones(2))
    path = control.current_path()
    assert path is not None and path.exists()
    return path


def _raw(path: Path, payload: bytes, *, timeout: float = 5.0, shut: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        try:
            s.sendall(payload)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before reading: the reply is there to read
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not chunk:
                break
            data += chunk
        return data


def test_directory_and_socket_are_private_and_other_users_are_refused(ctl_dir, monkeypatch):
    path = _open_channel()
    assert stat.S_IMODE(os.stat(ctl_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert os.stat(path).st_uid == os.geteuid()
    assert control.request(os.getpid(), {"op": "status"})["pid"] == os.getpid()
    monkeypatch.setattr(control, "_allowed_uids", lambda: {os.geteuid() + 12345})  # as if we were another user
    reply = json.loads(_raw(path, b'{"op": "arm", "calls": 1}\n'))
    assert reply == {"ok": False, "error": "permission denied: only the same user or root may use this channel"}
    assert arming.pending() == []


def test_a_directory_of_another_user_or_a_symlink_is_not_used(tmp_path, monkeypatch, caplog):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = Path(tempfile.mkdtemp(prefix="nsctl-", dir="/tmp")) / "ctl"
    link.symlink_to(target)
    try:
        monkeypatch.setenv("NEURONSCOPE_CONTROL_DIR", str(link))
        control.stop()
        control.settings_changed()
        with caplog.at_level("WARNING", logger="neuronscope"):
            _open_channel_or_none()
        assert control.current_path() is None
        assert "not a directory (a symlink or a file)" in caplog.text
        assert list(target.iterdir()) == []
    finally:
        control.stop()
        control.settings_changed()
        shutil.rmtree(link.parent, ignore_errors=True)


def _open_channel_or_none() -> None:
    @ns.profile_neuron(name="local2", sample=0.0)
    def local(a):
        return a + 1

    assert local(1) == 2  # the service carries on without the channel


def test_garbage_oversized_partial_hanging_and_floods_never_break_the_service(ctl_dir):
    path = _open_channel()
    cases = [
        b"\n",
        b"not json\n",
        b"\xff\xfe\x00garbage\n",
        b"[1, 2, 3]\n",
        b'{"op": 7}\n',
        b'{"op": "rm -rf"}\n',
        b'{"op": "arm", "calls": -1}\n',
        b'{"op": "arm", "calls": 1e308}\n',
        b'{"op": "arm", "calls": 1, "output_dir": "/etc"}\n',
        b'{"op": "arm", "calls": 1, "timeout_s": "NaN"}\n',
        b'{"op": "arm", "calls": 1, "name": "' + b"x" * 300 + b'"}\n',
        b'{"op": "poll", "id": "1"}\n',
        b'{"op": "poll", "id": 123456789}\n',
        b"{" * 5000,  # oversized, no newline
        b'{"op": "status"' + b" " * 5000 + b"}\n",  # oversized line
    ]
    for payload in cases:
        reply = json.loads(_raw(path, payload))
        assert reply["ok"] is False and reply["error"], payload[:40]
    import random

    rng = random.Random(18)
    for _ in range(40):  # random bytes, random lengths, with and without a newline
        payload = rng.randbytes(rng.choice([1, 7, 100, 4000, 4097, 9000]))
        if rng.random() < 0.5:
            payload += b"\n"
        reply = json.loads(_raw(path, payload) or b'{"ok": false, "error": "closed"}')
        assert reply["ok"] is False
        time.sleep(0.05)  # under the rate limit: each is answered on its merits
    assert arming.pending() == []
    # a name is only ever compared with profile names: it can hold anything printable
    reply = json.loads(_raw(path, b'{"op": "arm", "calls": 1, "name": "../../etc/passwd", "timeout_s": 5}\n'))
    assert reply["ok"] and reply["name"] == "../../etc/passwd"
    ns.disarm()

    # clients that connect and hang, or send half a request and stop, hold nothing up
    hanging = []
    for i in range(6):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(path))
        if i % 2:
            s.sendall(b'{"op": "sta')
        hanging.append(s)
    t0 = time.monotonic()
    assert control.request(os.getpid(), {"op": "status"}, timeout=5)["ok"]
    assert time.monotonic() - t0 < 1.5
    # and are answered with an error and closed after the client deadline
    hanging[1].settimeout(10)
    assert b"no complete request" in hanging[1].recv(1000)
    for s in hanging:
        s.close()

    # a flood: the excess is refused (rate limit, busy), the decorated function keeps running
    @ns.profile_neuron(name="busy", sample=0.0)
    def busy(a):
        return a * 2

    replies: list[bytes] = []

    def flood():
        for _ in range(60):
            try:
                replies.append(_raw(path, b'{"op": "status"}\n', timeout=5))
            except OSError:
                replies.append(b"")

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for t in threads:
        t.start()
    calls = 0
    while any(t.is_alive() for t in threads):
        assert busy(3) == 6
        calls += 1
    for t in threads:
        t.join()
    answered = [json.loads(r) for r in replies if r]
    assert any(r.get("ok") for r in answered)
    assert any("rate limited" in r.get("error", "") for r in answered)
    time.sleep(1.1)  # the rate limit refills
    assert control.request(os.getpid(), {"op": "status"})["ok"]
    assert calls > 0


def test_dead_pid_and_stale_socket_give_one_clear_line(ctl_dir, tmp_path):
    env = _env(ctl_dir, tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = _cli(env, "arm", str(dead.pid))
    assert out.returncode == 1 and out.stderr.strip() == f"neuronscope: error: no process with pid {dead.pid}"

    ctl_dir.mkdir(mode=0o700, exist_ok=True)
    stale = ctl_dir / f"{dead.pid}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # a socket file nobody listens on: what a killed process leaves
    out = _cli(env, "arm", str(dead.pid), "--wait")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"neuronscope: error: process {dead.pid} is not running (removed its stale control socket {stale})"
    )
    assert not stale.exists()

    # a live process whose socket file is stale (not listening)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = ctl_dir / f"{alive.pid}.sock"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(stale))
        s.close()
        out = _cli(env, "arm", str(alive.pid))
        assert out.returncode == 1 and "stale control socket" in out.stderr and len(out.stderr.strip().splitlines()) == 1
        os.unlink(stale)
        out = _cli(env, "arm", str(alive.pid))
        assert out.returncode == 1 and "has no neuronscope control channel" in out.stderr
    finally:
        alive.kill()
        alive.wait()


def test_a_forked_child_gets_its_own_channel_removed_at_its_exit(ctl_dir, tmp_path):
    env = _env(ctl_dir, tmp_path)
    out = subprocess.run([sys.executable, str(SERVICE), "fork"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["pid"] == facts["child_pid"]  # the child answered on its own socket
    assert facts["path"] == str(ctl_dir / f"{facts['child_pid']}.sock") and facts["exists"]
    assert not facts["child_socket_left"]  # removed when the child exited
    assert facts["parent_exists"] and facts["parent"] != facts["path"]
    assert list(ctl_dir.glob("*.sock")) == []  # and the parent's at its exit


def test_arming_a_disabled_process_fails_at_once(ctl_dir):
    _open_channel()
    ns.configure(enabled=False)
    try:
        with pytest.raises(control.ControlError, match="neuronscope is disabled in this process"):
            control.request(os.getpid(), {"op": "arm", "calls": 1})
    finally:
        ns.configure(enabled=True)
    assert arming.pending() == []


def test_control_false_opens_no_channel(ctl_dir):
    ns.configure(control=False)
    try:
        _open_channel_or_none()
        assert control.current_path() is None and not ctl_dir.exists()
        req = ns.arm(1, name="local2")  # in-process arming still works
        _open_channel_or_none()
        assert len(req.wait(30)) == 1
    finally:
        ns.configure(control=True)
    _open_channel()  # on again: opened by the next call


@pytest.mark.parametrize(
    "args, message",
    [
        (["arm"], "give the PID of the process to arm (or --list)"),
        (["arm", "--list", "123"], "--list takes no PID"),
        (["arm", "123", "--calls", "0"], "--calls"),
        (["arm", "123", "--timeout", "0"], "--timeout"),
        (["arm", "abc"], "PID"),
    ],
)
def test_arm_usage_errors_exit_2_with_one_line(args, message):
    from click.testing import CliRunner

    from neuronscope.cli import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert message in line and line.startswith("neuronscope arm: error:")
