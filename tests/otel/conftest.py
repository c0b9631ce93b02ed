from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import neuronscope as ns

DEFAULTS = dict(
    tracer_provider=None, meter_provider=None, op_spans="summary", max_spans=1000, exporter="auto", otlp_endpoint=None
)


@pytest.fixture(autouse=True)
def _reset_otel():
    ns.configure(**DEFAULTS)
    yield
    ns.flush(30)
    ns.configure(**DEFAULTS)


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self):
        ns.flush(30)
        return list(self.spans.get_finished_spans())

    def metric_points(self) -> dict:
        out: dict = {}
        data = self.metrics.get_metrics_data()
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out[m.name] = (m.unit, list(m.data.data_points))
        return out


@pytest.fixture
def telemetry() -> Telemetry:
    t = Telemetry()
    ns.configure(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    return t
