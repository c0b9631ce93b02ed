"""An optional Prometheus scrape endpoint for neuronscope's metrics.

``ns.configure(prometheus_port=9464)`` (or ``NEURONSCOPE_PROMETHEUS_PORT``) starts
prometheus_client's HTTP server on that port, serving a meter provider of neuronscope's own
whose reader is opentelemetry-exporter-prometheus' ``PrometheusMetricReader``. It is in addition
to the push path (OTLP, injected or global providers): every run's metrics go to both.

The registry is private (not prometheus_client's global ``REGISTRY``), so the endpoint serves
neuronscope's series only and reconfiguring never trips over a duplicate registration.

Exemplars: opentelemetry-exporter-prometheus drops the SDK's exemplars. The collector here
puts them back on the histogram buckets (``# {trace_id="...",span_id="..."} value ts`` in the
OpenMetrics format, which Prometheus negotiates when it scrapes; Prometheus stores them with
``--enable-feature=exemplar-storage``). Each bucket keeps the latest exemplar it has seen, so
a missed scrape loses none.
"""

from __future__ import annotations

import errno
import logging
import re
import threading
from typing import Any

from ... import _env
from ...errors import ConfigurationError
from .metrics import bucket_index, forget_provider

__all__ = ["PROMETHEUS_PORT_ENV", "PrometheusEndpoint", "parse_port", "start_endpoint"]

log = logging.getLogger("neuronscope")

PROMETHEUS_PORT_ENV = _env.PROMETHEUS_PORT.name
HOST_ENV = "OTEL_EXPORTER_PROMETHEUS_HOST"  # the standard variable; we bind where it says
DEFAULT_HOST = "localhost"
_INSTALL_HINT = 'the Prometheus endpoint needs the exporter: pip install "neuronscope[prometheus]"'

try:  # the exporter's own label sanitiser, so our exemplar index uses its label names
    from opentelemetry.exporter.prometheus._mapping import sanitize_attribute as _sanitize
except ImportError:  # pragma: no cover - layout changed or exporter absent
    _BAD = re.compile(r"[^a-zA-Z0-9]+")

    def _sanitize(key: str) -> str:
        key = "_" + key[1:] if key and key[0].isdigit() else key
        return _BAD.sub("_", key)


def exporter_installed() -> bool:
    import importlib.util

    return (
        importlib.util.find_spec("opentelemetry.exporter.prometheus") is not None
        and importlib.util.find_spec("prometheus_client") is not None
    )


def parse_port(value: Any, source: str) -> int | None:
    """A TCP port from configure() or the environment; None = no endpoint."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ConfigurationError(f"{source}={text!r}: use a TCP port number (0 picks a free one)") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigurationError(f"{source}={value!r}: use a TCP port number 0-65535 (0 picks a free one) or None")
    return value


class _ExemplarCollector:
    """prometheus_client collector: the exporter's families, with exemplars on buckets."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._lock = threading.Lock()
        # (family documentation, frozenset(labels incl. le)) -> latest exemplar of that bucket
        self._exemplars: dict[tuple[str, frozenset], Any] = {}

    def collect(self) -> Any:
        with self._lock:  # scrapes run on server threads; the reader hands over data once
            inner = getattr(self._reader, "_collector", None)
            if inner is None:  # pragma: no cover - exporter internals changed: serve without exemplars
                return []
            families = list(inner.collect())
            data = self._reader.take_metrics_data()
            try:
                self._index(data)
                return [self._with_exemplars(f) for f in families]
            except Exception as exc:  # noqa: BLE001 - exemplars are a bonus; the series must be served
                log.warning("neuronscope: Prometheus exemplars left out: %r", exc)
                return families

    def _index(self, data: Any) -> None:
        from prometheus_client.samples import Exemplar
        from opentelemetry.sdk.metrics.export import HistogramDataPoint

        if data is None:
            return
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    doc = metric.description or ""
                    for point in getattr(metric.data, "data_points", ()):
                        if not isinstance(point, HistogramDataPoint) or not point.exemplars:
                            continue
                        labels = {_sanitize(k): str(v) for k, v in (point.attributes or {}).items()}
                        bounds = list(point.explicit_bounds)
                        for ex in point.exemplars:
                            if not ex.trace_id or not ex.span_id:
                                continue
                            i = bucket_index(bounds, ex.value)
                            le = "+Inf" if i >= len(bounds) else f"{bounds[i]}"
                            key = (doc, frozenset((labels | {"le": le}).items()))
                            self._exemplars[key] = Exemplar(
                                {"trace_id": format(ex.trace_id, "032x"), "span_id": format(ex.span_id, "016x")},
                                ex.value,
                                ex.time_unix_nano / 1e9,
                            )

    def _with_exemplars(self, family: Any) -> Any:
        if family.type != "histogram" or not self._exemplars:
            return family
        samples = []
        for s in family.samples:
            if s.name.endswith("_bucket"):
                # scope labels (otel_scope_*) are the exporter's, not the point's: match without them
                own = frozenset((k, v) for k, v in s.labels.items() if not k.startswith("otel_scope_"))
                ex = self._exemplars.get((family.documentation, own))
                if ex is not None:
                    s = s._replace(exemplar=ex)
            samples.append(s)
        family.samples = samples
        return family


class PrometheusEndpoint:
    """A running endpoint: the HTTP server, its registry and the meter provider it serves.

    ``url`` (``http://HOST:PORT/metrics``), ``host`` and ``port`` — the port actually bound, also
    when ``0`` asked for a free one (``requested_port``). Get the running one with
    ``neuronscope.sinks.otel.prometheus_endpoint()``.
    """

    def __init__(self, port: int, host: str, service_name: str | None) -> None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from prometheus_client import CollectorRegistry, start_http_server

        class _Reader(PrometheusMetricReader):
            """Keeps the last MetricsData handed to the exporter: it carries the exemplars."""

            _last: Any = None

            def _receive_metrics(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> None:
                self._last = metrics_data
                super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

            def take_metrics_data(self) -> Any:
                data, self._last = self._last, None
                return data

        self.registry = CollectorRegistry()
        # The exporter registers its collector in the registry it is given; that one stays
        # private and ours (the served one) wraps it.
        self.reader = _Reader(registry=CollectorRegistry())
        self.registry.register(_ExemplarCollector(self.reader))
        attrs: dict[str, Any] = {SERVICE_NAME: service_name} if service_name else {}
        # target_info tells the ranks of a torchrun job apart (service.instance.id, rank, ...)
        from .distributed import rank_resource_attributes

        from .service import with_default_service_name

        attrs = {**rank_resource_attributes(), **attrs}
        resource = with_default_service_name(Resource.create(attrs))  # unnamed: the program's name
        # shutdown_on_exit=False: stop() (configure or neuronscope's exit hook) shuts it down, once
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[self.reader], shutdown_on_exit=False)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except BaseException:
            self.meter_provider.shutdown()
            raise
        self.host = host
        self.port = int(self._server.server_address[1])
        self.requested_port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        try:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
        finally:
            forget_provider(self.meter_provider)
            self.meter_provider.shutdown()

    def close_socket_in_child(self) -> None:
        """Close this process's copy of the listening socket, nothing else: in a forked child
        (endpoint.py's fork hook) the server thread is the parent's, and :meth:`stop` would wait
        for a loop that is not running here."""
        self._server.socket.close()


def start_endpoint(port: int, service_name: str | None, *, source: str) -> PrometheusEndpoint:
    """Start the endpoint or raise ConfigurationError saying what to change."""
    if not exporter_installed():
        raise ConfigurationError(_INSTALL_HINT)
    host = _env.env_str(HOST_ENV, DEFAULT_HOST)
    try:
        endpoint = PrometheusEndpoint(port, host, service_name)
    except TypeError as exc:  # an exporter older than the extra's pin: no registry= argument
        raise ConfigurationError(f"{_INSTALL_HINT} (the installed opentelemetry-exporter-prometheus is too old: {exc})") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"{source}={port}: port {port} on {host} is already in use; choose another port "
                f"(0 picks a free one) or stop what listens there"
            ) from None
        raise ConfigurationError(f"{source}={port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if port == 0:
        # a port the operator could not know otherwise: said where it shows without logging set up
        # (and in code: neuronscope.sinks.otel.prometheus_endpoint().url)
        log.warning("neuronscope: serving Prometheus metrics at %s (%s=0: a free port)", endpoint.url, source)
    else:
        log.info("neuronscope: serving Prometheus metrics at %s", endpoint.url)
    return endpoint
