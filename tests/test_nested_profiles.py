"""Profiles inside profiles: the inner one gets a complete Run whose summary is ready when it
ends; the outer one still covers all its time, every op counted once (capture/session.py)."""

from __future__ import annotations

import threading

import pytest

import torch
from workloads import rmsnorm_naive

import neuronscope as ns
from neuronscope.capture import session


def _calls(summary, name: str) -> int:
    return summary[name].calls if name in summary else 0


def test_with_inside_with_inside_with_any_depth(xw):
    x, w = xw
    with ns.profile_neuron(name="a") as a:
        x.mul(2)
        with ns.profile_neuron(name="b") as b:
            x.mul(3)
            with ns.profile_neuron(name="c") as c:
                x.mul(4)
                x.mul(5)
            # c is summarised while b and a still record
            assert c.summary is not None and _calls(c.summary, "aten::mul") == 2
            x.mul(6)
        assert _calls(b.summary, "aten::mul") == 4
        x.mul(7)
    assert _calls(a.summary, "aten::mul") == 6  # 1 + (1 + 2 + 1) + 1: each op counted once
    assert set(a.summary.regions) == {"b", "b/c"}
    assert set(b.summary.regions) == {"c"}
    assert _calls(a.summary.regions["b"], "aten::mul") == 4
    assert _calls(a.summary.regions["b/c"], "aten::mul") == 2
    assert not session.open_captures() and not torch.autograd.profiler._is_profiler_enabled


def test_outer_totals_equal_the_sum_of_its_segments(xw):
    x, w = xw

    @ns.profile_neuron(name="step")
    def step(a):
        return rmsnorm_naive(a, w)

    inner_runs = []
    with ns.profile_neuron(name="outer") as outer:
        for _ in range(3):
            rmsnorm_naive(x, w)
            step(x)
            inner_runs.append(ns.last_run())
    outer.wait(30)
    assert outer.manifest["segments"] == 7  # before/inside/after each of the 3 inner calls
    # every op of the outer profile: its own 3 calls plus the 3 inner ones, once each
    for op in ("aten::rsqrt", "aten::pow", "aten::mean"):
        assert _calls(outer.summary, op) == 6
        assert sum(_calls(r.summary, op) for r in inner_runs) == 3
        assert _calls(outer.summary.regions["step"], op) == 3
    inner_total = sum(r.summary.total_device_time_us for r in inner_runs)
    assert outer.summary.regions["step"].total_device_time_us == pytest.approx(inner_total, rel=1e-12)
    assert outer.summary.regions["step"].region_stats.occurrences == 3


def test_a_region_open_across_a_nested_profile_stays_one_region(xw):
    x, w = xw

    @ns.profile_neuron(name="infer")
    def infer(a):
        return rmsnorm_naive(a, w)

    with ns.profile_neuron(name="outer") as outer:
        with ns.region("serve"):
            x.sum()
            infer(x)
            x.sum()
            infer(x)
            x.sum()
    serve = outer.summary.regions["serve"]
    assert serve.region_stats.occurrences == 1
    assert _calls(serve, "aten::sum") >= 3
    inner = outer.summary.regions["serve/infer"]
    assert inner.region_stats.occurrences == 2
    assert serve.region_stats.first_start_ns <= inner.region_stats.first_start_ns
    assert serve.region_stats.last_end_ns >= inner.region_stats.last_end_ns


def test_decorated_call_on_another_thread_nests_into_an_all_threads_profile(xw):
    x, w = xw
    seen = {}

    @ns.profile_neuron(name="worker_call")
    def work(a):
        return a.mul(5).sum()

    def thread_body():
        work(x)
        seen["run"] = ns.last_run()
        seen["summary"] = seen["run"].summary  # ready now, while the outer profile records

    with ns.profile_neuron(name="outer", all_threads=True) as outer:
        x.mul(1)
        t = threading.Thread(target=thread_body)
        t.start()
        t.join()
        x.mul(1)
    inner = seen["summary"]
    assert inner is not None and seen["run"].status != ns.RunStatus.SKIPPED
    assert _calls(inner, "aten::mul") == 1  # only its own thread's ops
    assert _calls(outer.summary, "aten::mul") == 3  # the outer one saw both threads
    assert "worker_call" in outer.summary.regions


def test_another_thread_under_a_thread_local_profile_runs_unprofiled_and_says_why(xw):
    x, w = xw
    box = {}

    def thread_body():
        with ns.profile_neuron(name="elsewhere") as r:
            x.sum()
        box["run"] = r

    with ns.profile_neuron(name="outer") as outer:
        t = threading.Thread(target=thread_body)
        t.start()
        t.join()
    r = box["run"]
    assert r.status == ns.RunStatus.SKIPPED and r.summary is None and not r.profiled
    assert "all_threads=True" in r.skip_reason
    assert outer.summary is not None
    assert ns.stats()["skipped"] == 1


def test_last_run_is_there_right_after_the_block(xw):
    x, w = xw
    with ns.profile_neuron(name="quick") as run:
        rmsnorm_naive(x, w)
    assert ns.last_run() is run  # not None while processing runs in the background

    @ns.profile_neuron(name="decorated")
    def f(a):
        return a.sum()

    f(x)
    last = ns.last_run()
    assert last is not None and last.name == "decorated"
    assert last.summary["aten::sum"].calls == 1


def test_an_outer_profile_holds_every_window_of_a_scheduled_profile_inside_it(xw):
    """torch clears a scheduled profile's events after each window: the outer one gets each
    window as it is ready (not only the last), and the last one once."""
    x, w = xw
    errors = ns.stats()["errors"]
    with ns.profile_neuron(name="outer", all_threads=True) as outer:  # as `neuronscope run` does
        x.mul(2)
        with ns.profile_neuron(
            name="train", schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2)
        ) as train:
            for i in range(12):
                with ns.region("forward"):
                    x.add(i)
                ns.step()
        x.mul(3)
    windows = train.windows
    assert len(windows) == 2 and all(_calls(wn.summary, "aten::add") == 3 for wn in windows)
    # 2 windows x 3 active steps; the wait and warm-up steps are not recorded by torch
    assert _calls(outer.summary, "aten::add") == 6
    assert _calls(outer.summary.regions["forward"], "aten::add") == 6
    assert _calls(outer.summary, "aten::mul") == 2
    assert ns.flush(60) and ns.stats()["errors"] == errors  # a schedule that ran its course is no error


def test_step_markers_in_a_plain_torch_profiler_reach_the_offline_diagnosis(xw, tmp_path):
    x, w = xw
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            x.mul(2)
            ns.step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    d = ns.diagnose(path)
    # no capture marker says where the first step began: the 3 steps between the 4 markers
    assert d.steps is not None and d.steps.source == "ns.step" and d.steps.count == 3
