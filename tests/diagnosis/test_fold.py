"""Folding windows (issue 27.2): the fold of two profiles' summaries is the summary of the two
traces together, and the folded diagnosis adds busy and idle time and keeps every window's verdict."""

from __future__ import annotations

import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.fold import TimedSteps, fold_diagnoses, fold_summaries
from neuronscope.analysis.summary import summarize
from neuronscope.trace.kineto import trace_from_kineto
from neuronscope.trace.model import Trace


def _window(steps: int, pause_s: float) -> Trace:
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function("step"):
                torch.tanh(x @ x) * 2
                time.sleep(pause_s)
    return trace_from_kineto(prof.profiler.kineto_results, device="cpu")


@pytest.fixture(scope="module")
def windows() -> list[Trace]:
    return [_window(5, 0.002), _window(8, 0.0), _window(3, 0.01)]


def test_the_folded_summary_is_the_summary_of_the_windows_together(windows):
    folded = fold_summaries([summarize(t) for t in windows])
    together = summarize(Trace.concat(windows))
    assert [r.name for r in folded.rows] == [r.name for r in together.rows]
    for a, b in zip(folded.rows, together.rows):
        assert a.calls == b.calls
        assert a.self_cpu_time_us == pytest.approx(b.self_cpu_time_us, abs=0.01)
        assert a.cpu_time_us == pytest.approx(b.cpu_time_us, abs=0.01)
        assert a.device_pct == pytest.approx(b.device_pct, abs=1e-6)
    assert folded["aten::mm"].calls == 16
    assert folded.regions["step"].region_stats.occurrences == together.regions["step"].region_stats.occurrences == 16
    assert folded.regions["step"]["aten::tanh"].calls == 16


def test_the_folded_diagnosis_adds_time_and_keeps_each_windows_verdict(windows):
    parts = [diagnose_trace(t, summary=summarize(t)) for t in windows]
    steps_us = [s.duration_us for d in parts for s in d.steps.per_step]
    d = fold_diagnoses(parts, timed=TimedSteps.of(steps_us), window_indexes=[1, 4, 9])
    assert d.device_busy_us == pytest.approx(sum(p.device_busy_us for p in parts))
    assert d.device_idle_us == pytest.approx(sum(p.device_idle_us for p in parts))
    assert d.device_busy_pct == pytest.approx(100 * d.device_busy_us / (d.device_busy_us + d.device_idle_us))
    assert sum(d.idle_us_by_class.values()) == pytest.approx(d.device_idle_us, rel=1e-6)
    assert [w["window"] for w in d.evidence["windows"]] == [1, 4, 9]
    assert [w["bound_by"] for w in d.evidence["windows"]] == [p.bound_by for p in parts]
    assert d.steps.count == 16 and d.steps.max_us == pytest.approx(max(steps_us))
    ordered = sorted(steps_us)
    assert ordered[7] <= d.steps.p50_us <= ordered[8]
    # the verdict of the sums: device-bound at >= 80 % busy, else the idle class that holds most
    top = max(d.idle_us_by_class, key=d.idle_us_by_class.get)
    expected = "device" if d.device_busy_pct >= 80 else {"host_wait": "host"}.get(top, top)
    assert d.bound_by == expected
    assert f"{d.device_busy_pct:.0f}%" in d.headline()[0]
    # a rule's time at stake over the run is its time over the windows where it fired
    for f in d.findings:
        fired = [x for p in parts for x in p.findings if x.rule == f.rule]
        assert f.us_at_stake == pytest.approx(sum(x.us_at_stake for x in fired))
        assert f.evidence["windows"] == len(fired)


def test_folding_is_associative_so_a_long_run_folds_each_window_as_it_ends(windows):
    """fold(fold(a, b), c) reads as fold(a, b, c): the running fold of issue 36 keeps one
    diagnosis and one summary, never every window's."""
    summaries = [summarize(t) for t in windows]
    parts = [diagnose_trace(t, summary=s) for t, s in zip(windows, summaries)]
    at_once = fold_diagnoses(parts, window_indexes=[1, 2, 3], summary=fold_summaries(summaries))
    running_summary = fold_summaries(summaries[:2])
    running = fold_diagnoses(parts[:2], window_indexes=[1, 2], summary=running_summary)
    running_summary = fold_summaries([running_summary, summaries[2]])
    running = fold_diagnoses([running, parts[2]], window_indexes=[0, 3], summary=running_summary)
    assert running.device_busy_us == pytest.approx(at_once.device_busy_us)
    assert running.idle_us_by_class == pytest.approx(at_once.idle_us_by_class)
    assert running.bound_by == at_once.bound_by
    assert running.evidence["recorded_steps"] == at_once.evidence["recorded_steps"] == 16
    assert running.evidence["windows_folded"] == 3 and [w["window"] for w in running.evidence["windows"]] == [1, 2, 3]
    assert running.steps.count == at_once.steps.count == 16
    key = lambda d: [(f.rule, f.subject, round(f.us_at_stake, 3), f.message, f.evidence["windows"]) for f in d.findings]  # noqa: E731
    assert key(running) == key(at_once)
    assert running.notes == at_once.notes
    assert [r.name for r in running_summary.rows] == [r.name for r in fold_summaries(summaries).rows]
