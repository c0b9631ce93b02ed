"""Spans through the real OTLP/HTTP exporter into Arize Phoenix, read back through its REST API.

Phoenix comes from phoenix_url(): NEURONSCOPE_PHOENIX_URL if set, else a server of this test
session's own (installed into its own venv on first use, ~1.5 min; started in ~20 s).
NEURONSCOPE_PHOENIX=0 skips these tests (for machines that cannot install Phoenix).
"""

from __future__ import annotations

import os
import uuid

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from tests.support.phoenix import fetch_spans, iso_to_unix_nano, phoenix_url, wait_for_spans

T0 = 1_700_000_000_123_456_789
US = 1_000  # Phoenix keeps microseconds: nanoseconds are rounded


@pytest.fixture(scope="module")
def phoenix() -> str:
    if os.environ.get("NEURONSCOPE_PHOENIX") == "0":
        pytest.skip("NEURONSCOPE_PHOENIX=0")
    return phoenix_url()


def send(base_url: str, build) -> str:
    """Run build(tracer) under a provider exporting over OTLP/HTTP to Phoenix; return the trace id hex."""
    provider = TracerProvider(resource=Resource.create({"service.name": "neuronscope-phoenix-test"}))
    exporter = OTLPSpanExporter(endpoint=base_url + "/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = build(provider.get_tracer("neuronscope.test"))
    provider.shutdown()
    return trace_id


def test_parent_child_with_explicit_times_round_trip(phoenix):
    run = uuid.uuid4().hex

    def build(tracer):
        parent = tracer.start_span("train_step", start_time=T0, attributes={"run": run, "step": 7, "lr": 0.001})
        child = tracer.start_span(
            "aten::matmul",
            context=set_span_in_context(parent),
            start_time=T0 + 1_000_000,
            attributes={"neuronscope.device": "cpu", "shape": [4, 8]},
        )
        child.add_event("launch", {"stream": 3}, timestamp=T0 + 2_000_000)
        child.set_status(Status(StatusCode.ERROR, "slow kernel"))
        child.end(end_time=T0 + 5_000_000)
        parent.end(end_time=T0 + 2_000_000_000)
        return format(parent.get_span_context().trace_id, "032x")

    trace_id = send(phoenix, build)
    spans = wait_for_spans(phoenix, lambda ss: len(ss) >= 2, timeout=30, trace_id=trace_id)
    by_name = {s["name"]: s for s in spans}
    assert set(by_name) == {"train_step", "aten::matmul"}
    parent, child = by_name["train_step"], by_name["aten::matmul"]

    assert parent["context"]["trace_id"] == child["context"]["trace_id"] == trace_id
    assert parent["parent_id"] is None
    assert child["parent_id"] == parent["context"]["span_id"]

    def close(iso: str, ns: int) -> bool:
        return abs(iso_to_unix_nano(iso) - ns) <= US

    assert close(parent["start_time"], T0) and close(parent["end_time"], T0 + 2_000_000_000)
    assert close(child["start_time"], T0 + 1_000_000) and close(child["end_time"], T0 + 5_000_000)
    assert parent["start_time"].startswith("2023-11-14T22:13:20.123")

    assert parent["attributes"] == {"run": run, "step": 7, "lr": 0.001}
    assert child["attributes"] == {"neuronscope.device": "cpu", "shape": [4, 8]}
    (event,) = child["events"]
    assert event["name"] == "launch" and event["attributes"] == {"stream": 3}
    assert close(event["timestamp"], T0 + 2_000_000)
    assert (child["status_code"], child["status_message"]) == ("ERROR", "slow kernel")
    assert parent["status_code"] == "UNSET"


def test_fetch_follows_pagination(phoenix):
    def build(tracer):
        root = tracer.start_span("batch", start_time=T0)
        for i in range(5):
            tracer.start_span(f"op{i}", context=set_span_in_context(root), start_time=T0 + i).end(end_time=T0 + i + 10)
        root.end(end_time=T0 + 100)
        return format(root.get_span_context().trace_id, "032x")

    trace_id = send(phoenix, build)
    wait_for_spans(phoenix, lambda ss: len(ss) >= 6, timeout=30, trace_id=trace_id)
    paged = fetch_spans(phoenix, limit=2, trace_id=trace_id)  # 3 pages of 2
    assert sorted(s["name"] for s in paged) == ["batch"] + [f"op{i}" for i in range(5)]
    assert len({s["context"]["span_id"] for s in paged}) == 6


def test_unknown_project_is_empty(phoenix):
    assert fetch_spans(phoenix, project="no-such-project-" + uuid.uuid4().hex[:8]) == []
