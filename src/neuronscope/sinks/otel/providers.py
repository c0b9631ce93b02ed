"""Which OpenTelemetry providers neuronscope emits to — and building its own only when asked.

Order of precedence (the contrib instrumentations' rules):
1. providers injected with ``neuronscope.configure(tracer_provider=..., meter_provider=...)``;
2. the global providers, when the application has set real ones;
3. when neither, and the user asked for export — ``exporter="otlp"``/``"console"`` or the
   standard ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` variables — providers of our own with
   the official exporters, never installed globally;
4. otherwise nothing is emitted (and nothing costs anything).

Our own providers are shut down by neuronscope's exit handler, within
``NEURONSCOPE_EXIT_FLUSH_TIMEOUT`` (:mod:`neuronscope.sinks.otel`), not by the SDK's atexit hooks;
their exporters' failures make one log line (:class:`ExportHealth`), not one per retry.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from ... import _env
from ...errors import ConfigurationError
from . import bounded
from .export_health import (
    QUIET_EXPORTER_LOGS,
    CountingMetricExporter,
    CountingSpanExporter,
    ExportHealth,
    export_failure_reported,
)
from .metrics import DEFAULT_TOP_OPS

__all__ = ["OtelSettings", "export_failure_reported", "resolve_providers"]

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

    @property
    def own_providers(self) -> list[Any]:
        """The providers neuronscope built for these settings (an :class:`OwnProviders` once built,
        else empty): the ones the package's flush and shutdown (sinks/otel/__init__.py) close."""
        return self._own

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


def wants_own(settings: OtelSettings) -> bool:
    """Whether :func:`resolve_providers` would build providers of our own (now)."""
    if settings._own or settings.tracer_provider is not None or settings.exporter == "none":
        return False
    if _global_tracer_provider() is not None:
        return False
    return settings.exporter in ("otlp", "console") or (settings.exporter == "auto" and _env_asks_for_export())


def resolve_providers(settings: OtelSettings) -> tuple[Any | None, Any | None]:
    """The (tracer provider, meter provider) to emit to; (None, None) when nothing was asked."""
    tracer = settings.tracer_provider or _global_tracer_provider()
    meter = settings.meter_provider or _global_meter_provider()
    if tracer is not None or meter is not None:
        _note_external(tracer, meter)
        bounded.start_helper()  # now, not at exit: flushes at exit then keep to their deadline
    if tracer is not None or settings.exporter == "none":
        return tracer, meter
    wants = settings.exporter in ("otlp", "console") or (settings.exporter == "auto" and _env_asks_for_export())
    if not wants:
        return None, meter
    bounded.start_helper()
    with _lock:
        if not settings._own:
            try:
                settings._own = _build_own(settings)
            except ConfigurationError as exc:
                # e.g. an unsupported OTEL_EXPORTER_OTLP_PROTOCOL: say it once, then stay quiet.
                log.warning("neuronscope: OpenTelemetry export disabled: %s", exc)
                settings._own = OwnProviders([None, None])
        own_tracer, own_meter = settings._own
    return own_tracer, meter or own_meter


def _protocol() -> str:
    proto = _env.env_str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None) or _env.env_str("OTEL_EXPORTER_OTLP_PROTOCOL", None)
    proto = (proto or "http/protobuf").strip().lower()
    if proto not in ("grpc", "http/protobuf"):
        raise ConfigurationError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r}: neuronscope supports grpc and http/protobuf")
    return proto


class OwnProviders(list):
    """``[tracer provider, meter provider]`` neuronscope built, and the exporters behind them."""

    health: ExportHealth | None = None
    closed = False  # shut down (once: the SDK warns on a second shutdown)


def _build_own(settings: OtelSettings) -> OwnProviders:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from .distributed import rank_resource_attributes
    from .service import with_default_service_name

    attrs = {SERVICE_NAME: settings.service_name} if settings.service_name else {}
    # a rank of a torchrun job: service.instance.id (instead of the SDK's random one), host.name,
    # rank...; what OTEL_RESOURCE_ATTRIBUTES sets wins
    attrs = {**rank_resource_attributes(), **attrs}
    # reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; unnamed, the service is the program's
    resource = with_default_service_name(_resource(attrs))
    span_exporter: SpanExporter
    metric_exporter: MetricExporter
    if settings.exporter == "console":
        span_exporter, metric_exporter = ConsoleSpanExporter(), ConsoleMetricExporter()
    else:
        if not _otlp_installed():
            raise ConfigurationError(_INSTALL_HINT)
        span_exporter, metric_exporter = _otlp_exporters(settings.endpoint)
        QUIET_EXPORTER_LOGS.install()
    health = ExportHealth()
    spans, metrics_out = CountingSpanExporter(span_exporter, health), CountingMetricExporter(metric_exporter, health)
    # shutdown_on_exit=False: the SDK's atexit hooks would run BEFORE neuronscope's exit handler
    # (atexit is last-in first-out, and these are made after it is registered), so that handler's
    # flush would meet shut-down providers: "Exporter already shutdown", a failed metric export,
    # "shutdown can only be called once". neuronscope's exit handler flushes and then shuts them
    # down, within NEURONSCOPE_EXIT_FLUSH_TIMEOUT (shutdown_own_providers).
    tracer_provider = meter_provider = None
    if not _signal_off("traces"):
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        processor = BatchSpanProcessor(spans, max_queue_size=SPAN_QUEUE_SIZE, max_export_batch_size=512)
        tracer_provider.add_span_processor(processor)
    if not _signal_off("metrics"):
        reader = PeriodicExportingMetricReader(metrics_out, export_interval_millis=10_000)
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    own = OwnProviders([tracer_provider, meter_provider])
    own.health = health
    return own


def _signal_off(signal: str) -> bool:
    """``OTEL_TRACES_EXPORTER=none`` / ``OTEL_METRICS_EXPORTER=none`` (the SDK's standard
    switches): neuronscope's own providers leave that signal out. Other values are the
    SDK's exporter names, which ``exporter=`` decides here."""
    name = "OTEL_TRACES_EXPORTER" if signal == "traces" else "OTEL_METRICS_EXPORTER"
    return (_env.env_str(name, None) or "").strip().lower() == "none"


def _resource(attrs: dict[str, Any]) -> Any:
    from opentelemetry.sdk import resources

    try:
        return resources.Resource.create(attrs)
    except RuntimeError:
        # "cannot schedule new futures after interpreter shutdown": the SDK runs its resource
        # detectors on a thread pool, which is closed once the interpreter exits — when the first
        # profile to export ended just before the exit. The same detectors, inline.
        build = getattr(resources, "_build_resource_detectors", None)
        detectors = build() if build is not None else [resources.OTELResourceDetector()]
        resource = getattr(resources, "_DEFAULT_RESOURCE", resources.Resource.get_empty())
        for detector in detectors:
            try:
                resource = resource.merge(detector.detect())
            except Exception as exc:  # noqa: BLE001 - as the SDK: a failing detector is skipped
                log.debug("neuronscope: resource detector %r failed: %r", detector, exc)
        resource = resource.merge(resources.Resource(attrs))
        if not resource.attributes.get(resources.SERVICE_NAME):
            resource = resource.merge(resources.Resource({resources.SERVICE_NAME: "unknown_service"}))
        return resource


# -- where the OTLP exporters send ----------------------------------------------------------

#: the paths OTLP/HTTP appends to a base URL (OTEL_EXPORTER_OTLP_ENDPOINT) for each signal
_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")


def http_base_url(url: str, source: str) -> str:
    """``url`` as an OTLP/HTTP *base* URL: one given with a signal path (``.../v1/traces``) has
    it removed, with a warning that says so. The OpenTelemetry specification appends the signal
    path to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and to ``otlp_endpoint``): kept, it would post to
    ``/v1/traces/v1/traces`` and get a 404."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    signal = next((p for p in _SIGNAL_PATHS if path.endswith(p)), None)
    if signal is None:
        return urlunsplit(parts._replace(path=path))
    base = urlunsplit(parts._replace(path=path[: -len(signal)]))
    fix = (
        f"set OTEL_EXPORTER_OTLP_ENDPOINT={base}, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={url} (a signal's own variable is used as is)"
        if source == "OTEL_EXPORTER_OTLP_ENDPOINT"
        else f"pass {source}={base!r}"
    )
    log.warning(
        "neuronscope: %s=%s ends in the signal path %s, but it is a base URL that /v1/traces and /v1/metrics are "
        "appended to; sending to %s/v1/traces and %s/v1/metrics instead. To silence this, %s",
        source, url, signal, base, base, fix,
    )  # fmt: skip
    return base


def _otlp_exporters(endpoint: str | None) -> tuple[SpanExporter, MetricExporter]:
    """The official exporters, failing at once on a refused connection (:mod:`.failfast`)."""
    from .failfast import grpc_exporters, http_session

    if _protocol() == "grpc":
        # gRPC takes host:port from the URL (a path is ignored, so nothing to correct)
        return grpc_exporters(endpoint, endpoint.startswith("http://") if endpoint else None)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    def spans(url: str | None = None) -> SpanExporter:
        return HttpSpanExporter(endpoint=url, session=http_session())

    def metrics(url: str | None = None) -> MetricExporter:
        return HttpMetricExporter(endpoint=url, session=http_session())

    if endpoint:
        base = http_base_url(endpoint, "otlp_endpoint")
        return spans(base + "/v1/traces"), metrics(base + "/v1/metrics")
    # From the environment. A signal's own variable (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is used
    # as is and read by the exporter itself; the base URL has its signal paths appended.
    traces_own = _env.env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    metrics_own = _env.env_str("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", None)
    env_base = _env.env_str("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if not env_base or (traces_own and metrics_own):
        return spans(), metrics()
    env_url = http_base_url(env_base, "OTEL_EXPORTER_OTLP_ENDPOINT")
    return (
        spans() if traces_own else spans(env_url + "/v1/traces"),
        metrics() if metrics_own else metrics(env_url + "/v1/metrics"),
    )


# -- applications' providers --------------------------------------------------------------------

_external_hooks: list[Any] = []
_external_seen: set[int] = set()


def on_external_provider(hook: Any) -> None:
    """Call ``hook()`` whenever a provider neuronscope did not build is first emitted to."""
    if hook not in _external_hooks:
        _external_hooks.append(hook)


def note_providers_in_use(settings: OtelSettings) -> None:
    """:func:`on_external_provider`'s hooks for the injected or global providers in use now."""
    _note_external(settings.tracer_provider or _global_tracer_provider(), settings.meter_provider or _global_meter_provider())


def _note_external(*providers: Any) -> None:
    for provider in providers:
        if provider is None or id(provider) in _external_seen:
            continue
        _external_seen.add(id(provider))  # ids only: an application has one or two, for its life
        for hook in list(_external_hooks):
            try:
                hook()
            except Exception as exc:  # noqa: BLE001 - never into the export path
                log.debug("neuronscope: provider hook failed: %r", exc)
