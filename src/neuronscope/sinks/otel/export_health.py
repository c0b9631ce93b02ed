"""The failures of neuronscope's own exporters make one line, not one per retry.

:class:`CountingSpanExporter` / :class:`CountingMetricExporter` wrap the exporters of the
providers neuronscope builds (:mod:`.providers`): a failed export is counted in
``stats()['telemetry_dropped']`` and never raised; :class:`ExportHealth` turns the first failure
of a pair into ONE warning with the exporter's own reason, and keeps what each signal delivered.
While one of them exports, :data:`QUIET_EXPORTER_LOGS` holds back what the exporter libraries log.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ... import _stats
from .failfast import EndpointRefused

__all__ = [
    "QUIET_EXPORTER_LOGS",
    "SIGNAL_OFF",
    "CountingMetricExporter",
    "CountingSpanExporter",
    "ExportHealth",
    "export_failure_reported",
]

log = logging.getLogger("neuronscope")


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


QUIET_EXPORTER_LOGS = _QuietExporterLogs()
_reported = threading.Event()  # an export failure was logged (the exit handler then says no more)


def export_failure_reported() -> bool:
    """Whether neuronscope has logged that an export of its own providers failed."""
    return _reported.is_set()


#: the standard switches (OpenTelemetry's SDK configuration) that turn one signal of
#: neuronscope's own providers off: what the "does not take metrics" line tells the user to set
SIGNAL_OFF = {"traces": "OTEL_TRACES_EXPORTER=none", "metrics": "OTEL_METRICS_EXPORTER=none"}
_SIGNALS = tuple(SIGNAL_OFF)


class ExportHealth:
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

    def __init__(self, inner: SpanExporter, health: ExportHealth | None = None) -> None:
        self.inner = inner
        self.health = health or ExportHealth()
        self.health.exporters.append(self)
        self.target = _target(inner)
        self._shut = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        if self.signal in self.health.not_taken:  # said once; sending more would only fail again
            _stats.record("telemetry_dropped", len(spans))
            self.health.skipped(self.signal)
            return SpanExportResult.FAILURE
        error = None
        with QUIET_EXPORTER_LOGS.holding() as held:
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
        with QUIET_EXPORTER_LOGS.holding():
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingMetricExporter(MetricExporter):
    signal = "metrics"

    def __init__(self, inner: MetricExporter, health: ExportHealth | None = None) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality, preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self.health = health or ExportHealth()
        self.health.exporters.append(self)
        self.target = _target(inner)
        self._shut = threading.Event()

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self.signal in self.health.not_taken:
            _stats.record("telemetry_dropped")
            self.health.skipped(self.signal)
            return MetricExportResult.FAILURE
        error = None
        with QUIET_EXPORTER_LOGS.holding() as held:
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
        with QUIET_EXPORTER_LOGS.holding():
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def _target(exporter: Any) -> str:
    return str(getattr(exporter, "_endpoint", None) or type(exporter).__name__)
