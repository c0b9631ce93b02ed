"""Which OpenTelemetry providers neuronscope emits to — and building its own only when asked.

Order of precedence (the contrib instrumentations' rules):
1. providers injected with ``neuronscope.configure(tracer_provider=..., meter_provider=...)``;
2. the global providers, when the application has set real ones;
3. when neither, and the user asked for export — ``exporter="otlp"``/``"console"`` or the
   standard ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` variables — providers of our own with
   the official exporters, never installed globally;
4. otherwise nothing is emitted (and nothing costs anything).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ... import _env, _stats
from ...errors import ConfigurationError
from .metrics import DEFAULT_TOP_OPS

__all__ = ["OtelSettings", "resolve_providers"]

log = logging.getLogger("neuronscope")

OP_SPAN_MODES = ("summary", "events", "none")
EXPORTERS = ("auto", "otlp", "console", "none")
_INSTALL_HINT = 'OTLP export needs the exporters: pip install "neuronscope[otlp]"'
# A profile's spans arrive in one burst from the worker; the SDK default queue (2048) drops
# most of a large events-mode burst. Sized so a capped profile is never dropped.
SPAN_QUEUE_SIZE = 65536
# A cap on the cap: each op name is a series per histogram bucket in the metrics backend.
MAX_TOP_OPS = 1000


@dataclass
class OtelSettings:
    tracer_provider: Any = None
    meter_provider: Any = None
    service_name: str | None = None
    op_spans: str = "summary"
    max_spans: int = 1000
    exporter: str = "auto"
    endpoint: str | None = None
    #: op names per (device, profile name) that get their own metric series; the rest is "other"
    metrics_top_ops: int = DEFAULT_TOP_OPS
    _own: list[Any] = field(default_factory=list)  # providers we built: we flush/shut them down

    def validate(self) -> None:
        if self.op_spans not in OP_SPAN_MODES:
            raise ConfigurationError(f"op_spans={self.op_spans!r}: use one of {', '.join(OP_SPAN_MODES)}")
        if self.exporter not in EXPORTERS:
            raise ConfigurationError(f"exporter={self.exporter!r}: use one of {', '.join(EXPORTERS)}")
        if not isinstance(self.max_spans, int) or isinstance(self.max_spans, bool) or self.max_spans < 1:
            raise ConfigurationError(f"max_spans={self.max_spans!r}: use a positive int")
        top = self.metrics_top_ops
        if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP_OPS:
            raise ConfigurationError(
                f"metrics_top_ops={top!r}: use an int from 1 to {MAX_TOP_OPS} (op names with their own series; the rest is 'other')"
            )
        if self.service_name is not None and not isinstance(self.service_name, str):
            raise ConfigurationError(f"service_name={self.service_name!r}: use a string")
        if self.tracer_provider is not None and not hasattr(self.tracer_provider, "get_tracer"):
            raise ConfigurationError("tracer_provider=...: pass an opentelemetry TracerProvider")
        if self.meter_provider is not None and not hasattr(self.meter_provider, "get_meter"):
            raise ConfigurationError("meter_provider=...: pass an opentelemetry MeterProvider")
        if self.exporter == "otlp" and not _otlp_installed():
            raise ConfigurationError(_INSTALL_HINT)


_lock = threading.Lock()


def _global_tracer_provider() -> Any | None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


def _global_meter_provider() -> Any | None:
    provider = metrics.get_meter_provider()
    name = type(provider).__name__
    if name in ("_ProxyMeterProvider", "NoOpMeterProvider"):
        return None
    return provider


def _env_asks_for_export() -> bool:
    return bool(_env.env_str("OTEL_EXPORTER_OTLP_ENDPOINT", None) or _env.env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None))


def _otlp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("opentelemetry.exporter.otlp") is not None


def resolve_providers(settings: OtelSettings) -> tuple[Any | None, Any | None]:
    """The (tracer provider, meter provider) to emit to; (None, None) when nothing was asked."""
    tracer = settings.tracer_provider or _global_tracer_provider()
    meter = settings.meter_provider or _global_meter_provider()
    if tracer is not None or settings.exporter == "none":
        return tracer, meter
    wants = settings.exporter in ("otlp", "console") or (settings.exporter == "auto" and _env_asks_for_export())
    if not wants:
        return None, meter
    with _lock:
        if not settings._own:
            try:
                settings._own = _build_own(settings)
            except ConfigurationError as exc:
                # e.g. an unsupported OTEL_EXPORTER_OTLP_PROTOCOL: say it once, then stay quiet.
                log.warning("neuronscope: OpenTelemetry export disabled: %s", exc)
                settings._own = [None, None]
        own_tracer, own_meter = settings._own
    return own_tracer, meter or own_meter


def _protocol() -> str:
    proto = _env.env_str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None) or _env.env_str("OTEL_EXPORTER_OTLP_PROTOCOL", None)
    proto = (proto or "http/protobuf").strip().lower()
    if proto not in ("grpc", "http/protobuf"):
        raise ConfigurationError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r}: neuronscope supports grpc and http/protobuf")
    return proto


def _build_own(settings: OtelSettings) -> list[Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from .distributed import rank_resource_attributes

    attrs = {SERVICE_NAME: settings.service_name} if settings.service_name else {}
    # a rank of a torchrun job: service.instance.id (instead of the SDK's random one), host.name,
    # rank...; what OTEL_RESOURCE_ATTRIBUTES sets wins
    attrs = {**rank_resource_attributes(), **attrs}
    resource = Resource.create(attrs)  # reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES
    span_exporter: SpanExporter
    metric_exporter: MetricExporter
    if settings.exporter == "console":
        span_exporter, metric_exporter = ConsoleSpanExporter(), ConsoleMetricExporter()
    else:
        if not _otlp_installed():
            raise ConfigurationError(_INSTALL_HINT)
        span_exporter, metric_exporter = _otlp_exporters(settings.endpoint)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(CountingSpanExporter(span_exporter), max_queue_size=SPAN_QUEUE_SIZE, max_export_batch_size=512)
    )
    reader = PeriodicExportingMetricReader(CountingMetricExporter(metric_exporter), export_interval_millis=10_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return [tracer_provider, meter_provider]


def _otlp_exporters(endpoint: str | None) -> tuple[SpanExporter, MetricExporter]:
    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        if endpoint:
            insecure = endpoint.startswith("http://")
            return OTLPSpanExporter(endpoint=endpoint, insecure=insecure), OTLPMetricExporter(
                endpoint=endpoint, insecure=insecure
            )
        return OTLPSpanExporter(), OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    if endpoint:
        base = endpoint.rstrip("/")
        return HttpSpanExporter(endpoint=base + "/v1/traces"), HttpMetricExporter(endpoint=base + "/v1/metrics")
    return HttpSpanExporter(), HttpMetricExporter()


class _LogOnce:
    def __init__(self) -> None:
        self._logged = False

    def __call__(self, msg: str, *args: Any) -> None:
        if not self._logged:
            self._logged = True
            log.warning(msg + " (further export failures are counted in neuronscope.stats()['telemetry_dropped'])", *args)


class CountingSpanExporter(SpanExporter):
    """Wraps an exporter: a failed export is counted and logged once, never raised."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._warn = _LogOnce()

    def export(self, spans: Any) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - telemetry must never fail loudly
            result = SpanExportResult.FAILURE
            self._warn("neuronscope: span export raised %r", exc)
        if result is not SpanExportResult.SUCCESS:
            _stats.record("telemetry_dropped", len(spans))
            self._warn("neuronscope: span export to %s failed; %d spans dropped", _target(self.inner), len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality, preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self._warn = _LogOnce()

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:  # noqa: BLE001
            result = MetricExportResult.FAILURE
            self._warn("neuronscope: metric export raised %r", exc)
        if result is not MetricExportResult.SUCCESS:
            _stats.record("telemetry_dropped")
            self._warn("neuronscope: metric export to %s failed", _target(self.inner))
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def _target(exporter: Any) -> str:
    return str(getattr(exporter, "_endpoint", None) or type(exporter).__name__)
