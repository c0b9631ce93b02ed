"""``Windows(overhead=...)``: what the windows add to a run is measured, reported, and bounded
(issue 36.2). A real training loop (optimizer steps are the steps) profiled in windows of 3
steps, once without a bound and once with a tight one: the bound must leave pauses of untouched
steps between windows (the baseline the cost is measured against), record fewer steps, and the
run must say what neuronscope added."""

from __future__ import annotations

import json
import time

import pytest
import torch

import neuronscope as ns
from neuronscope.capture.budget import Overhead


def _train(out, overhead: float | None, steps: int = 300):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128)
    windows = ns.Windows(steps=3, keep=0, overhead=overhead)
    with ns.profile_neuron(name=f"ov{overhead}", output_dir=out, device="cpu", windows=windows) as run:
        for _ in range(steps):
            time.sleep(0.002)  # the step's data: the loop lasts long enough for windows to follow each other
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    assert run.wait(120) and run.path is not None, run
    return run, json.loads((run.path / "windows.json").read_text())


@pytest.mark.timing  # the bound bites on measured step times. Beside another test process and two
# burners the bounded run once measured 0 added and recorded as many steps as the free run (84 of
# 120 each): its baseline was 5 untouched steps of a slow spell (steps of 64 ms there), taken once
# for the run, after which it paused only for the analysis. Each pause now takes its own baseline
# (tests/test_budget.py::test_each_pause_of_a_bounded_run_holds_its_own_baseline_steps).
def test_a_tight_bound_pauses_between_windows_and_says_what_it_cost(tmp_path):
    # 120 steps: ~40 windows of 3 without a bound, each waiting for the last one's analysis (300
    # steps took 120-181 s of the suite)
    free, free_rows = _train(tmp_path / "free", None, steps=120)
    bound, bound_rows = _train(tmp_path / "bound", 0.05, steps=120)
    for run in (free, bound):
        cov = run.coverage
        assert cov is not None and cov.steps == 120
        assert cov.overhead_basis in ("steps", "stops and analysis") and cov.overhead_ns >= 0
        assert "neuronscope added" in cov.line()
    # without a bound a window starts as soon as the last is analysed; with one, recording waits
    assert bound.coverage.recorded_steps < free.coverage.recorded_steps
    assert len(bound_rows["windows"]) < len(free_rows["windows"])
    # every pause of the bounded run holds at least the untouched steps its baseline needs
    rows = sorted(bound_rows["windows"], key=lambda r: r["window"])
    assert all(b["start_ns"] > a["end_ns"] for a, b in zip(rows, rows[1:]))
    assert bound.coverage.steps - bound.coverage.recorded_steps >= Overhead.QUIET_NEEDED * (len(rows) - 1)


def test_the_figure_survives_the_run_directory(tmp_path):
    run, _ = _train(tmp_path, None, steps=30)
    loaded = ns.load_run(run.path)
    assert loaded.coverage is not None
    assert (loaded.coverage.overhead_ns, loaded.coverage.overhead_basis) == (run.coverage.overhead_ns, run.coverage.overhead_basis)


@pytest.mark.parametrize("bad", [0, -0.5, "a", True])
def test_a_bad_bound_is_a_clear_error(bad):
    with pytest.raises(ns.ConfigurationError, match="overhead"):
        ns.Windows(steps=3, overhead=bad)


def test_a_window_whose_analysis_waits_is_not_counted_as_time_taken_from_the_program(tmp_path, monkeypatch):
    # without steps the run's figure is torch's stops plus the windows' analysis: the analysis's
    # CPU time, not its wall time -- at its lower priority the analysis thread waits while the
    # program runs (a run slowed 1 % once said neuronscope added 87 % of its wall time)
    from neuronscope.capture import processing

    real = processing.analyse_segments
    started: list[float] = []

    def waits_then_analyses(*args, **kwargs):
        started.append(time.monotonic())
        time.sleep(1.0)  # a second the analysis thread waited, using no CPU
        return real(*args, **kwargs)

    monkeypatch.setattr(processing, "analyse_segments", waits_then_analyses)
    m, x = torch.nn.Linear(64, 64), torch.randn(8, 64)
    with ns.profile_neuron(name="waits", output_dir=tmp_path, device="cpu", windows=ns.Windows(seconds=0.3, keep=0)) as run:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            m(x)
            time.sleep(0.001)  # few events: a window's stop and analysis take milliseconds
        left = time.monotonic()
    assert run.wait(120) and run.coverage is not None
    waited = sum(1 for t in started if t < left)  # windows analysed while the program ran
    assert waited >= 1 and run.coverage.overhead_basis == "stops and analysis"
    assert run.coverage.overhead_ns < 0.5 * waited * 1e9, (run.coverage.overhead_ns, waited)
