"""SIGTERM ends the profile in flight and writes it before the process exits (issue 27.4):
real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import neuronscope as ns

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

VICTIM = textwrap.dedent(
    """
    import os, signal, sys, time, torch
    import neuronscope as ns

    out, mode = sys.argv[1], sys.argv[2]
    if mode == "own-handler":  # the program's handler, installed before neuronscope's
        def on_term(signum, frame):
            open(os.path.join(out, ".handler-ran"), "w").close()
            sys.exit(7)
        signal.signal(signal.SIGTERM, on_term)

    x = torch.randn(64, 64)
    with ns.profile_neuron(name="served", output_dir=out):
        deadline = time.monotonic() + 120
        served = 0
        while time.monotonic() < deadline:  # a service that is told to stop
            x = torch.tanh(x @ x)
            time.sleep(0.001)
            served += 1
            if served == 20:  # some work recorded, however slowly a loaded machine ran it
                print("started", flush=True)
    print("never", flush=True)
    """
)


def _run_and_terminate(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, float, Path]:
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    out = tmp_path / "runs"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(out), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(60)
    return proc, time.monotonic() - t0, out


def _the_run(out: Path):
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return ns.load_run(run_dir)


def test_sigterm_writes_the_profile_in_flight_then_exits_143(tmp_path):
    proc, took, out = _run_and_terminate(tmp_path, "default")
    assert proc.returncode == 143  # what a shell reports for SIGTERM
    assert took < 15  # NEURONSCOPE_EXIT_FLUSH_TIMEOUT (10 s) bounds the write
    run = _the_run(out)
    assert run.status == "complete" and run.error is None
    assert any("stopped by SIGTERM" in w for w in run.warnings)
    assert run.summary is not None and run.summary["aten::mm"].calls > 10
    assert run.trace is not None


def test_the_programs_own_handler_still_runs_after_the_profile_is_written(tmp_path):
    proc, _, out = _run_and_terminate(tmp_path, "own-handler")
    assert proc.returncode == 7 and (out / ".handler-ran").exists()
    run = _the_run(out)
    assert run.status == "complete" and run.summary is not None and run.summary["aten::mm"].calls > 10
