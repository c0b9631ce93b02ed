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
their exporters' failures make one log line (:class:`_ExportHealth`), not one per retry.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ... import _env, _stats
from ...errors import ConfigurationError
from . import bounded
from .failfast import EndpointRefused
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

    health: _ExportHealth | None = None
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
        _QUIET.install()
    health = _ExportHealth()
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


# -- the exporters' failures: one line --------------------------------------------------------


class _QuietExporterLogs(logging.Filter):
    """Holds back what the exporter libraries log while one of OUR exporters exports or shuts
    down on this thread: the OTLP exporters log each retry ("Transient error ... retrying in
    2.19s"), each failure and each call after shutdown through their own module loggers — about
    twenty lines for one dead endpoint. The first record held back is kept as the reason of
    neuronscope's one "export failed" line. Records on other threads — the application's own
    exporters — pass untouched, and DEBUG always passes."""

    #: logger name prefixes of what our exporters call into
    PREFIXES = ("opentelemetry.exporter", "urllib3")

    def __init__(self) -> None:
        super().__init__("neuronscope-quiet-exporters")
        self._local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        held: list[str] | None = getattr(self._local, "held", None)
        if held is None or record.levelno <= logging.DEBUG:
            return True
        held.append(record.getMessage())
        return False

    @contextmanager
    def holding(self) -> Iterator[list[str]]:
        outer = getattr(self._local, "held", None)
        held: list[str] = []
        self._local.held = held
        try:
            yield held
        finally:
            self._local.held = outer

    def install(self) -> None:
        """On every exporter logger that exists (called once the exporters are imported)."""
        manager = logging.Logger.manager
        for name in list(manager.loggerDict):
            if name.startswith(self.PREFIXES):
                logger = logging.getLogger(name)
                if self not in logger.filters:
                    logger.addFilter(self)


_QUIET = _QuietExporterLogs()
_reported = threading.Event()  # an export failure was logged (the exit handler then says no more)


def export_failure_reported() -> bool:
    """Whether neuronscope has logged that an export of its own providers failed."""
    return _reported.is_set()


#: the standard switches (OpenTelemetry's SDK configuration) that turn one signal of
#: neuronscope's own providers off: what the "does not take metrics" line tells the user to set
SIGNAL_OFF = {"traces": "OTEL_TRACES_EXPORTER=none", "metrics": "OTEL_METRICS_EXPORTER=none"}
_SIGNALS = tuple(SIGNAL_OFF)


class _ExportHealth:
    """The exporters of one pair of own providers: their failures make ONE warning (the first,
    with the exporter's own reason), the rest are counted in ``stats()['telemetry_dropped']``;
    :meth:`abort` stops them at the exit deadline. It also keeps what each signal delivered,
    for ``ns.flush()`` (False after any failed export) and ``neuronscope export``.

    An endpoint that answers one signal with 405 / gRPC UNIMPLEMENTED (or 404 once the other
    signal got through) does not take that signal — a traces-only backend such as Phoenix: that
    is its own line, naming the switch that turns the signal off; its later batches are not
    sent (and counted as dropped), and the other signal goes on."""

    def __init__(self) -> None:
        self.exporters: list[Any] = []
        self.aborted = False
        self.failing = False  # the last export failed (the exit does not wait for such an endpoint)
        self.quiet = False  # set after the exit handler: nothing may be printed any more
        self._logged = threading.Event()
        self._lock = threading.Lock()
        self._failed_since_flush = False
        #: per signal: exports that arrived, exports that failed (batches)
        self.delivered = dict.fromkeys(_SIGNALS, 0)
        self.lost = dict.fromkeys(_SIGNALS, 0)
        #: signal -> the endpoint's answer, for a signal it does not take
        self.not_taken: dict[str, str] = {}
        self.reasons: dict[str, str] = {}  # signal -> why its first failed export failed

    def succeeded(self, signal: str) -> None:
        self.failing = False
        with self._lock:
            self.delivered[signal] += 1

    def take_failed(self) -> bool:
        """Whether an export failed since the last call (each flush asks once)."""
        with self._lock:
            failed, self._failed_since_flush = self._failed_since_flush, False
        return failed

    def skipped(self, signal: str) -> None:
        """A batch of a signal the endpoint does not take: not sent, so not delivered."""
        with self._lock:
            self._failed_since_flush = True
            self.lost[signal] += 1

    def failed(self, signal: str, target: str, held: list[str], exc: BaseException | None = None) -> None:
        with self._lock:
            self._failed_since_flush = True
            self.lost[signal] += 1
        other_arrived = self.delivered[_other(signal)] > 0 and self._one_base_url()
        answer = _answer_for_a_missing_signal(held, other_delivered=other_arrived)
        if answer is not None:  # the endpoint is up; it just has no such service
            self.not_taken[signal] = answer
            if not self.quiet:
                _reported.set()
                log.warning(
                    "neuronscope: the OTLP endpoint %s does not take %s (%s): %s are not sent there any more, %s are. "
                    "To turn %s off, set %s",
                    target, signal, answer, signal, _other(signal), signal, SIGNAL_OFF[signal],
                )  # fmt: skip
            return
        self.failing = True
        if exc is not None:
            reason = "Connection refused" if isinstance(exc, EndpointRefused) else repr(exc)
        elif self.aborted:
            # what the abort itself made the exporter say ("Shutdown in progress") is no reason
            held = [m for m in held if "shutdown" not in m.lower()]
            reason = _reason(held) + ", stopped at exit" if held else "not sent within NEURONSCOPE_EXIT_FLUSH_TIMEOUT at exit"
        else:
            reason = _reason(held)
        self.reasons.setdefault(signal, reason)
        if self._logged.is_set() or self.quiet:
            return
        self._logged.set()
        _reported.set()
        log.warning(
            "neuronscope: OTLP export to %s failed: %s. Telemetry is dropped while it fails "
            "(counted in neuronscope.stats()['telemetry_dropped'])",
            target, reason,
        )  # fmt: skip

    def _one_base_url(self) -> bool:
        """Whether the signals go to one endpoint (a base URL with the signals' paths, or one
        gRPC host:port), so that one signal arriving says the address is right."""
        bases = {re.sub(r"/v1/(traces|metrics)/?$", "", e.target) for e in self.exporters}
        return len(bases) == 1

    def abort(self) -> None:
        """Stop every export now: retries are abandoned, later batches fail at once."""
        self.aborted = True
        for exporter in self.exporters:
            exporter.shutdown()


def _other(signal: str) -> str:
    return "metrics" if signal == "traces" else "traces"


def _answer_for_a_missing_signal(held: list[str], *, other_delivered: bool) -> str | None:
    """The endpoint's answer when it says it has no service for a signal: HTTP 405 or gRPC
    UNIMPLEMENTED; HTTP 404 only once the other signal got through to the same base URL
    (otherwise a 404 more likely means a wrong URL, which :func:`_reason` explains)."""
    text = " ".join(held)
    status = re.search(r"code: (\d{3}), reason: ([^,]*)", text)
    if status and (status.group(1) == "405" or (status.group(1) == "404" and other_delivered)):
        return f"HTTP {status.group(1)} {status.group(2).strip()}".rstrip()
    if "StatusCode.UNIMPLEMENTED" in text:
        return "gRPC UNIMPLEMENTED"
    return None


def _reason(held: list[str]) -> str:
    """The gist of what the exporter logged first: "connection refused", "HTTP 404 Not Found"
    (with a hint), else the message itself, shortened."""
    if not held:
        return "the exporter reported a failure"
    first = " ".join(held[0].split())
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", first)
    if errno:
        return errno.group(1).strip().rstrip(".")
    grpc = re.search(r"(StatusCode\.\w+).*?error details: (.+)$", first, re.IGNORECASE)
    if grpc:
        first = f"{grpc.group(1)}: {grpc.group(2)}"
    status = re.search(r"code: (\d{3}), reason: ([^,]*)", first)
    if status:
        text = f"HTTP {status.group(1)} {status.group(2).strip()}".rstrip()
        if status.group(1) == "404":
            text += (
                " (OTEL_EXPORTER_OTLP_ENDPOINT and otlp_endpoint are base URLs, http://host:4318, to which "
                "/v1/traces is appended; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the full URL)"
            )
        return text
    return first if len(first) <= 300 else first[:299] + "…"


class CountingSpanExporter(SpanExporter):
    """Wraps an exporter: a failed export is counted and logged once, never raised."""

    signal = "traces"

    def __init__(self, inner: SpanExporter, health: _ExportHealth | None = None) -> None:
        self.inner = inner
        self.health = health or _ExportHealth()
        self.health.exporters.append(self)
        self.target = _target(inner)
        self._shut = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        if self.signal in self.health.not_taken:  # said once; sending more would only fail again
            _stats.record("telemetry_dropped", len(spans))
            self.health.skipped(self.signal)
            return SpanExportResult.FAILURE
        error = None
        with _QUIET.holding() as held:
            try:
                result = self.inner.export(spans)
            except Exception as exc:  # noqa: BLE001 - telemetry must never fail loudly
                result, error = SpanExportResult.FAILURE, exc
        if result is SpanExportResult.SUCCESS:
            self.health.succeeded(self.signal)
        else:
            _stats.record("telemetry_dropped", len(spans))
            self.health.failed(self.signal, self.target, held, error)
        return result

    def shutdown(self) -> None:
        if self._shut.is_set():
            return  # once: the SDK's exporters warn on a second call
        self._shut.set()
        with _QUIET.holding():
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingMetricExporter(MetricExporter):
    signal = "metrics"

    def __init__(self, inner: MetricExporter, health: _ExportHealth | None = None) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality, preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self.health = health or _ExportHealth()
        self.health.exporters.append(self)
        self.target = _target(inner)
        self._shut = threading.Event()

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self.signal in self.health.not_taken:
            _stats.record("telemetry_dropped")
            self.health.skipped(self.signal)
            return MetricExportResult.FAILURE
        error = None
        with _QUIET.holding() as held:
            try:
                result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:  # noqa: BLE001
                result, error = MetricExportResult.FAILURE, exc
        if result is MetricExportResult.SUCCESS:
            self.health.succeeded(self.signal)
        else:
            _stats.record("telemetry_dropped")
            self.health.failed(self.signal, self.target, held, error)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if self._shut.is_set():
            return
        self._shut.set()
        with _QUIET.holding():
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def _target(exporter: Any) -> str:
    return str(getattr(exporter, "_endpoint", None) or type(exporter).__name__)


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
