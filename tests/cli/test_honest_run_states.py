"""What a run is, said plainly: code that raised, a CPU run's (absent) Neuron files, a damaged trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import neuronscope as ns
from neuronscope.report.html import render_html


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuronscope", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def raised(tmp_path):
    with pytest.raises(ValueError, match="bad batch"):
        with ns.profile_neuron(name="raised", output_dir=tmp_path) as run:
            torch.randn(64, 64) @ torch.randn(64, 64)
            raise ValueError("bad batch")
    assert run.wait(60)
    return run


def test_show_says_the_profiled_code_raised(raised):
    assert raised.status == "error" and raised.error == "ValueError"
    out = _cli("show", str(raised.path))
    assert out.returncode == 0, out.stderr
    assert "the profiled code raised ValueError: bad batch" in out.stdout
    assert "aten::mm" in out.stdout  # what ran before the exception is shown


def test_artifacts_of_a_cpu_run_reports_no_missing_device_capture(raised):
    out = _cli("artifacts", str(raised.path))
    assert out.returncode == 0, out.stderr
    assert "warm up first" not in out.stdout and "!" not in out.stdout
    assert "a cpu run: NEFF/NTFF files exist only for runs on Neuron" in out.stdout
    data = json.loads(_cli("artifacts", str(raised.path), "--json").stdout)
    assert data["problems"] == [] and data["groups"] == []


def test_the_report_of_a_run_whose_trace_is_damaged_says_so(raised):
    traces = list(raised.path.glob("trace.json*"))
    assert traces, sorted(p.name for p in raised.path.iterdir())
    data = traces[0].read_bytes()
    traces[0].write_bytes(data[: len(data) // 3])  # truncated, as a full disk leaves it
    page = render_html(ns.load_run(raised.path))
    assert "the saved trace could not be read" in page
    assert "profile with save_trace=True" not in page
    assert "aten::mm" in page  # the summary is still there, from summary.json


def test_an_unwritable_output_dir_is_said_once(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    script = (
        "import neuronscope as ns, torch\n"
        f"for _ in range(3):\n    with ns.profile_neuron(output_dir={str(blocker / 'runs')!r}) as run:\n"
        "        torch.randn(8) @ torch.randn(8)\n    run.wait(60)\n"
        "print(run.status, run.summary is not None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["complete", "True"]  # nothing the user computed is lost
    assert proc.stderr.count("cannot write run directories") == 1, proc.stderr


def test_off_a_terminal_lines_are_whole(tmp_path):
    # a CI log or -o FILE: no 80-column wrap, no op name cut to fit (two rows once read
    # "autograd::engine::eval…")
    lin = torch.nn.Linear(64, 64)
    with ns.profile_neuron(name="backward", output_dir=tmp_path) as run:
        lin(torch.randn(32, 64)).sum().backward()
    assert run.wait(60)
    long_names = [r.name for r in run.summary.rows if len(r.name) > 40]
    assert long_names
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "neuronscope", "show", str(run.path), "--top", "0"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    for name in long_names:
        assert any(line.startswith(name + " ") for line in out.stdout.splitlines()), name
    assert "…" not in out.stdout
    assert any(len(line) > 80 for line in out.stdout.splitlines())  # the verdict on one line
