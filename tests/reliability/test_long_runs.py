"""Long runs in bounded memory (issue 27.1, 27.2): an event budget, limits, and windows folded
into one run — each checked in a real process, against what the process itself counted and
against the raw trace files it left, read here with json/gzip."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import neuronscope as ns

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")

LOOP = textwrap.dedent(
    """
    import json, sys, time, torch
    import neuronscope as ns

    out, seconds, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    m = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    options = {
        "budget": dict(max_events=40_000),
        "budget_all_threads": dict(max_events=40_000, all_threads=True),
        "duration": dict(max_seconds=1.0),
    }[mode]
    calls = 0
    with ns.profile_neuron(name="loop", output_dir=out, **options) as run:
        t0 = time.time()  # inside: the first profiler start of a process takes a while
        # a budget run makes a fixed amount of work (~10 events a call: several times the budget),
        # so what it records does not depend on how fast a loaded machine runs it
        until = 24_000 if mode.startswith("budget") else None
        while (calls < until) if until else (time.time() - t0 < seconds):
            m(x)
            calls += 1
    run.wait(120)
    cov = run.coverage
    print(json.dumps({
        "calls": calls,
        "linear": run.summary["aten::linear"].calls,
        "coverage": None if cov is None else cov.to_dict(),
        "warnings": run.warnings,
        "path": str(run.path),
    }))
    """
)


def _run_loop(tmp_path: Path, seconds: float, mode: str) -> dict:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs"), str(seconds), mode],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["budget", "budget_all_threads"])
def test_a_profile_stops_recording_at_its_event_budget_and_says_what_it_covers(tmp_path, mode):
    got = _run_loop(tmp_path, 4.0, mode)
    cov = got["coverage"]
    assert cov is not None and cov["stopped"] == "budget" and cov["max_events"] == 40_000
    # recording stopped near the budget (estimated while torch records, polled every 50 ms) ...
    assert 20_000 <= cov["events"] <= 3 * 40_000
    # ... and the program ran on unprofiled: most calls are not in the profile (counted in calls:
    # the share of time recorded depends on how fast a loaded machine ran each part of the loop)
    assert got["calls"] > 2 * got["linear"] > 0
    assert 0 < cov["recorded_ns"] < cov["wall_ns"]
    assert any("event budget of 40,000 events" in w for w in got["warnings"])
    manifest = json.loads((Path(got["path"]) / "manifest.json").read_text())
    assert manifest["coverage"]["stopped"] == "budget" and manifest["events"] == cov["events"]
    # the saved trace holds what was recorded: its linear ops are the summary's
    with gzip.open(Path(got["path"]) / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "aten::linear") == got["linear"]


def test_max_seconds_stops_recording_after_that_long(tmp_path):
    got = _run_loop(tmp_path, 6.0, "duration")  # torch's stop at the limit takes seconds under load
    cov = got["coverage"]
    assert cov["stopped"] == "duration"
    assert 0.8e9 <= cov["recorded_ns"] <= 1.6e9  # 1 s, polled every 50 ms
    assert got["calls"] > got["linear"] > 0


WINDOWED = textwrap.dedent(
    """
    import json, sys, time, torch
    import neuronscope as ns

    out, steps, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    x = torch.randn(64, 64)
    with ns.profile_neuron(name="train", output_dir=out, windows=ns.Windows(steps=10, keep=keep)) as run:
        for i in range(steps):
            for _ in range(3):
                y = x * 1.5
            time.sleep(0.002 if i % 50 else 0.03)  # every 50th step is slow
            ns.step()
    run.wait(120)
    d = run.diagnosis
    print(json.dumps({
        "mul": run.summary["aten::mul"].calls,
        "steps": d.steps.count,
        "max_step_us": d.steps.max_us,
        "coverage": run.coverage.to_dict(),
        "path": str(run.path),
        "status": run.status,
    }))
    """
)


def test_windows_fold_into_one_run_with_every_step_timed_and_the_slowest_traces_kept(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(WINDOWED)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs"), "300", "2"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    run_dir = Path(got["path"])
    index = json.loads((run_dir / "windows.json").read_text())["windows"]
    cov = got["coverage"]
    assert got["status"] == "complete" and cov["windows"] == len(index) >= 2
    # every step is timed, recorded or not; the slow ones are seen
    assert got["steps"] == 300 and got["max_step_us"] >= 25_000
    # each window records 10 steps of 3 muls (the last may be shorter); the fold adds them exactly
    assert got["mul"] == sum(3 * row["steps"] for row in index)
    assert cov["events"] == sum(row["events"] for row in index)
    # raw traces: the first window's and the 2 slowest, and nothing else
    kept = sorted(int(p.name) for p in (run_dir / "windows").iterdir())
    assert kept == cov["kept"] and 1 in kept and len(kept) <= 3
    for k in kept:
        with gzip.open(run_dir / "windows" / f"{k:04d}" / "trace.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        row = next(r for r in index if r["window"] == k)
        assert sum(1 for e in events if e.get("name") == "aten::mul") == 3 * row["steps"]
    # load_run and show read the folded run
    run = ns.load_run(run_dir)
    assert run.summary["aten::mul"].calls == got["mul"]
    assert run.coverage is not None and run.coverage.windows == cov["windows"]


BOUNDED = textwrap.dedent(
    """
    import sys, time, torch
    m = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    t0 = time.time()
    n = 0
    while time.time() - t0 < float(sys.argv[1]):
        m(x)
        n += 1
    print("done", n)
    """
)


def _peak_rss_under_run(tmp_path: Path, seconds: float) -> tuple[int, Path]:
    script = tmp_path / "long.py"
    script.write_text(BOUNDED)
    out = tmp_path / f"runs{seconds:g}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuronscope", "run", "-q", "--window-seconds", "0.5", "--output-dir", str(out), str(script), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
    assert b"done" in (proc.stdout.read() if proc.stdout else b"")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return usage.ru_maxrss * 1024, run_dir


def test_a_long_script_under_neuronscope_run_finishes_in_bounded_memory(tmp_path):
    short, _ = _peak_rss_under_run(tmp_path, 3)
    long, run_dir = _peak_rss_under_run(tmp_path, 12)
    # four times as long, about the same peak: memory is bounded by a window, not the run
    assert long < 1.35 * short, (short >> 20, long >> 20)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["coverage"]["windows"] >= 4
    assert 10e9 <= manifest["coverage"]["wall_ns"] <= 30e9
    run = ns.load_run(run_dir)
    assert run.summary["aten::addmm"].calls > 0 and run.diagnosis is not None


KILLED = textwrap.dedent(
    """
    import sys, time, torch
    import neuronscope as ns
    x = torch.randn(64, 64)
    with ns.profile_neuron(name="victim", output_dir=sys.argv[1], windows=ns.Windows(steps=5, keep=1)):
        while True:
            y = x @ x
            time.sleep(0.002)
            ns.step()
    """
)


def _victim_with_windows(tmp_path: Path, windows: int) -> subprocess.Popen:
    """The KILLED script, running, once ``windows`` windows are in its windows.json."""
    script = tmp_path / "victim.py"
    script.write_text(KILLED)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while True:
        index = list(out.glob("*/windows.json"))
        if index and len(json.loads(index[0].read_text())["windows"]) >= windows:
            return proc
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("no windows were written")
        time.sleep(0.05)


def test_a_windowed_run_killed_mid_way_keeps_its_finished_windows(tmp_path):
    out = tmp_path / "runs"
    proc = _victim_with_windows(tmp_path, 3)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # as the OOM killer does
    finally:
        proc.wait(30)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    run = ns.load_run(run_dir)
    assert run.status == "incomplete"
    done = json.loads((run_dir / "windows.json").read_text())["windows"]
    assert run.summary["aten::mm"].calls >= sum(r["steps"] for r in done[:3]) > 0
    assert (run_dir / "windows" / "0001" / "trace.json.gz").is_file()


def test_sigterm_mid_way_writes_the_folded_run_and_exits_143(tmp_path):
    out = tmp_path / "runs"
    proc = _victim_with_windows(tmp_path, 2)
    try:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # a Kubernetes pod being stopped
        proc.wait(30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143
    assert took < 15  # within NEURONSCOPE_EXIT_FLUSH_TIMEOUT (10 s) and the interpreter's exit
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["coverage"]["windows"] >= 2
    assert any("stopped by SIGTERM" in w for w in manifest["warnings"])
    run = ns.load_run(run_dir)
    assert run.summary["aten::mm"].calls > 0 and run.diagnosis.steps.count > 0


NEURON_WINDOWS = textwrap.dedent(
    """
    import json, sys, time, torch
    import neuronscope as ns
    from neuronscope.testing import install_emulated_neuron

    install_emulated_neuron()
    x = torch.randn(64, 64)
    with ns.profile_neuron(name="nw", device="neuron", output_dir=sys.argv[1], windows=ns.Windows(steps=5, keep=1)) as run:
        for _ in range(30):
            y = x @ x
            time.sleep(0.01)
            ns.step()
    run.wait(120)
    print(json.dumps({"status": run.status, "device": run.device, "coverage": run.coverage.to_dict(),
                      "mm": run.summary["aten::mm"].calls, "path": str(run.path)}))
    """
)


def test_windows_on_the_emulated_neuron_device(tmp_path):
    # TorchNeuron's exporter saves each window's Kineto trace itself (Kineto saves once): the
    # kept windows' traces are written from the trace model instead
    script = tmp_path / "nw.py"
    script.write_text(NEURON_WINDOWS)
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_RT_INSPECT_ENABLE", "TORCH_NEURONX_NEFF_CACHE_DIR")}
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "failed" not in out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "complete" and got["device"] == "neuron" and got["coverage"]["windows"] >= 2
    run_dir = Path(got["path"])
    index = json.loads((run_dir / "windows.json").read_text())["windows"]
    assert got["mm"] == sum(row["steps"] for row in index)
    for k in got["coverage"]["kept"]:
        with gzip.open(run_dir / "windows" / f"{k:04d}" / "trace.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        assert sum(1 for e in events if e.get("name") == "aten::mm") == next(r["steps"] for r in index if r["window"] == k)
