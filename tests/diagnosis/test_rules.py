"""Each advisor rule on synthetic traces: it fires on its pattern, stays quiet on the control."""

from __future__ import annotations

import pytest
from builder import TraceBuilder

from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.summary import summarize


def _diag(b: TraceBuilder, **facts):
    trace = b.build()
    return diagnose_trace(trace, summary=summarize(trace), serial=1, facts=facts)


def _matmuls(device: str, dtype: str, shape=(64, 64)) -> TraceBuilder:
    b = TraceBuilder(device)
    b.window(0, 1000)
    for i in range(4):
        op = b.op("aten::mm", 10 + 200 * i, 20, inputs=([list(shape), list(shape)], [dtype, dtype]))
        b.launch(op, 12 + 200 * i, 5, kernel_at=40 + 200 * i, kernel_us=100, name="gemm")
    return b


def test_fp32_matmul_on_a_device_and_not_for_bf16_or_on_cpu():
    d = _diag(_matmuls("cuda", "float"))
    f = d.finding("fp32_matmul")
    assert f is not None and f.evidence["calls"] == 4 and f.us_at_stake == pytest.approx(200.0)  # half of 400 us
    assert "bfloat16" in f.message
    assert _diag(_matmuls("cuda", "c10::BFloat16")).finding("fp32_matmul") is None
    assert _diag(_matmuls("neuron", "float")).finding("fp32_matmul") is not None
    cpu = _matmuls("cpu", "float")
    assert _diag(cpu).finding("fp32_matmul") is None


def test_fp32_matmul_without_shapes_says_how_to_check():
    b = TraceBuilder("cuda")
    b.window(0, 100)
    op = b.op("aten::mm", 0, 10)
    b.launch(op, 1, 2, kernel_at=20, kernel_us=30)
    d = _diag(b)
    assert d.finding("fp32_matmul") is None
    assert any("record_shapes=True" in n for n in d.notes)


def test_unaligned_half_matmul_64x63_but_not_64x64():
    assert _diag(_matmuls("cuda", "c10::BFloat16", (64, 63))).finding("matmul_dims_unaligned") is not None
    assert _diag(_matmuls("cuda", "c10::BFloat16", (64, 64))).finding("matmul_dims_unaligned") is None
    assert _diag(_matmuls("cuda", "float", (64, 63))).finding("matmul_dims_unaligned") is None


def test_extra_copy_fill_then_copy_to_the_device():
    b = TraceBuilder("cuda")
    b.window(0, 1000)
    for i in range(3):
        b.op("aten::zeros", 100 * i, 10)
        op = b.op("aten::to", 100 * i + 12, 20)
        b.launch(op, 100 * i + 14, 5, kernel_at=100 * i + 40, kernel_us=10, name="Memcpy HtoD (Pageable -> Device)")
    f = _diag(b).finding("extra_copy")
    assert f is not None and f.evidence["copies"] == 3
    control = TraceBuilder("cuda")
    control.window(0, 100)
    op = control.op("aten::to", 12, 20)
    control.launch(op, 14, 5, kernel_at=40, kernel_us=10)
    assert _diag(control).finding("extra_copy") is None


def test_sync_in_loop_needs_at_least_three_syncs():
    def trace(n: int) -> TraceBuilder:
        b = TraceBuilder("cuda")
        b.window(0, 5000)
        t = 0
        for _ in range(n):
            op = b.op("aten::mul", t, 5)
            b.launch(op, t + 1, 2, kernel_at=t + 10, kernel_us=50)
            item = b.op("aten::item", t + 20, 45)
            b.runtime("cudaStreamSynchronize", t + 22, 40, item)
            t += 400
        return b

    assert _diag(trace(2)).finding("sync_in_loop") is None
    f = _diag(trace(5)).finding("sync_in_loop")
    assert f is not None and f.evidence["by_op"] == {"aten::item": 5}


def _sync_loop(host_gap_us: float, kernel_us: float, steps: int = 5) -> TraceBuilder:
    """A step: launch a kernel, read its value back (blocked until it finishes), then
    ``host_gap_us`` of Python before the next step's launch."""
    b = TraceBuilder("cuda")
    t = 0.0
    blocked = []
    for _ in range(steps):
        op = b.op("aten::mul", t, 5)
        b.launch(op, t + 1, 2, kernel_at=t + 10, kernel_us=kernel_us)
        done = t + 10 + kernel_us
        item = b.op("aten::item", t + 20, done - t - 20 + 3)
        b.runtime("cudaStreamSynchronize", t + 22, done - t - 22 + 1, item)
        blocked.append(done - t - 20 + 3)
        t = done + 3 + host_gap_us
    b.window(0, t)
    b.blocked_us = blocked  # type: ignore[attr-defined]
    return b


def test_a_sync_claims_what_letting_the_host_run_ahead_saves():
    # host-bound (Python after each read longer than the kernel): without the read the host
    # would not wait for the device, so it saves the time blocked; device-bound (the kernel
    # longer than the host's work): the device's idle, which is all that pipelining can fill
    host_bound = _sync_loop(host_gap_us=500, kernel_us=100)
    f = _diag(host_bound).finding("sync_in_loop")
    assert f is not None
    assert f.us_at_stake == pytest.approx(sum(host_bound.blocked_us), rel=0.01)  # type: ignore[attr-defined]
    assert f.us_at_stake < 0.5 * f.evidence["sync_idle_us"]
    device_bound = _sync_loop(host_gap_us=20, kernel_us=400)
    g = _diag(device_bound).finding("sync_in_loop")
    assert g is not None and g.us_at_stake == pytest.approx(g.evidence["sync_idle_us"])
    assert g.us_at_stake < g.evidence["host_time_in_syncs_us"]


def test_compile_in_window_boundaries():
    def trace(compile_us: float, window_us: float) -> TraceBuilder:
        b = TraceBuilder("cpu")
        b.window(0, window_us)
        b.op("aten::mul", 0, 10)
        b.region("_compile.compile_inner (dynamo_timed)", 20, compile_us)
        b.op("aten::mul", 20 + compile_us, 10)
        return b

    assert _diag(trace(999, 10_000)).finding("compile_in_window") is None  # under 1 ms
    assert _diag(trace(1500, 10_000)).finding("compile_in_window") is not None
    assert _diag(trace(1500, 100_000)).finding("compile_in_window") is None  # under 2 % of the window
    d = _diag(trace(5000, 10_000))
    assert d.bound_by == "compile" and d.idle_us_by_class["compile"] == pytest.approx(5010)  # the whole gap [10, 5020)


def neuron_trace(delay_us: float = 0.0, recompile: bool = False) -> TraceBuilder:
    b = TraceBuilder("neuron")
    b.window(0, 5000)
    for i in range(6):
        t = 600 * i
        op = b.op("aten::mul", t, 20)
        b.runtime("nrta_execute_schedule", t + 2, 10, op)
        neff = "111" if (not recompile or i < 3) else "222"
        b.kernel(f"neff_{neff}:mul", t + 12 + delay_us, 80, op)
        ann = b._add(3, "nc_exec_running", t + 12 + delay_us, 80, -9, corr=b.rows[op][5], linked=b.rows[op][5],
                     cat="gpu_user_annotation")
        del ann
    fallback = b.op("aten::nonzero_static", 4000, 300)  # no NeuronCore work, real host time
    del fallback
    return b


def test_neuron_rules():
    plain = _diag(neuron_trace())
    assert plain.finding("neuron_schedule_gap") is None and plain.finding("neuron_recompilation") is None
    f = plain.finding("neuron_cpu_fallback")
    assert f is not None and "aten::nonzero_static" in f.message
    late = _diag(neuron_trace(delay_us=120))
    g = late.finding("neuron_schedule_gap")
    assert g is not None and g.evidence["median_delay_us"] == pytest.approx(120.0) and g.evidence["executions"] == 6
    r = _diag(neuron_trace(recompile=True)).finding("neuron_recompilation")
    assert r is not None and r.evidence["neffs_per_op"] == {"mul": ["111", "222"]}


def test_neuron_explorer_findings_from_the_run_facts():
    explorer_finding = {
        "rule": "neuron_spill_reload_high", "message": "spill reloads are 30% of HBM reads: check data dependencies",
        "us_at_stake": 123.0, "evidence": {"spill_reload_pct": 30.0}, "severity": "high",
    }
    d = _diag(neuron_trace(), neuron={"explorer": {"findings": [explorer_finding]}})
    f = d.finding("neuron_spill_reload_high")
    assert f is not None and f.us_at_stake == 123.0 and f.evidence["spill_reload_pct"] == 30.0
