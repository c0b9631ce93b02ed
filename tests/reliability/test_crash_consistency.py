"""A run directory is absent or readable at every instant (issue 27.3): a real process,
killed with a real SIGKILL while its run is being written, leaves a directory that
ns.load_run and `neuronscope show` read and call incomplete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import neuronscope as ns
from neuronscope.cli import cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    import neuronscope as ns
    from neuronscope.sinks import CallbackSink, add_sink

    stage = sys.argv[2]

    def hang(result):  # a sink that never returns: the run directory stays mid-write
        open(sys.argv[1] + "/.hanging", "w").close()
        time.sleep(600)

    if stage == "sinks":
        add_sink(CallbackSink(hang, name="hang"))
    with ns.profile_neuron(name="killed", output_dir=sys.argv[1]) as run:
        x = torch.randn(128, 128)
        for _ in range(20):
            x = torch.tanh(x @ x)
    print("summary", run.summary is not None, flush=True)
    time.sleep(600)  # killed before this returns
    """
)


def _start(tmp_path: Path, stage: str) -> subprocess.Popen:
    script = tmp_path / "victim.py"
    script.write_text(SCRIPT)
    out = tmp_path / "runs"
    out.mkdir()
    return subprocess.Popen([sys.executable, str(script), str(out), stage], stdout=subprocess.PIPE, text=True)


def _wait_for(predicate, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the victim never reached the point to kill it at"
        time.sleep(0.05)


def test_killed_while_its_sinks_run_the_directory_is_readable_and_incomplete(tmp_path):
    proc = _start(tmp_path, "sinks")
    try:
        _wait_for(lambda: (tmp_path / "runs" / ".hanging").exists())
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []  # no half-written file in view
    assert {"manifest.json", "summary.json", "trace.json.gz"} <= {p.name for p in run_dir.iterdir()}
    run = ns.load_run(run_dir)
    assert run.status == "incomplete" and any("incomplete run" in w for w in run.warnings)
    assert run.summary is not None and run.summary["aten::mm"].calls == 20
    assert run.trace is not None and len(run.trace) > 0  # the trace landed whole
    shown = CliRunner().invoke(cli, ["show", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "incomplete run" in shown.output and "aten::mm" in shown.output


def test_killed_right_after_the_summary_the_directory_is_absent_or_readable(tmp_path):
    proc = _start(tmp_path, "summary")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "summary True"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    for run_dir in [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]:
        run = ns.load_run(run_dir)  # never a directory that cannot be read
        assert run.status in ("complete", "incomplete")
        if run.status == "incomplete":
            assert any("incomplete run" in w for w in run.warnings)
