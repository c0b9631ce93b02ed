"""A triggered run's root span says why it exists and links to the slow call's span; the
metrics count on-demand captures by trigger kind."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import neuronscope as ns
from neuronscope.sinks.otel.metrics import TRIGGERED_CALLS

DEFAULTS = dict(tracer_provider=None, meter_provider=None, op_spans="summary", max_spans=1000, exporter="auto", otlp_endpoint=None)


@pytest.fixture
def telemetry():
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    ns.configure(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    yield tracer_provider.get_tracer("test"), spans, reader
    ns.flush(30)
    ns.configure(**DEFAULTS)


def test_root_span_carries_the_trigger_and_links_the_slow_request(telemetry):
    tracer, spans, reader = telemetry

    @ns.profile_neuron(name="linked", trigger=ns.SlowCalls(slo_ms=15, min_calls=10, capture=1, max_per_hour=1, key=lambda slow: slow))
    def handler(slow: bool) -> int:
        time.sleep(0.03 if slow else 0)
        return 1

    for _ in range(40):
        handler(False)
    slow_request = None
    for _ in range(100):
        with tracer.start_as_current_span("request") as span:
            handler(True)
        if ns.stats()["triggers_fired"]:
            slow_request = span.get_span_context()
            break
    assert slow_request is not None
    for _ in range(100):
        with tracer.start_as_current_span("request"):
            handler(True)
        if ns.stats()["triggered"]:
            break
    req = ns.arm(1)
    handler(False)
    req.wait(30)
    assert ns.flush(30)

    roots = [s for s in spans.get_finished_spans() if s.name == "linked"]
    slow_root = next(s for s in roots if s.attributes.get("neuronscope.trigger.kind") == "slow")
    a = slow_root.attributes
    assert a["neuronscope.trigger.threshold_ms"] == 15.0 and a["neuronscope.trigger.call_ms"] > 15
    assert a["neuronscope.trigger.key"] is True and "> SLO 15.0 ms" in a["neuronscope.trigger.reason"]
    (link,) = slow_root.links
    assert (link.context.trace_id, link.context.span_id) == (slow_request.trace_id, slow_request.span_id)
    armed_root = next(s for s in roots if s.attributes.get("neuronscope.trigger.kind") == "arm")
    assert not armed_root.links

    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == TRIGGERED_CALLS:
                    points = {p.attributes["neuronscope.trigger.kind"]: p.value for p in m.data.data_points}
    stats = ns.stats()
    assert points == {"arm": stats["armed"], "slow": stats["triggered"], "baseline": stats["trigger_baselines"]}
    assert points["arm"] == 1 and points["slow"] == 1
