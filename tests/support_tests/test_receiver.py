"""OtlpReceiver against the real opentelemetry-sdk and the real OTLP exporters (HTTP and gRPC).

Everything runs on 127.0.0.1; every export is bounded by a short exporter timeout.
"""

from __future__ import annotations

import gzip
import threading
import time
import urllib.error
import urllib.request

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from tests.support.otlp_receiver import OtlpReceiver, dead_endpoint

PROTOCOLS = ["http", "grpc"]
T0 = 1_700_000_000_123_456_789  # explicit, nanosecond-exact start time


def span_exporter(protocol: str, endpoint_base: str, timeout: float = 5.0, **kw):
    """The real OTLP span exporter for `protocol`, pointed at a receiver base URL."""
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint_base + "/v1/traces", timeout=timeout, **kw)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint_base, insecure=True, timeout=timeout, **kw)


def metric_exporter(protocol: str, endpoint_base: str, timeout: float = 5.0):
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint_base + "/v1/metrics", timeout=timeout)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=endpoint_base, insecure=True, timeout=timeout)


def make_spans():
    """A parent/child pair with explicit start/end times, attributes, an event and a status."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "receiver-test", "host.id": "h1"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("neuronscope.test", "0.1")
    parent = tracer.start_span(
        "step", start_time=T0, attributes={"op": "matmul", "n": 3, "ratio": 0.5, "ok": True, "shape": [2, 3]}
    )
    child = tracer.start_span("kernel", context=set_span_in_context(parent), start_time=T0 + 1_000)
    child.add_event("launch", {"stream": 7}, timestamp=T0 + 2_000)
    child.set_status(Status(StatusCode.ERROR, "boom"))
    child.end(end_time=T0 + 5_001)
    parent.end(end_time=T0 + 10_000_000_007)
    provider.shutdown()
    return memory.get_finished_spans()  # (child, parent)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_spans_arrive_decoded(protocol, compression):
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http import Compression
    else:
        from grpc import Compression
    comp = {"none": Compression.NoCompression, "gzip": Compression.Gzip}[compression]
    with OtlpReceiver(protocol) as rx:
        exporter = span_exporter(protocol, rx.endpoint, compression=comp)
        assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
        spans = {s["name"]: s for s in rx.wait_for_spans(2, timeout=5)}
        assert rx.requests == 1
        if protocol == "http" and compression == "gzip":
            assert rx.request_log[0]["headers"].get("Content-Encoding") == "gzip"

    parent, child = spans["step"], spans["kernel"]
    assert parent["parent_span_id"] is None
    assert child["parent_span_id"] == parent["span_id"]
    assert child["trace_id"] == parent["trace_id"] and len(parent["trace_id"]) == 32
    assert len(parent["span_id"]) == 16
    # explicit timestamps intact, to the nanosecond
    assert (parent["start_time_unix_nano"], parent["end_time_unix_nano"]) == (T0, T0 + 10_000_000_007)
    assert (child["start_time_unix_nano"], child["end_time_unix_nano"]) == (T0 + 1_000, T0 + 5_001)
    assert parent["attributes"] == {"op": "matmul", "n": 3, "ratio": 0.5, "ok": True, "shape": [2, 3]}
    assert child["events"] == [{"name": "launch", "time_unix_nano": T0 + 2_000, "attributes": {"stream": 7}}]
    assert (child["status_code"], child["status_message"]) == ("ERROR", "boom")
    assert parent["status_code"] == "UNSET" and parent["kind"] == "INTERNAL"
    assert parent["resource"]["service.name"] == "receiver-test"
    assert parent["resource"]["host.id"] == "h1"
    assert (parent["scope"], parent["scope_version"]) == ("neuronscope.test", "0.1")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_metrics_arrive_decoded(protocol):
    with OtlpReceiver(protocol) as rx:
        reader = PeriodicExportingMetricReader(metric_exporter(protocol, rx.endpoint), export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "m-test"}))
        meter = provider.get_meter("neuronscope.test")
        counter = meter.create_counter("ns.steps", unit="1", description="steps")
        counter.add(3, {"device": "cpu"})
        counter.add(4, {"device": "cpu"})
        hist = meter.create_histogram("ns.step.duration", unit="ms")
        hist.record(5, {"device": "cpu"})
        hist.record(50, {"device": "cpu"})
        meter.create_gauge("ns.util", unit="1").set(0.75)
        assert provider.force_flush(timeout_millis=5_000)
        metrics = {m["name"]: m for m in rx.wait_for_metrics(3, timeout=5)}
        provider.shutdown()

    steps = metrics["ns.steps"]
    assert (steps["kind"], steps["unit"], steps["is_monotonic"], steps["temporality"]) == ("sum", "1", True, "CUMULATIVE")
    assert [(p["attributes"], p["value"]) for p in steps["data_points"]] == [({"device": "cpu"}, 7)]
    assert steps["resource"]["service.name"] == "m-test" and steps["scope"] == "neuronscope.test"

    dur = metrics["ns.step.duration"]
    assert (dur["kind"], dur["unit"]) == ("histogram", "ms")
    (point,) = dur["data_points"]
    assert (point["count"], point["sum"], point["min"], point["max"]) == (2, 55, 5, 50)
    assert sum(point["bucket_counts"]) == 2
    assert len(point["bucket_counts"]) == len(point["explicit_bounds"]) + 1
    # each value lands in the bucket whose upper bound is the first >= it
    bounds = point["explicit_bounds"]
    for v in (5, 50):
        assert point["bucket_counts"][next(i for i, b in enumerate(bounds) if v <= b)] >= 1

    util = metrics["ns.util"]
    assert util["kind"] == "gauge" and util["data_points"][0]["value"] == 0.75


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fail500_is_a_failure_not_retried(protocol):
    with OtlpReceiver(protocol, mode="fail500") as rx:
        exporter = span_exporter(protocol, rx.endpoint, timeout=5)
        t = time.monotonic()
        assert exporter.export(make_spans()) == SpanExportResult.FAILURE
        assert time.monotonic() - t < 2  # not retried (HTTP 500 / INTERNAL are permanent)
        assert rx.requests == 1 and rx.spans == []
        exporter.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unavailable_is_retried_then_succeeds_when_mode_changes(protocol):
    with OtlpReceiver(protocol, mode="unavailable", retry_after_s=0.2) as rx:
        exporter = span_exporter(protocol, rx.endpoint, timeout=5)

        def heal():  # the backend recovers after the first refusal
            rx.wait_for_requests(1, timeout=5)
            rx.mode = "ok"

        healer = threading.Thread(target=heal)
        healer.start()
        t = time.monotonic()
        assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
        healer.join()
        assert time.monotonic() - t < 3
        assert rx.requests >= 2 and len(rx.spans) == 2
        assert [r["mode"] for r in rx.request_log][:1] == ["unavailable"]
        exporter.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unavailable_gives_up_within_timeout(protocol):
    with OtlpReceiver(protocol, mode="unavailable") as rx:
        exporter = span_exporter(protocol, rx.endpoint, timeout=1)
        t = time.monotonic()
        assert exporter.export(make_spans()) == SpanExportResult.FAILURE
        assert time.monotonic() - t < 3
        assert rx.requests >= 1 and rx.spans == []
        exporter.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_endpoint_times_out_quickly(protocol):
    with OtlpReceiver(protocol, mode="slow", delay_s=3.0) as rx:
        exporter = span_exporter(protocol, rx.endpoint, timeout=0.5)
        t = time.monotonic()
        assert exporter.export(make_spans()) == SpanExportResult.FAILURE
        assert time.monotonic() - t < 2
        exporter.shutdown()
    # stop() wakes the sleeping handler: leaving the `with` took no delay_s


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_endpoint_within_timeout_succeeds(protocol):
    with OtlpReceiver(protocol, mode="slow", delay_s=0.3) as rx:
        exporter = span_exporter(protocol, rx.endpoint, timeout=5)
        t = time.monotonic()
        assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
        assert 0.3 <= time.monotonic() - t < 3
        assert len(rx.spans) == 2
        exporter.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dead_endpoint_fails_quickly(protocol):
    exporter = span_exporter(protocol, dead_endpoint(), timeout=1)
    t = time.monotonic()
    assert exporter.export(make_spans()) == SpanExportResult.FAILURE
    assert time.monotonic() - t < 3
    exporter.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", ["fail500", "slow", "dead"])
def test_failures_never_raise_into_the_instrumented_code(protocol, mode):
    """Through a TracerProvider (Simple and Batch processors) a broken backend costs time, not exceptions."""
    rx = OtlpReceiver(protocol, mode="ok" if mode == "dead" else mode, delay_s=2.0)
    with rx:
        base = dead_endpoint() if mode == "dead" else rx.endpoint
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(span_exporter(protocol, base, timeout=0.5)))
        provider.add_span_processor(BatchSpanProcessor(span_exporter(protocol, base, timeout=0.5)))
        tracer = provider.get_tracer("t")
        t = time.monotonic()
        with tracer.start_as_current_span("outer"):
            with tracer.start_as_current_span("inner"):
                pass
        provider.force_flush(timeout_millis=3_000)  # returns a bool; must not raise
        provider.shutdown()
        assert time.monotonic() - t < 8


def test_mode_is_validated_and_switchable():
    with pytest.raises(ValueError):
        OtlpReceiver("http", mode="nope")
    with pytest.raises(ValueError):
        OtlpReceiver("udp")
    with OtlpReceiver("http") as rx:
        with pytest.raises(ValueError):
            rx.mode = "broken"
        exporter = span_exporter("http", rx.endpoint, timeout=2)
        rx.mode = "fail500"
        assert exporter.export(make_spans()) == SpanExportResult.FAILURE
        rx.mode = "ok"
        assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
        assert [r["mode"] for r in rx.request_log] == ["fail500", "ok"]
        assert len(rx.spans) == 2
        rx.clear()
        assert rx.spans == [] and rx.requests == 0
        exporter.shutdown()


def test_http_wire_details():
    """Bad data -> 400, unknown path -> 404, gzip bodies decoded; all answer application/x-protobuf."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    def post(url, body, headers=None):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.headers["Content-Type"], resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read()

    with OtlpReceiver("http") as rx:
        assert post(rx.traces_url, b"\xff\xff\xff")[0] == 400
        assert post(rx.endpoint + "/v1/nothing", b"")[0] == 404
        code, ctype, body = post(rx.traces_url, gzip.compress(b""), {"Content-Encoding": "gzip"})
        assert (code, ctype) == (200, "application/x-protobuf")
        trace_service_pb2.ExportTraceServiceResponse.FromString(body)  # a proper response message
        rx.mode = "unavailable"
        rx.retry_after_s = 1
        code, _, body = post(rx.traces_url, b"")
        assert code == 503
        from google.rpc import status_pb2

        assert "unavailable" in status_pb2.Status.FromString(body).message


def test_wait_for_spans_times_out():
    with OtlpReceiver("http") as rx:
        t = time.monotonic()
        with pytest.raises(TimeoutError):
            rx.wait_for_spans(1, timeout=0.2)
        assert time.monotonic() - t < 1


def test_binds_loopback_only():
    for protocol in PROTOCOLS:
        with OtlpReceiver(protocol) as rx:
            assert rx.endpoint == f"http://127.0.0.1:{rx.port}" and rx.port > 0
            assert rx.address == f"127.0.0.1:{rx.port}"
            if protocol == "http":
                assert rx._server.server_address[0] == "127.0.0.1"
