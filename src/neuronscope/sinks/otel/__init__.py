"""OpenTelemetry: the settings ``configure()`` applies, the providers we built (flushed and shut
down through the sinks), and where the rest lives — :mod:`.export` (the sinks), :mod:`.endpoint`
(the Prometheus endpoint's lifecycle), :mod:`.spans`, :mod:`.metrics`, :mod:`.providers`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import context as otel_context

from . import metrics as _metrics
from .endpoint import prometheus_endpoint, set_prometheus, start_prometheus_from_environment, stop_prometheus
from .export import emit_rank_run
from .prometheus import parse_port
from .providers import OtelSettings

__all__ = [
    "capture_parent_context",
    "configure_otel",
    "emit_rank_run",
    "flush_providers",
    "prometheus_endpoint",
    "settings",
    "shutdown_own_providers",
    "shutdown_providers",
    "start_prometheus_from_environment",
]

log = logging.getLogger("neuronscope")
_SCOPE = "neuronscope"
_settings = OtelSettings()
_lock = threading.Lock()


def settings() -> OtelSettings:
    return _settings


def configure_otel(**changes: Any) -> None:
    """Apply OpenTelemetry options (validated first; nothing changes on error).

    ``prometheus_port`` (an int, 0 for a free port, or None to stop) starts or stops the
    scrape endpoint; a port already in use raises ConfigurationError and changes nothing.
    """
    global _settings
    port_given = "prometheus_port" in changes
    port = parse_port(changes.pop("prometheus_port", None), "configure(prometheus_port)") if port_given else None
    candidate = OtelSettings(**{**_settings.__dict__, **changes, "_own": []})
    candidate.validate()
    if port_given:
        set_prometheus(port, candidate.service_name, source="configure(prometheus_port)")
        if not changes:
            return  # the endpoint only: the push providers stay as they are
    with _lock:
        old = _settings
        _settings = candidate
    if old.metrics_top_ops != candidate.metrics_top_ops:
        _metrics.reset_cardinality()
    # Providers we built for the old settings are ours to close.
    for provider in old._own:
        if provider is not None:
            _metrics.forget_provider(provider)
            _safe(provider.shutdown)


def capture_parent_context() -> Any:
    """The context current on the calling thread (cheap: one contextvar read)."""
    return otel_context.get_current()


def _providers_to_flush() -> list[Any]:
    tracer_provider, meter_provider = (
        (_settings.tracer_provider, _settings.meter_provider) if not _settings._own else tuple(_settings._own)
    )
    return [p for p in (tracer_provider, meter_provider) if p is not None and hasattr(p, "force_flush")]


def flush_providers(timeout_s: float | None) -> bool:
    ok = True
    millis = int((timeout_s if timeout_s is not None else 30) * 1000)
    for provider in _providers_to_flush():
        result = _safe(provider.force_flush, millis)
        ok = ok and result is not False
    return ok


def shutdown_own_providers() -> None:
    """Shut down the providers neuronscope built (never the application's)."""
    for provider in _settings._own:
        if provider is not None:
            _safe(provider.shutdown)


def shutdown_providers() -> None:
    """Every OpenTelemetry sink's shutdown: our providers, then the Prometheus endpoint."""
    shutdown_own_providers()
    stop_prometheus()


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: %s failed: %s", getattr(fn, "__qualname__", fn), exc)
        return False
