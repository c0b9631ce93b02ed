"""The roofline through the public API, the CLI and the sinks, on real CPU profiles.

The expected values are computed here from the shapes the test itself chose and the limits it
gave (or the CPU's measured ones, read back from the cache file), never by the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import neuronscope as ns
from neuronscope.analysis.diagnosis.model import finding_line
from neuronscope.analysis.diagnosis.rules import MessageContext, RunContext
from neuronscope.analysis.diagnosis.rules.roofline import roofline_findings
from neuronscope.analysis.fold import fold_summaries
from neuronscope.analysis.roofs import DeviceLimits
from neuronscope.analysis.summary import Summary, summarize
from neuronscope.capture.devices import cpu_limits as cl
from neuronscope.errors import ConfigurationError
from neuronscope.sinks.otel.spans import op_attributes
from neuronscope.trace.kineto import trace_from_kineto

N = 2048  # elementwise: 2048 x 2048 fp32 = 16 MiB in, 16 MiB out
M = 512  # matmul: 512^3, 2 * M^3 FLOPs


@pytest.fixture(autouse=True)
def _no_configured_limits():
    yield
    ns.configure(device_limits=None)


def _profile(calls: int = 3):
    x = torch.randn(N, N)
    a = torch.randn(M, M)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            x.mul(2.0)
            a @ a
    return trace_from_kineto(prof.profiler.kineto_results)


LIMITS = DeviceLimits("test", 20e9, {"matrix/fp32": 100e9, "vector/fp32": 100e9}, "the test", "")


def test_per_op_figures_follow_from_the_work_and_the_roofs():
    s = summarize(_profile(), limits=LIMITS)
    mul, mm = s["aten::mul"].roofline, s["aten::mm"].roofline
    # by hand: mul reads and writes N*N floats (the scalar is a wrapped 0-dim tensor: 8 bytes)
    assert mul.bytes == pytest.approx(3 * (2 * N * N * 4 + 8))
    assert mul.flops == 3 * N * N and mul.bound == "memory"
    assert mul.time_at_roof_us == pytest.approx(mul.bytes / 20e9 * 1e6)
    assert mul.pct_of_roof == pytest.approx(100 * mul.time_at_roof_us / mul.time_us)
    assert mul.achieved_bytes_per_s == pytest.approx(mul.bytes / (mul.time_us / 1e6))
    assert mm.flops == 3 * 2 * M**3 and mm.bytes == 3 * 3 * M * M * 4
    assert mm.intensity == pytest.approx(2 * M**3 / (3 * M * M * 4)) and mm.bound == "compute"
    assert mm.time_at_roof_us == pytest.approx(mm.flops / 100e9 * 1e6)
    assert mm.time_at_stake_us == pytest.approx(max(mm.time_us - mm.time_at_roof_us, 0))
    # the wrapper says where its work went; a view says it moves nothing; never a silent 0
    assert s["aten::matmul"].roofline is None and "wrapper" in s["aten::matmul"].work.reason
    assert s["aten::mm"].work.calls == 3 and s["aten::mm"].work.family == "gemm"


def test_this_cpus_roofs_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cl, "_cached", None)
    monkeypatch.setattr(cl, "_busy_seconds", lambda: 0.0)  # a quiet machine (the loaded case: next test)
    measured = cl.cpu_limits()
    path = cl.cache_path()
    assert path.parent == tmp_path and path.is_file()
    on_disk = json.loads(path.read_text())
    assert on_disk["memory_bandwidth"] == measured.memory_bandwidth > 1e9  # > 1 GB/s on any machine that runs torch
    assert on_disk["peak_flops"]["matrix/fp32"] == measured.peak_flops["matrix/fp32"] > 1e9
    assert f"{torch.get_num_threads()} threads" in measured.scope
    # a new process reads the file: nothing is measured again
    monkeypatch.setattr(cl, "_cached", None)
    monkeypatch.setattr(cl, "measure_cpu_limits", lambda **kw: pytest.fail("measured again"))
    assert cl.cpu_limits() == measured


def test_a_measurement_under_load_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cl, "_cached", None)
    ticks = iter([100.0, 100.0 + 50.0])  # other processes: 50 CPU-seconds in a ~2 s measurement
    monkeypatch.setattr(cl, "_busy_seconds", lambda: next(ticks))
    limits = cl.cpu_limits()
    assert limits.source.startswith("measured under load") and "not cached" in limits.source
    assert not cl.cache_path().exists()
    assert cl.cpu_limits() is limits  # this process keeps it; a new one measures again


@pytest.mark.usefixtures("one_intra_op_thread")  # beside two burners, 3 muls of 64 MiB on two threads took
# 415 ms, 2.3 % of the roof: each spun at its barrier for the pool thread's time slices (conftest)
def test_on_this_cpu_a_big_elementwise_op_is_memory_bound_and_a_big_matmul_compute_bound():
    with ns.profile_neuron(record_shapes=True) as run:
        x = torch.randn(4096, 4096)  # 64 MiB: far beyond any cache
        a = torch.randn(1024, 1024)
        for _ in range(3):
            x.mul(2.0)
            a @ a
    s = run.summary
    assert s.limits is not None
    if not s.limits.source.startswith("measured under load"):  # then read back from the cache file
        assert s.limits.memory_bandwidth == json.loads(cl.cache_path().read_text())["memory_bandwidth"]
    mul, mm = s["aten::mul"].roofline, s["aten::mm"].roofline
    assert mul.bound == "memory" and mm.bound == "compute"
    # plausible: a streaming multiply reaches a fair share of the bandwidth measured by a copy,
    # and a big matmul a fair share of the matmul peak (loose: a loaded 2-core machine)
    assert 3 <= mul.pct_of_roof <= 150, mul
    assert 10 <= mm.pct_of_roof <= 150, mm
    assert mul.achieved_bytes_per_s == pytest.approx(3 * 2 * 4096 * 4096 * 4 / (mul.time_us / 1e6), rel=0.01)


def test_configured_limits_win_and_bad_ones_say_what_to_change():
    ns.configure(device_limits={"memory_bandwidth": 1e12, "peak_flops": {"matrix/fp32": 1e15}})
    with ns.profile_neuron(record_shapes=True) as run:
        torch.randn(256, 256) @ torch.randn(256, 256)
    assert run.summary.limits.memory_bandwidth == 1e12
    rf = run.summary["aten::mm"].roofline
    assert rf.time_at_roof_us == pytest.approx(max(2 * 256**3 / 1e15, 3 * 256 * 256 * 4 / 1e12) * 1e6)
    ns.configure(device_limits="NVIDIA H100 SXM5")
    assert summarize(_profile(1)).limits.peak("matrix", "bf16") == 989.5e12
    for bad, words in (
        ({"peak_flops": {"matrix/fp32": 1e12}}, "memory_bandwidth"),
        ({"memory_bandwidth": 1e12, "peak_flops": {"tensor/fp32": 1e12}}, "unit/dtype"),
        ("NVIDIA RTX 9999", "known:"),
        (3.0, "DeviceLimits"),
    ):
        with pytest.raises(ConfigurationError, match=words):
            ns.configure(device_limits=bad)


def test_an_unknown_device_gets_no_roofline_and_one_line_saying_how():
    trace = _profile(1)
    from dataclasses import replace

    gpu = replace(trace, device="cuda", metadata={"deviceProperties": [{"name": "NVIDIA GeForce RTX 2080 Ti"}]})
    s = summarize(gpu)
    assert s.limits is None and all(r.roofline is None for r in s.rows)
    assert s["aten::mm"].work.flops == 2 * M**3  # the work is still known
    text = s.roofline_table()
    assert "unknown device" in text and "ns.configure(device_limits=" in text
    no_shapes = summarize(replace(trace, inputs={}))
    assert "record_shapes=True" in no_shapes.roofline_table()


def test_json_round_trip_and_folding_windows_add_the_work():
    s = summarize(_profile(2), limits=LIMITS)
    back = Summary.from_json(s.to_json())
    assert back.limits == s.limits
    assert back["aten::mm"].roofline == s["aten::mm"].roofline and back["aten::mm"].work == s["aten::mm"].work
    folded = fold_summaries([s, back])
    mm = folded["aten::mm"]
    assert mm.work.flops == 2 * s["aten::mm"].work.flops and mm.work.calls == 4
    assert mm.roofline.time_at_roof_us == pytest.approx(2 * s["aten::mm"].roofline.time_at_roof_us)
    assert mm.roofline.pct_of_roof == pytest.approx(s["aten::mm"].roofline.pct_of_roof)


def test_below_roof_shows_the_gap_to_the_roof_and_claims_only_what_a_peer_reaches(one_intra_op_thread):
    # roofs far above this CPU: every op is far below them. The gap to the roof is shown
    # (us_to_limit = time - time at roof), but alone it claims nothing: no op of the run does better
    ns.configure(device_limits={"memory_bandwidth": 1e13, "peak_flops": {"matrix/fp32": 1e15, "vector/fp32": 1e15}})
    with ns.profile_neuron(record_shapes=True) as run:
        x = torch.randn(N, N)
        for _ in range(5):
            x.mul(2.0)
    f = run.diagnosis.finding("below_roof")
    assert f is not None and f.evidence["op"] == "aten::mul" and f.evidence["bound"] == "memory"
    rf = run.summary["aten::mul"].roofline
    # on a contended CPU the claims leave out the thread's waiting for a core (runnable_share)
    share = f.evidence.get("runnable_share", 1.0)
    assert f.us_to_limit == pytest.approx((rf.time_us - rf.time_at_roof_us) * share, rel=1e-4)  # share: 6 digits
    assert f.us_at_stake == 0.0 and f.evidence["peer"] is None
    assert "aten::mul moves" in f.message and "% of memory bandwidth" in f.message
    assert "above the roof" in finding_line(f) and "at stake" not in finding_line(f)
    # beside an op that reaches a higher share of the same roof (mul streams; a fractional pow
    # computes a std::pow per element, several times slower), pow's claim is its work at mul's share
    with ns.profile_neuron(record_shapes=True) as run:
        for _ in range(5):
            x.mul(2.0)
            x.pow(2.5)
    slow, mul = run.summary["aten::pow"].roofline, run.summary["aten::mul"].roofline
    assert slow.pct_of_roof < mul.pct_of_roof
    f = next(f for f in run.diagnosis.findings if f.rule == "below_roof" and f.subject == "aten::pow")
    share = f.evidence.get("runnable_share", 1.0)
    expected = (slow.time_us - slow.time_at_roof_us / (mul.pct_of_roof / 100)) * share
    assert f.evidence["peer"] == "aten::mul" and f.us_at_stake == pytest.approx(expected, rel=1e-4)
    assert f.us_at_stake < f.us_to_limit == pytest.approx((slow.time_us - slow.time_at_roof_us) * share, rel=1e-4)
    # the same profile against roofs that put mul at 85 % of its roof: at the limit, no finding, a
    # note saying only less work helps; against roofs 3x below what it reached: above the roof,
    # which is no limit (its data sat in a faster level): neither a finding nor "at the limit"
    _, trace = _profile_with_trace(x)
    reached = summarize(trace, limits=LIMITS)["aten::mul"].roofline.achieved_bytes_per_s
    for share, at_limit in ((0.85, True), (3.0, False)):
        limits = DeviceLimits(name="test", memory_bandwidth=reached / share, peak_flops={"vector/fp32": 1e15})
        summary = summarize(trace, limits=limits)
        out = RunContext(device="cpu", words=MessageContext(1e9, 0))
        assert roofline_findings(summary, out) == []
        assert any("at the device's limit" in n and "aten::mul" in n for n in out.notes) is at_limit

    # roofs far below it: above them, so it ran against another roof: no finding, and not "at the
    # limit" either (tests/test_cache_roofs.py: an op between 70 % and its roof is)
    ns.configure(device_limits={"memory_bandwidth": 1e6, "peak_flops": {"matrix/fp32": 1e6, "vector/fp32": 1e6}})
    with ns.profile_neuron(record_shapes=True) as run:
        for _ in range(5):
            x.mul(2.0)
    assert run.diagnosis.finding("below_roof") is None
    rf = run.summary["aten::mul"].roofline
    assert rf.pct_of_roof > 1000 and not rf.at_limit and "faster than the device's memory bandwidth" in rf.above_roof
    assert not any("at the device's limit" in n and "aten::mul" in n for n in run.diagnosis.notes)


def _profile_with_trace(x: torch.Tensor):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(5):
            x.mul(2.0)
    return prof, trace_from_kineto(prof.profiler.kineto_results, device="cpu")


def test_spans_and_the_command_line_carry_the_roofline(tmp_path):
    ns.configure(device_limits={"memory_bandwidth": 20e9, "peak_flops": {"matrix/fp32": 100e9, "vector/fp32": 100e9}})
    with ns.profile_neuron(record_shapes=True, output_dir=tmp_path) as run:
        a = torch.randn(M, M)
        for _ in range(3):
            a @ a
    row = run.summary["aten::mm"]
    attrs = op_attributes(row)
    assert attrs["neuronscope.op.flops"] == 3 * 2 * M**3 and attrs["neuronscope.op.roof_pct"] == row.roofline.pct_of_roof
    path = run.path
    wide = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "neuronscope", "show", str(path), "--roofline"],
        capture_output=True,
        text=True,
        timeout=120,
        env=wide,
    )
    assert out.returncode == 0, out.stderr
    assert "aten::mm" in out.stdout and "% of roof" in out.stdout and "compute fp32" in out.stdout
    assert "roofs: test" not in out.stdout and "configured device" in out.stdout  # the limits the run was judged by
    out = subprocess.run(
        [sys.executable, "-m", "neuronscope", "show", str(path), "--json"], capture_output=True, text=True, timeout=120
    )
    data = json.loads(out.stdout)
    mm = next(o for o in data["ops"] if o["name"] == "aten::mm")
    assert mm["roofline"]["flops"] == 3 * 2 * M**3 and mm["work"]["family"] == "gemm"
    assert data["limits"]["memory_bandwidth"] == 20e9 and data["roofline"]["flops_pct"] > 0
