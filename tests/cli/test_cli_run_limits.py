"""`neuronscope run` limits and windows (issue 27.1, 27.2), in real processes: --duration,
--steps, --max-events stop recording and the run says so; --window-steps folds windows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    import neuronscope as ns
    x = torch.randn(32, 32)
    steps, at_least = 0, int(sys.argv[2]) if len(sys.argv) > 2 else 0
    t0 = time.time()
    while time.time() - t0 < float(sys.argv[1]) or steps < at_least:
        for _ in range(20):
            y = x @ x
        time.sleep(0.001)
        ns.step()
        steps += 1
    print("steps", steps)
    """
)


def _run(tmp_path: Path, seconds: float, *options: str, min_steps: int = 0) -> tuple[subprocess.CompletedProcess, dict]:
    """``neuronscope run [options] loop.py`` for ``seconds``, and at least ``min_steps`` steps."""
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    out = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "run", "-q", "--output-dir", str(out), *options, str(script), str(seconds), str(min_steps)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    manifest = json.loads((runs[0] / "manifest.json").read_text()) if runs else {}
    return proc, manifest


def _summary(manifest_dir: Path) -> dict:
    return json.loads((manifest_dir / "summary.json").read_text())


@pytest.mark.timing  # how many steps a script of fixed seconds makes depends on the load
@pytest.mark.parametrize(
    ("options", "stopped"),
    [(("--no-windows", "--steps", "5"), "steps"), (("--no-windows", "--duration", "0.5"), "duration"),
     (("--no-windows", "--max-events", "3000"), "budget")],
)
def test_a_limit_stops_recording_and_the_script_runs_on(tmp_path, options, stopped):
    # a budget's run does 400 steps at least, ~10,000 events: beside two busy processes a step
    # took ~26 ms, so 3 s held ~115 steps (~3,000 events) and the budget once never ended it
    proc, manifest = _run(tmp_path, 3.0, *options, min_steps=400 if stopped == "budget" else 0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    script_steps = int(proc.stdout.split("steps")[-1])
    cov = manifest["coverage"]
    assert cov["stopped"] == stopped and cov["steps"] == script_steps  # every step timed, recorded or not
    # the script ran on, unrecorded (said in steps: on a loaded machine a step of this loop took
    # 25-300 ms, so 5 recorded steps were once 1.8 s of a 3.2 s run)
    assert cov["recorded_steps"] < cov["steps"] and cov["recorded_ns"] < cov["wall_ns"]
    # a budget is watched between steps too (a window can end inside its first one: a step of
    # this loop beside two busy processes takes ~26 ms, half a watchdog poll); the others end at one
    assert cov["events"] > 0 and (stopped == "budget" or cov["recorded_steps"] > 0)
    if stopped == "duration":
        assert 0.5e9 <= cov["recorded_ns"] < cov["wall_ns"] / 2
    run_dir = next((tmp_path / "runs").iterdir())
    mm = next(r for r in _summary(run_dir)["rows"] if r["name"] == "aten::mm")
    # what was recorded, not the whole run (not "half of the steps": on a loaded machine the steps
    # after the stop, beside its processing, can be far slower than the recorded ones)
    assert 0 < mm["calls"] < 20 * script_steps
    if stopped == "steps":
        assert mm["calls"] == 20 * 5 and cov["recorded_steps"] == 5


@pytest.mark.timing
def test_window_steps_fold_the_windows_into_one_run(tmp_path):
    # at least 50 steps: two windows of 20 and part of a third, however slow the steps (beside
    # two busy processes the first 20 once took longer than the 4 s: one window, no coverage)
    proc, manifest = _run(tmp_path, 4.0, "--window-steps", "20", "--keep", "1", min_steps=50)
    assert proc.returncode == 0, proc.stderr[-2000:]
    script_steps = int(proc.stdout.split("steps")[-1])
    cov = manifest["coverage"]
    assert manifest["status"] == "complete" and cov["windows"] >= 2 and cov["steps"] == script_steps
    run_dir = next((tmp_path / "runs").iterdir())
    index = json.loads((run_dir / "windows.json").read_text())["windows"]
    assert all(row["steps"] <= 20 for row in index)
    mm = next(r for r in _summary(run_dir)["rows"] if r["name"] == "aten::mm")
    assert mm["calls"] == 20 * sum(row["steps"] for row in index)
    assert sorted(int(p.name) for p in (run_dir / "windows").iterdir()) == cov["kept"] and len(cov["kept"]) <= 2
    shown = subprocess.run([sys.executable, "-m", "neuronscope", "show", str(run_dir)], capture_output=True, text=True)
    shown_text = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and f"in {cov['windows']} windows (at most 20 steps each; ended by: its steps" in shown_text


def test_no_windows_with_a_window_option_is_a_usage_error(tmp_path):
    proc, _ = _run(tmp_path, 0.1, "--no-windows", "--window-steps", "5")
    assert proc.returncode == 2 and "--no-windows" in proc.stderr
