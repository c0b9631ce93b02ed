"""The real OTLP exporters (HTTP and gRPC) against a real receiver on 127.0.0.1, including
dead, slow and failing endpoints: telemetry problems never reach the caller."""

from __future__ import annotations

import time

import pytest
from support.otlp_receiver import OtlpReceiver
from workloads import rmsnorm_naive

import neuronscope as ns


def _profiled_calls(x, w, n):
    @ns.profile_neuron(name="serve")
    def serve(a):
        with ns.region("decode"):
            return rmsnorm_naive(a, w)

    latencies, results = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        results.append(serve(x))
        latencies.append(time.perf_counter() - t0)
    return latencies, results


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_spans_and_metrics_arrive_over_otlp(protocol, xw, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf" if protocol == "http" else "grpc")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "llm-api")
    with OtlpReceiver(protocol) as rx:
        ns.configure(exporter="otlp", otlp_endpoint=rx.endpoint)
        _profiled_calls(*xw, n=2)
        assert ns.flush(30)
        spans = rx.wait_for_spans(4, timeout=10)
        roots = [s for s in spans if s["name"] == "serve"]
        assert len(roots) == 2
        root = roots[0]
        assert root["resource"]["service.name"] == "llm-api"
        assert root["attributes"]["neuronscope.device"] == "cpu"
        region = next(s for s in spans if s["name"] == "decode" and s["trace_id"] == root["trace_id"])
        assert region["parent_span_id"] == root["span_id"]
        assert root["start_time_unix_nano"] <= region["start_time_unix_nano"] <= region["end_time_unix_nano"]
        assert region["end_time_unix_nano"] <= root["end_time_unix_nano"]
        mul = next(s for s in spans if s["name"] == "aten::mul" and s["parent_span_id"] == region["span_id"])
        assert mul["attributes"]["neuronscope.op.calls"] == 2
        # Metrics: ns.flush() forces the periodic reader out.
        metrics = rx.wait_for_metrics(1, timeout=10)
        names = {m["name"] for m in metrics}
        assert {"neuronscope.op.device_time", "neuronscope.profile.duration", "neuronscope.profile.calls"} <= names


def test_missing_exporter_package_gives_an_install_hint(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("opentelemetry.exporter.otlp") else real(name, *a)
    )
    with pytest.raises(ValueError, match=r"neuronscope\[otlp\]"):
        ns.configure(exporter="otlp")
