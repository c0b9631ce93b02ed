"""Kineto's ``USDT: ... profiler_start`` / ``profiler_stop`` stderr lines: dropped around
neuronscope's own starts and stops by default, kept on request, every other line kept.

Real profiles in a child process: the lines are written by C++ to file descriptor 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from neuronscope.capture.usdt import filter_usdt

SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, torch
    import neuronscope as ns
    from torch.profiler import ProfilerActivity, profile
    if sys.argv[1] == "keep":
        ns.configure(keep_usdt_lines=True)
    print("user: before", file=sys.stderr, flush=True)
    with ns.profile_neuron(name="outer"):
        with ns.profile_neuron(name="inner"):  # nested: the outer session stops and resumes
            torch.ones(4).sum()
        os.write(2, b"user: inside (fd 2)\\n")
    ns.flush(30)
    if sys.argv[2] == "app":
        with profile(activities=[ProfilerActivity.CPU]):  # the application's own profiler
            torch.ones(4).sum()
    print("user: after", file=sys.stderr, flush=True)
    """
)


def _stderr(mode: str, app: bool = False, env: dict[str, str] | None = None, tmp_path=None) -> list[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NEURONSCOPE_KEEP_USDT", "KINETO_LOG_LEVEL")}
    full_env.update(env or {}, NEURONSCOPE_OUTPUT_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, "app" if app else "-"], capture_output=True, text=True, timeout=300, env=full_env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr.splitlines()


def _usdt(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("USDT:") and ln.rsplit("] ", 1)[-1] in ("profiler_start", "profiler_stop")]


@pytest.fixture(scope="module")
def torch_prints_usdt(tmp_path_factory) -> None:
    """Only meaningful where this torch prints the lines at all (Kineto builds without them exist)."""
    code = "import torch\nfrom torch.profiler import profile\nwith profile(): torch.ones(2).sum()\n"
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env).stderr
    if not _usdt(err.splitlines()):
        pytest.skip("this torch prints no USDT profiler_start/stop lines")


def test_default_drops_the_lines_and_keeps_every_other_in_order(torch_prints_usdt, tmp_path):
    lines = _stderr("default", tmp_path=tmp_path)
    assert _usdt(lines) == []
    assert [ln for ln in lines if ln.startswith("user:")] == ["user: before", "user: inside (fd 2)", "user: after"]


def test_keep_usdt_lines_keeps_them(torch_prints_usdt, tmp_path):
    lines = _stderr("keep", tmp_path=tmp_path)
    # outer start, (cut) stop, inner start, stop, (resume) start, stop: one pair per session
    assert [ln.rsplit("] ", 1)[-1] for ln in _usdt(lines)] == ["profiler_start", "profiler_stop"] * 3
    env_lines = _stderr("default", env={"NEURONSCOPE_KEEP_USDT": "1"}, tmp_path=tmp_path)
    assert len(_usdt(env_lines)) == 6


def test_the_applications_own_profiler_is_left_alone(torch_prints_usdt, tmp_path):
    lines = _stderr("default", app=True, tmp_path=tmp_path)
    assert [ln.rsplit("] ", 1)[-1] for ln in _usdt(lines)] == ["profiler_start", "profiler_stop"]
    assert lines.index(_usdt(lines)[0]) > lines.index("user: inside (fd 2)")


def test_the_filter_drops_only_the_start_and_stop_lines():
    data = (
        b"USDT:2026-01-05 10:15:00 42:42 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        b"ERROR:2026-01-05 10:15:00 42:42 CuptiActivityProfiler.cpp:1] something real\n"
        b"USDT:2026-01-05 10:15:00 42:42 Other.cpp:9] some_other_probe\n"
        b"user text mentioning ] profiler_stop\n"
        b"USDT:2026-01-05 10:15:00 42:42 SyncActivityProfilerHandler.cpp:59] profiler_stop\r\n"
        b"partial line without newline"
    )
    assert filter_usdt(data) == (
        b"ERROR:2026-01-05 10:15:00 42:42 CuptiActivityProfiler.cpp:1] something real\n"
        b"USDT:2026-01-05 10:15:00 42:42 Other.cpp:9] some_other_probe\n"
        b"user text mentioning ] profiler_stop\n"
        b"partial line without newline"
    )
    assert filter_usdt(b"plain\n") == b"plain\n"


def test_keep_usdt_lines_is_validated():
    import neuronscope as ns

    with pytest.raises(ns.ConfigurationError, match="keep_usdt_lines"):
        ns.configure(keep_usdt_lines="yes")
