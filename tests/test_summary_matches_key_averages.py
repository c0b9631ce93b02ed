"""On the same real CPU profile, our summary equals torch's key_averages(): counts exactly,
times within 1%."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from neuronscope import summarize
from neuronscope.trace.kineto import trace_from_kineto

from workloads import rmsnorm_naive


def _workload(x, w, steps=30):
    with record_function("forward"):
        for _ in range(steps):
            with record_function("attn"):
                y = rmsnorm_naive(x, w)
            with record_function("mlp"):
                y = torch.nn.functional.gelu(y @ w.new_ones(w.shape[0], 16))
        # A same-named child that is its parent's only child is folded by torch.
        with record_function("fold"):
            with record_function("fold"):
                torch.ones(8).sum()
    return y


def _assert_matches(summary, prof):
    ka = {e.key: e for e in prof.key_averages()}
    assert len(summary) > 5
    for row in summary.rows:
        ref = ka[row.name]
        assert row.calls == ref.count, row.name
        assert row.cpu_time_us == pytest.approx(ref.cpu_time_total, rel=0.01, abs=0.01), row.name
        assert row.self_cpu_time_us == pytest.approx(ref.self_cpu_time_total, rel=0.01, abs=0.01), row.name
        # CPU profile: device time is CPU op time.
        assert row.self_device_time_us == row.self_cpu_time_us
    # Every op torch reports (regions aside) is in ours.
    ours = {r.name for r in summary.rows}
    regions = {p.rsplit("/", 1)[-1] for p in summary.regions}
    assert set(ka) - ours <= regions


def test_counts_and_times_match_key_averages(xw):
    x, w = xw
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _workload(x, w)
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    _assert_matches(summary, prof)
    assert summary["aten::mul"].calls == 60
    assert sum(r.device_pct for r in summary.rows) == pytest.approx(100.0)
    assert summary.rows == tuple(sorted(summary.rows, key=lambda r: -r.self_device_time_us))


def test_regions_are_nested_paths_with_their_own_summaries(xw):
    x, w = xw
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _workload(x, w, steps=7)
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    assert {"forward", "forward/attn", "forward/mlp", "forward/fold"} <= set(summary.regions)
    assert "forward/fold/fold" not in summary.regions  # folded like torch does
    attn = summary.regions["forward/attn"]
    assert attn.region_stats.occurrences == 7
    assert attn["aten::mul"].calls == 14
    assert "aten::gelu" not in attn and summary.regions["forward/mlp"]["aten::gelu"].calls == 7
    # A region's summary includes its nested regions.
    assert summary.regions["forward"]["aten::mul"].calls == 14
    ka = {e.key: e for e in prof.key_averages()}
    assert attn.region_stats.wall_time_us == pytest.approx(ka["attn"].cpu_time_total, rel=0.01)


def test_matches_with_ops_on_several_threads(xw):
    x, w = xw

    def worker():
        for _ in range(20):
            rmsnorm_naive(x, w)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        _workload(x, w, steps=5)
        for t in threads:
            t.join()
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    _assert_matches(summary, prof)
    # torch 2.13 records only the profiling thread's ops; whatever it records, we match.
    assert summary["aten::rsqrt"].calls == {e.key: e for e in prof.key_averages()}["aten::rsqrt"].count


def test_matches_key_averages_with_backward(xw):
    x, w = xw
    w = w.clone().requires_grad_(True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            rmsnorm_naive(x, w).sum().backward()
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    _assert_matches(summary, prof)
    assert any("Backward" in r.name for r in summary.rows)


def test_empty_profile_gives_empty_summary():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pass
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    assert len(summary) == 0 and summary.total_device_time_us == 0 and summary.regions == {}
