"""The stderr tee a Neuron capture runs: native and Python writes to fd 2 reach the real
stderr in order, a copy is scanned, fd 2 is given back, and a crash loses nothing.

Each case runs in a fresh interpreter, because it redirects file descriptor 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")

PRELUDE = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from neuronscope.capture.devices.neuron import StderrTee
    log = Path(sys.argv[1])
    before = os.fstat(2)
    tee = StderrTee(log)
""")


def run(body: str, tmp_path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(tmp_path / "stderr.log")],
        capture_output=True, text=True, timeout=60, **kw,
    )


def test_everything_written_to_fd2_arrives_in_order_and_is_captured(tmp_path):
    proc = run("""
        print("python before", file=sys.stderr, flush=True)
        assert tee.start()
        os.write(2, b"native one\\n")
        print("python inside", file=sys.stderr, flush=True)
        os.write(2, b"Warning: 5 trace events were dropped during capture (stored 1 out of 6 total events).\\n")
        sys.stderr.write("unflushed python\\n")   # flushed by stop(), before fd 2 goes back
        captured = tee.stop()
        print("python after", file=sys.stderr, flush=True)
        after = os.fstat(2)
        print(json.dumps({"captured": captured, "log_left": log.exists(),
                          "fd2_back": (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert proc.stderr.splitlines() == [
        "python before",
        "native one",
        "python inside",
        "Warning: 5 trace events were dropped during capture (stored 1 out of 6 total events).",
        "unflushed python",
        "python after",
    ]
    assert out["captured"].splitlines() == proc.stderr.splitlines()[1:5]
    assert out["fd2_back"] and not out["log_left"]


def test_a_crash_while_teeing_loses_nothing(tmp_path):
    proc = run("""
        import signal
        assert tee.start()
        os.write(2, b"last words\\n")
        os.kill(os.getpid(), signal.SIGKILL)
    """, tmp_path)
    assert proc.returncode == -9
    assert "last words" in proc.stderr  # the tee is its own process: it forwards after we die


def test_a_child_holding_fd2_does_not_block_stop(tmp_path):
    proc = run("""
        import subprocess, time
        assert tee.start()
        child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(3); print('child late', file=sys.stderr)"])
        t0 = time.monotonic()
        tee.stop(timeout_s=0.5)
        waited = time.monotonic() - t0
        print("parent after", file=sys.stderr, flush=True)
        child.wait()
        print(json.dumps({"waited": waited}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["waited"] < 0.4  # the pipe was drained: no waiting for the child
    assert "child late" in proc.stderr and "parent after" in proc.stderr  # the child's output still arrives


def test_start_twice_and_stop_twice_are_harmless(tmp_path):
    proc = run("""
        assert tee.start() and tee.start()
        os.write(2, b"once\\n")
        first, second = tee.stop(), tee.stop()
        print(json.dumps([first, second]))
    """, tmp_path)
    assert json.loads(proc.stdout) == ["once\n", ""] and proc.stderr == "once\n"
