"""Span structure with the SDK's InMemorySpanExporter: parentage, timestamps, attributes, modes."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import StatusCode
from workloads import rmsnorm_naive

import neuronscope as ns


def _model(x, w, steps):
    with ns.region("forward"):
        for _ in range(steps):
            with ns.region("attn"):
                rmsnorm_naive(x, w)
            with ns.region("mlp"):
                (x @ w.new_ones(w.shape[0], 8)).relu()
    x.sum()


def _by_id(spans):
    return {s.context.span_id: s for s in spans}


def _assert_well_nested(spans):
    by_id = _by_id(spans)
    for s in spans:
        assert s.start_time <= s.end_time, s.name
        if s.parent is not None and s.parent.span_id in by_id:
            p = by_id[s.parent.span_id]
            assert p.start_time <= s.start_time and s.end_time <= p.end_time, (s.name, p.name)


def test_root_span_under_the_users_current_span(telemetry, xw):
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("HTTP POST /infer") as request:
        with ns.profile_neuron(name="infer") as run:
            _model(*xw, steps=3)
    spans = telemetry.finished()
    root = next(s for s in spans if s.name == "infer")
    assert root.parent.span_id == request.get_span_context().span_id
    assert root.context.trace_id == request.get_span_context().trace_id
    assert root.start_time == run.start_ns and root.end_time == run.end_ns
    assert root.attributes["neuronscope.device"] == "cpu"
    assert root.attributes["neuronscope.run.path"] == str(run.path.resolve())
    top = run.summary.top(1)[0]
    assert root.attributes["neuronscope.top_op.name"] == top.name
    assert root.attributes["neuronscope.top_op.device_pct"] == pytest.approx(top.device_pct)
    # The manifest links back to the trace.
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["otel"]["trace_id"] == format(root.context.trace_id, "032x")
    assert manifest["otel"]["span_id"] == format(root.context.span_id, "016x")


def test_summary_mode_is_aggregated_by_structure_not_loop_count(telemetry, xw):
    counts = {}
    for steps in (1, 25):
        with ns.profile_neuron(name=f"steps{steps}") as run:
            _model(*xw, steps=steps)
        spans = [s for s in telemetry.finished() if s.context.trace_id == _root(telemetry, f"steps{steps}").context.trace_id]
        counts[steps] = len(spans)
        _assert_well_nested(spans)
        s = run.summary
        bound = len(s.regions) * (len(s) + 1) + 1
        assert len(spans) <= bound
    assert counts[1] == counts[25]
    spans = [s for s in telemetry.finished() if s.context.trace_id == _root(telemetry, "steps25").context.trace_id]
    by_id = _by_id(spans)
    attn = next(s for s in spans if s.attributes.get("neuronscope.region.path") == "forward/attn")
    assert attn.attributes["neuronscope.region.occurrences"] == 25
    assert by_id[attn.parent.span_id].attributes["neuronscope.region.path"] == "forward"
    mul = next(s for s in spans if s.name == "aten::mul" and s.parent.span_id == attn.context.span_id)
    assert mul.attributes["neuronscope.op.calls"] == 50
    assert mul.attributes["neuronscope.aggregate"] is True
    for key in ("device_time_us", "self_device_time_us", "device_pct", "cpu_time_us"):
        assert f"neuronscope.op.{key}" in mul.attributes
    # Ops outside any region hang under the root.
    root = _root(telemetry, "steps25")
    assert any(s.name == "aten::sum" and s.parent.span_id == root.context.span_id for s in spans)


def _root(telemetry, name):
    return next(s for s in telemetry.spans.get_finished_spans() if s.name == name)


def test_events_mode_nests_real_occurrences_and_respects_the_cap(telemetry, xw):
    ns.configure(op_spans="events", max_spans=50)
    with ns.profile_neuron(name="deep") as run:
        _model(*xw, steps=20)
    spans = telemetry.finished()
    assert len(spans) == 50
    root = _root(telemetry, "deep")
    assert root.attributes["neuronscope.spans_dropped"] > 0
    _assert_well_nested(spans)
    occurrences = [s for s in spans if s.name == "attn"]
    assert len(occurrences) >= 2 and all(s.attributes["neuronscope.kind"] == "region" for s in occurrences)
    # Real timestamps: distinct occurrences, in time order, inside the run window.
    starts = [s.start_time for s in occurrences]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert all(run.start_ns <= s.start_time for s in spans)


def test_events_mode_without_cap_pressure_keeps_everything(telemetry, xw):
    ns.configure(op_spans="events", max_spans=100_000)
    with ns.profile_neuron(name="all"):
        _model(*xw, steps=2)
    spans = telemetry.finished()
    root = _root(telemetry, "all")
    assert root.attributes["neuronscope.spans_dropped"] == 0
    assert sum(1 for s in spans if s.name == "aten::rsqrt") == 2


def test_none_mode_is_the_root_only_with_top_ops(telemetry, xw):
    ns.configure(op_spans="none")
    with ns.profile_neuron(name="quiet") as run:
        _model(*xw, steps=2)
    spans = telemetry.finished()
    assert [s.name for s in spans] == ["quiet"]
    assert spans[0].attributes["neuronscope.top_ops"][0] == run.summary.top(1)[0].name


def test_user_exception_marks_the_root_and_still_propagates(telemetry, xw):
    @ns.profile_neuron(name="bad")
    def bad(x):
        x.sum()
        raise ValueError("shape mismatch: 3 != 4")

    with pytest.raises(ValueError, match="shape mismatch"):
        bad(xw[0])
    root = next(s for s in telemetry.finished() if s.name == "bad")
    assert root.status.status_code == StatusCode.ERROR
    event = root.events[0]
    assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
    assert "shape mismatch" in event.attributes["exception.message"]


def test_metrics_histograms_and_outcome_counters(telemetry, xw):
    for _ in range(3):
        with ns.profile_neuron(name="m"):
            rmsnorm_naive(*xw)
    ns.flush(30)
    points = telemetry.metric_points()
    unit, op_points = points["neuronscope.op.device_time"]
    assert unit == "s"
    mul = next(p for p in op_points if p.attributes["neuronscope.op.name"] == "aten::mul")
    assert mul.count == 3 and mul.attributes["neuronscope.device"] == "cpu"
    assert mul.attributes["neuronscope.profile.name"] == "m" and mul.sum > 0
    unit, dur = points["neuronscope.profile.duration"]
    assert unit == "s" and dur[0].count == 3
    _, calls = points["neuronscope.profile.calls"]
    assert {p.attributes["neuronscope.outcome"]: p.value for p in calls}["profiled"] >= 3


def test_strings_are_capped_and_no_tensor_values(telemetry, xw):
    long_name = "r" * 1000
    with ns.profile_neuron(name=long_name):
        with ns.region(long_name):
            rmsnorm_naive(*xw)
    for span in telemetry.finished():
        assert len(span.name) <= 256
        for value in span.attributes.values():
            if isinstance(value, str):
                assert len(value) <= 256
            assert "tensor(" not in str(value)


def test_suppressed_instrumentation_emits_nothing(telemetry, xw):
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        with ns.profile_neuron(name="hidden") as run:
            rmsnorm_naive(*xw)
    finally:
        detach(token)
    assert run.summary is not None
    assert telemetry.finished() == []


def test_global_provider_is_used_and_never_replaced(xw):
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    with ns.profile_neuron(name="noprovider") as run:
        rmsnorm_naive(*xw)
    ns.flush(30)
    assert "otel" not in run.manifest  # nothing configured, nothing sent
    assert trace.get_tracer_provider() is before


def test_bad_otel_configuration_fails_early():
    with pytest.raises(ValueError, match="op_spans"):
        ns.configure(op_spans="all")
    with pytest.raises(ValueError, match="max_spans"):
        ns.configure(max_spans=0)
    with pytest.raises(ValueError, match="exporter"):
        ns.configure(exporter="jaeger")
    with pytest.raises(ValueError, match="tracer_provider"):
        ns.configure(tracer_provider="not a provider")


def test_export_run_replays_a_saved_run_with_original_timestamps(telemetry, xw):
    ns.configure(tracer_provider=None, meter_provider=None, exporter="none")
    with ns.profile_neuron(name="offline") as run:
        _model(*xw, steps=2)
    ns.flush(30)
    assert "otel" not in run.manifest
    ns.configure(tracer_provider=telemetry.tracer_provider, exporter="auto")
    trace_id = ns.export_run(run.path)
    spans = telemetry.finished()
    root = next(s for s in spans if s.name == "offline")
    assert format(root.context.trace_id, "032x") == trace_id
    assert root.start_time == run.start_ns and root.end_time == run.end_ns
    assert any(s.attributes.get("neuronscope.region.path") == "forward/attn" for s in spans)


def test_system_profile_events_join_the_lanes(tmp_path):
    from neuronscope.sinks.otel.lanes import lane_aggregates, read_system_profile

    profile = tmp_path / "system_profile.json"
    profile.write_text(json.dumps({"events": [
        {"name": "nrt_execute", "timestamp": 1_000, "duration": 50, "group": "nrt-nc-000", "type": "x"},
        {"name": "nrt_execute", "timestamp": 2_000, "duration": 70, "group": "nrt-nc-000", "type": "x"},
        {"name": "nc_exec_running", "timestamp": 1_010, "duration": 30, "group": "neuron_hw/NC0:4", "type": "x"},
    ]}))
    events = read_system_profile(profile)
    trace = ns.load_trace(__import__("pathlib").Path(__file__).parents[1] / "data" / "emulated_neuron_rmsnorm.trace.json.gz")
    lanes = {(a.lane, a.name): a for a in lane_aggregates(trace, events)}
    assert lanes[("runtime", "nrt_execute")].count == 2 and lanes[("runtime", "nrt_execute")].total_ns == 120
    assert lanes[("hardware", "nc_exec_running")].count > 1  # trace markers + the system profile's
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    with pytest.raises(ns.TraceLoadError, match="not a Neuron system profile"):
        read_system_profile(bad)


def test_root_span_carries_the_diagnosis(telemetry, xw):
    x, w = xw
    with ns.profile_neuron(name="diagnosed") as run:
        for _ in range(5):
            rmsnorm_naive(x, w)
            ns.step()
    d = run.diagnosis
    root = next(s for s in telemetry.finished() if s.name == "diagnosed")
    assert root.attributes["neuronscope.bound_by"] == d.bound_by
    assert root.attributes["neuronscope.device_busy_pct"] == pytest.approx(d.device_busy_pct, abs=0.01)
    assert list(root.attributes["neuronscope.findings"]) == [f.rule for f in d.findings]
    assert root.attributes["neuronscope.steps"] == 5
    assert root.attributes["neuronscope.idle.host_wait_us"] == pytest.approx(d.idle_us_by_class["host_wait"], abs=0.01)
    events = [e for e in root.events if e.name == "neuronscope.finding"]
    assert [e.attributes["neuronscope.finding.rule"] for e in events] == [f.rule for f in d.findings][:10]
    assert "elementwise_chain" in root.attributes["neuronscope.findings"]


def test_memory_on_the_root_span_and_the_peak_metric(telemetry):
    """memory=True: the root span carries the peak and the growth, and neuronscope.memory.peak (By) is recorded."""
    import torch

    kept = []
    with ns.profile_neuron(name="mem", memory=True) as run:
        with ns.region("big"):
            kept.append(torch.ones(1 << 20))  # 4 MiB, held
    spans = telemetry.finished()
    root = next(s for s in spans if s.name == "mem")
    m = run.memory
    assert root.attributes["neuronscope.memory.peak_bytes"] == m.peak_bytes >= 4 << 20
    assert root.attributes["neuronscope.memory.growth_bytes"] == m.growth_bytes >= 4 << 20
    assert root.attributes["neuronscope.memory.peak_op"] == "aten::ones" and root.attributes["neuronscope.memory.peak_region"] == "big"
    unit, points = telemetry.metric_points()["neuronscope.memory.peak"]
    assert unit == "By"
    (p,) = points
    assert p.sum == m.peak_bytes and p.count == 1 and p.attributes["neuronscope.profile.name"] == "mem"
    # a run without memory=True carries none of it
    with ns.profile_neuron(name="plain"):
        torch.ones(8).sum()
    plain = next(s for s in telemetry.finished() if s.name == "plain")
    assert not any(k.startswith("neuronscope.memory.") for k in plain.attributes)
