"""Small hand-written traces for what the real-trace corpus (tests/real_traces) found: polls are
not syncs, async copies block only when the host waited, torch 1.8-era categories read, device
labels come from the trace, and an empty window gets no verdict. These run without the corpus."""

from __future__ import annotations

import json

from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.summary import summarize
from neuronscope.trace.chrome import parse_trace_bytes
from neuronscope.trace.kinds import EventKind


def _trace(events: list[dict], **top) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


def _op(name, ts, dur, ext, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {"External id": ext}}


def _rt(name, ts, dur, corr, ext, cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "External id": ext}}


def _kernel(name, ts, dur, corr, ext, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "External id": ext, "stream": 7}}


def _steps_with(call: str, *, copy_waited: bool = True) -> list[dict]:
    """10 steps: an op launches a kernel, then an op holding ``call`` (a poll, a sync or a copy);
    then 500 us of host time with the device idle."""
    events = []
    for i in range(10):
        t = i * 1000
        events += [_op("aten::mul", t, 20, 3 * i + 1), _rt("cudaLaunchKernel", t + 5, 10, 10 * i + 1, 3 * i + 1),
                   _kernel("mul_kernel", t + 20, 300, 10 * i + 1, 3 * i + 1)]
        events.append(_op("aten::copy_", t + 30, 320 if copy_waited else 20, 3 * i + 2))
        events.append(_rt(call, t + 35, 310 if copy_waited else 10, 10 * i + 2, 3 * i + 2))
        if "Memcpy" in call:
            events.append({**_kernel("Memcpy DtoH (Device -> Pageable)", t + 322, 20, 10 * i + 2, 3 * i + 2), "cat": "gpu_memcpy"})
    return events


def test_event_and_stream_queries_are_polls_not_syncs():
    for poll in ("cudaEventQuery", "cudaStreamQuery"):
        d = diagnose_trace(parse_trace_bytes(_trace(_steps_with(poll, copy_waited=False))))
        assert d.finding("sync_in_loop") is None, poll
        assert d.idle_us_by_class["sync"] == 0


def test_a_synchronize_in_every_step_is_a_sync():
    d = diagnose_trace(parse_trace_bytes(_trace(_steps_with("cudaStreamSynchronize"))))
    f = d.finding("sync_in_loop")
    assert f is not None and f.evidence["syncs"] == 10 and f.evidence["by_op"] == {"aten::copy_": 10}


def test_an_async_copy_blocks_only_when_the_host_waited_for_it():
    waited = diagnose_trace(parse_trace_bytes(_trace(_steps_with("cudaMemcpyAsync", copy_waited=True))))
    assert waited.finding("sync_in_loop") is not None and waited.finding("sync_in_loop").evidence["syncs"] == 10
    queued = diagnose_trace(parse_trace_bytes(_trace(_steps_with("cudaMemcpyAsync", copy_waited=False))))
    assert queued.finding("sync_in_loop") is None


def test_torch_1_8_categories_and_lowercase_external_id():
    events = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 1, "tid": "1", "ts": 0, "dur": 100, "args": {"External id": 1}},
        {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 1, "tid": "1", "ts": 5, "dur": 50, "args": {"External id": 2}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "1", "ts": 10, "dur": 5, "args": {"correlation": 9, "external id": 2}},
        {"ph": "X", "cat": "Kernel", "name": "volta_scudnn", "pid": 0, "tid": "stream 7", "ts": 20, "dur": 60, "args": {"correlation": 9, "external id": 2}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": "stream 7", "ts": 85, "dur": 5, "args": {"correlation": 10, "external id": 2}},
    ]
    trace = parse_trace_bytes(_trace(events))
    assert trace.device == "cuda"
    assert trace.count(EventKind.OP) == 1 and trace.count(EventKind.DEVICE) == 2 and trace.count(EventKind.REGION) == 1
    row = next(r for r in summarize(trace).rows if r.name == "aten::conv2d")
    assert row.device_time_us == 65.0  # both device events linked through "external id"
    assert diagnose_trace(trace).device_busy_pct > 0


def test_device_labels_come_from_the_trace():
    hip = [_op("aten::add", 0, 20, 1), _rt("hipLaunchKernel", 2, 5, 3, 1), _kernel("k", 10, 10, 3, 1)]
    assert parse_trace_bytes(_trace(hip)).device == "rocm"
    assert parse_trace_bytes(_trace(hip[:1] + [_rt("cudaLaunchKernel", 2, 5, 3, 1), hip[2]])).device == "cuda"
    # an accelerator we do not know by name: its lanes are named by process metadata, which may
    # come after the events
    mtia = [_op("aten::add", 0, 20, 1), _rt("launch", 2, 5, 3, 1, cat="mtia_runtime"),
            {"ph": "X", "cat": "mtia_ccp_events", "name": "pe_exe", "pid": 9, "tid": 3, "ts": 10, "dur": 50, "args": {}},
            {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "MTIA 9"}}]
    trace = parse_trace_bytes(_trace(mtia))
    assert trace.device == "mtia" and trace.count(EventKind.DEVICE) == 1
    d = diagnose_trace(trace)
    assert d.timeline == "device" and d.device_busy_pct > 50
    # without the metadata the same events are not device work
    assert parse_trace_bytes(_trace(mtia[:3])).device == "cpu"


def test_no_verdict_over_an_empty_window():
    d = diagnose_trace(parse_trace_bytes(_trace([{"ph": "i", "name": "x", "pid": 1, "tid": 1, "ts": 5}])))
    assert d.bound_by == "none" and d.window_us == 0
    assert "nothing was recorded" in str(d) and "bound" not in str(d).split("\n")[0]


def test_a_fused_or_wrapping_optimizer_is_not_called_single_tensor():
    def step(opt: str, t: int, inner: str | None = None) -> list[dict]:
        events = [{**_op(f"Optimizer.step#{opt}.step", t, 100, 1, cat="user_annotation")}]
        if inner:
            events.append({**_op(f"Optimizer.step#{inner}.step", t + 1, 98, 2, cat="user_annotation")})
        events += [_op(n, t + 5 + 10 * k, 5, 10 + k) for k, n in enumerate(["aten::add_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div"])]
        # on a GPU (foreach saves kernel launches there; a CPU-only run gets no such advice)
        return events + [_rt("cudaLaunchKernel", t + 6, 2, 900, 10), _kernel("add_kernel", t + 9, 2, 900, 10)]

    def finding(events):
        return diagnose_trace(parse_trace_bytes(_trace(events))).finding("optimizer_single_tensor")

    assert finding(step("SGD", 0)) is not None
    assert finding(step("FusedAdam", 0)) is None
    wrapped = finding(step("CombinedOptimizer", 0, inner="Adam"))
    assert wrapped is not None and wrapped.evidence["optimizers"] == ["Adam"]
