"""OpenTelemetry sink: spans and metrics for every completed run.

Runs on the background worker, after the run has been summarised. The calling thread
only captures the current OpenTelemetry context when the profile starts (one contextvar
read), so the root span lands under the user's request span.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from ... import _stats
from ..._version import __version__
from ...errors import ConfigurationError
from . import metrics as _metrics
from .prometheus import PROMETHEUS_PORT_ENV, PrometheusEndpoint, parse_port, start_endpoint
from .providers import OtelSettings, resolve_providers
from .spans import emit_run

if TYPE_CHECKING:
    from ...result import RunResult

__all__ = [
    "OTEL_SINK",
    "PROMETHEUS_SINK",
    "OtelSink",
    "PrometheusSink",
    "active_otel_sinks",
    "all_otel_sinks",
    "capture_parent_context",
    "flush_providers",
    "prometheus_endpoint",
    "settings",
    "shutdown_providers",
    "start_prometheus_from_environment",
]

log = logging.getLogger("neuronscope")
_SCOPE = "neuronscope"
_settings = OtelSettings()
_lock = threading.Lock()
_prometheus: PrometheusEndpoint | None = None  # the scrape endpoint, when one was asked for
_prometheus_lock = threading.Lock()  # start/stop of the endpoint (binding a port can take a while)

try:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
except ImportError:  # pragma: no cover - very old API
    _SUPPRESS_INSTRUMENTATION_KEY = "suppress_instrumentation"


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
        _set_prometheus(port, candidate.service_name, source="configure(prometheus_port)")
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


def _port_for_this_rank(port: int | None) -> int | None:
    """Under torchrun every local rank inherits the same port: local rank N serves port + N."""
    if not port:
        return port  # None (stop) or 0 (a free port)
    from ..._ranks import current

    info = current()
    return port + info.local_rank if info is not None and info.local_rank else port


def _set_prometheus(port: int | None, service_name: str | None, *, source: str) -> None:
    """Start, move or stop the endpoint. Raises ConfigurationError (nothing changed) on failure."""
    global _prometheus
    port = _port_for_this_rank(port)
    with _prometheus_lock:
        current = _prometheus
        if current is not None and port is not None and port in (current.requested_port, current.port):
            return  # already serving there
        new = start_endpoint(port, service_name, source=source) if port is not None else None
        _prometheus = new
    if current is not None:
        _safe(current.stop)


def start_prometheus_from_environment() -> None:
    """``NEURONSCOPE_PROMETHEUS_PORT``: start the endpoint; problems are only logged, never raised."""
    from ... import _env
    from ..._config import disabled_by_environment

    if _prometheus is not None or disabled_by_environment():
        return  # (NEURONSCOPE_DISABLED=1: no profiles, so no server either)
    port = _env.PROMETHEUS_PORT.get(lenient=True)  # malformed: one warning naming it, no endpoint
    if port is None:
        return
    try:
        _set_prometheus(port, _settings.service_name, source=PROMETHEUS_PORT_ENV)
    except ConfigurationError as exc:  # the port is in use, the exporter is missing
        log.warning("neuronscope: no Prometheus endpoint: %s", exc)


def prometheus_endpoint() -> PrometheusEndpoint | None:
    """The running scrape endpoint (``.url``, ``.port``), or None."""
    return _prometheus


def _forget_prometheus_in_child() -> None:
    # A forked child has the listening socket but not the server thread: close its copy (the
    # parent keeps serving) and forget it; shutdown() would wait for a loop that is not running.
    global _prometheus
    endpoint, _prometheus = _prometheus, None
    if endpoint is not None:
        try:
            endpoint._server.socket.close()
        except Exception:  # noqa: BLE001
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_prometheus_in_child)


def capture_parent_context() -> Any:
    """The context current on the calling thread (cheap: one contextvar read)."""
    return otel_context.get_current()


class OtelSink:
    """Spans (under the user's span current when the profile started) and pushed metrics, to
    the configured OpenTelemetry providers. Active when a provider is configured."""

    name = "opentelemetry"

    def export(self, result: RunResult) -> dict[str, Any] | None:
        settings_now = _settings
        parent = result.otel_parent
        if parent is not None and otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY, parent):
            return None
        tracer_provider, meter_provider = resolve_providers(settings_now)
        added: dict[str, Any] | None = None
        root_context = None
        if tracer_provider is not None:
            tracer = _RootSpanTracer(tracer_provider.get_tracer(_SCOPE, __version__))
            trace_id, span_id, count = emit_rank_run(result, tracer, settings_now.op_spans, settings_now.max_spans, parent)
            root_context = tracer.root_context
            sampled = bool(root_context is not None and root_context.trace_flags.sampled)
            added = {"otel": {"trace_id": trace_id, "span_id": span_id, "spans": count, "sampled": sampled}}
        if meter_provider is not None:
            _record_all_metrics(result, meter_provider, root_context)
        return added

    def force_flush(self, timeout_s: float | None) -> bool:
        return flush_providers(timeout_s)

    def shutdown(self) -> None:
        for provider in _settings._own:
            if provider is not None:
                _safe(provider.shutdown)


class PrometheusSink:
    """The metrics of every run on the scrape endpoint (``NEURONSCOPE_PROMETHEUS_PORT`` or
    ``configure(prometheus_port=...)``), with the run's root span as the exemplar. Active
    while the endpoint serves."""

    name = "prometheus"

    def export(self, result: RunResult) -> None:
        endpoint = _prometheus
        if endpoint is None or endpoint.meter_provider is None:
            return None
        parent = result.otel_parent
        if parent is not None and otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY, parent):
            return None
        _record_all_metrics(result, endpoint.meter_provider, _root_span_context(result))
        return None

    def force_flush(self, timeout_s: float | None) -> bool:
        return True  # scraped, not pushed

    def shutdown(self) -> None:
        global _prometheus
        with _prometheus_lock:
            endpoint, _prometheus = _prometheus, None
        if endpoint is not None:
            _safe(endpoint.stop)


OTEL_SINK = OtelSink()
PROMETHEUS_SINK = PrometheusSink()


def active_otel_sinks() -> list[Any]:
    """The OpenTelemetry sinks a run goes to now (configuration decides)."""
    # OpenTelemetry: providers come from configure(), the environment or the global API; the
    # sink resolves them per run and does nothing when there are none
    return [OTEL_SINK, PROMETHEUS_SINK] if _prometheus is not None else [OTEL_SINK]


def all_otel_sinks() -> list[Any]:
    """Every OpenTelemetry sink, for flush and shutdown."""
    return [OTEL_SINK, PROMETHEUS_SINK]


def _root_span_context(result: RunResult) -> Any:
    """The root span of ``result``'s trace (its ids in the manifest), for exemplars."""
    otel = result.manifest.get("otel")
    if not isinstance(otel, dict) or not otel.get("trace_id") or not otel.get("span_id"):
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED if otel.get("sampled", True) else TraceFlags.DEFAULT)
    return SpanContext(int(otel["trace_id"], 16), int(otel["span_id"], 16), is_remote=False, trace_flags=flags)


def _record_all_metrics(result: RunResult, provider: Any, root_context: Any) -> None:
    try:
        _record_metrics(result, provider, root_context)
        _record_neuron_metrics(result, provider)
    except Exception as exc:  # noqa: BLE001 - one broken provider must not stop the other
        _stats.contain("recording metrics", exc, exc_info=False, once=True)


def emit_rank_run(run: RunResult, tracer: Any, mode: str, max_spans: int, parent: Any) -> tuple[str, str, int]:
    """``emit_run``; for a rank of a distributed job, under its step's derived context
    (:mod:`.distributed`), and the step span itself from the lowest profiled rank."""
    from .distributed import emit_step_span, step_context

    step = step_context(run, parent)
    if step is None:
        return emit_run(run, tracer, mode, max_spans, parent)
    name = f"{run.name} rank {step.rank}"
    trace_id, span_id, count = emit_run(run, tracer, mode, max_spans, step.context, root_name=name)
    if step.emits_root and emit_step_span(getattr(tracer, "_tracer", tracer), run, step):
        count += 1
    return trace_id, span_id, count


class _RootSpanTracer:
    """Passes spans through to the tracer and remembers the first one's context (the root):
    metrics recorded under it carry its trace id as exemplars (and only when it was sampled)."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self.root_context: Any = None

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        span = self._tracer.start_span(*args, **kwargs)
        if self.root_context is None:
            self.root_context = span.get_span_context()
        return span

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracer, name)


def _record_metrics(run: "RunResult", meter_provider: Any, span_context: Any = None) -> None:
    """One run's metrics on ``meter_provider`` (also used by ``export_run``)."""
    _metrics.record_run_metrics(run, meter_provider, _settings.metrics_top_ops, span_context)


_neuron_instruments: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(meter provider) -> (weakref to it, instruments)


def _neuron_instruments_for(meter_provider: Any) -> dict[str, Any]:
    import weakref

    key = id(meter_provider)
    with _lock:
        entry = _neuron_instruments.get(key)
        # the same reuse guard as metrics.instruments_for: an id is reused after a provider dies
        found = entry[1] if entry is not None and entry[0]() is meter_provider else None
        if found is None:
            meter = meter_provider.get_meter(_SCOPE, __version__)

            def gauge(name: str, **kw: Any) -> Any:  # a gauge's set(); a histogram's record() before API 1.27
                create = getattr(meter, "create_gauge", None)
                return create(name, **kw).set if create else meter.create_histogram(name, **kw).record

            found = {
                # utilisation as a fraction with unit "1", as OpenTelemetry's *.utilization metrics
                "util": gauge("neuronscope.neuron.utilization", unit="1", description="Neuron Explorer utilisation of one profile, 0-1 (MFU, HFU, MBU, engine active, ...)"),
                "time": gauge("neuronscope.neuron.device_time", unit="s", description="On-device time of one profile (Neuron Explorer total_time; metric=dma_active: DMA active time)"),
                "bytes": gauge("neuronscope.neuron.memory.io", unit="By", description="Bytes one profile moved (Neuron Explorer hbm_read, hbm_write, spill_reload, spill_save)"),
                "host_mem": meter.create_histogram("neuronscope.neuron.host_memory.usage", unit="By", description="Host memory samples of the Neuron system profile"),
                "cpu": meter.create_histogram("neuronscope.neuron.cpu.utilization", unit="1", description="Per-core CPU utilisation samples of the Neuron system profile, 0-1"),
                "dropped": meter.create_counter("neuronscope.neuron.dropped_events", unit="{event}", description="Trace events the Neuron runtime dropped during capture"),
            }
            _neuron_instruments[key] = (weakref.ref(meter_provider), found)
        return found


_UTIL_METRICS = {"mfu_percent": "mfu", "hfu_percent": "hfu", "mbu_percent": "mbu", "dma_mbu_percent": "dma_mbu",
                 "dma_active_percent": "dma_active", "cc_active_percent": "cc_active", "throttle_active_percent": "throttle_active"}


def _record_neuron_metrics(run: "RunResult", meter_provider: Any) -> None:
    """Neuron device facts as metrics. Only Neuron runs that have them; failures are logged."""
    neuron = run.manifest.get("neuron")
    if not isinstance(neuron, dict):  # only a Neuron backend writes these facts
        return
    try:
        inst = _neuron_instruments_for(meter_provider)
        # the same bounded profile label as the core metrics (a service cannot blow up the backend)
        base = {"neuronscope.device": run.device, "neuronscope.profile.name": _metrics._cardinality.profile(run.name)}
        metrics = (neuron.get("explorer") or {}).get("metrics") or {}
        for key, label in _UTIL_METRICS.items():
            if isinstance(metrics.get(key), (int, float)):
                inst["util"](float(metrics[key]) / 100, base | {"neuronscope.neuron.metric": label})
        for engine, pct in (metrics.get("engine_active_percent") or {}).items():
            inst["util"](float(pct) / 100, base | {"neuronscope.neuron.metric": f"{engine}_engine_active"})
        if isinstance(metrics.get("total_time_s"), (int, float)):
            inst["time"](float(metrics["total_time_s"]), base)
        if isinstance(metrics.get("dma_active_time_s"), (int, float)):
            inst["time"](float(metrics["dma_active_time_s"]), base | {"neuronscope.neuron.metric": "dma_active"})
        for key in ("hbm_read_bytes", "hbm_write_bytes", "spill_reload_bytes", "spill_save_bytes"):
            if isinstance(metrics.get(key), (int, float)):
                inst["bytes"](float(metrics[key]), base | {"neuronscope.neuron.metric": key.removesuffix("_bytes")})
        profile = run.device_facts.system_profile
        for sample in getattr(profile, "mem_usage", ()):
            if isinstance(sample.get("usage"), (int, float)):
                inst["host_mem"].record(sample["usage"], base)
        for sample in getattr(profile, "cpu_util", ()):
            if isinstance(sample.get("util"), (int, float)):
                inst["cpu"].record(sample["util"] / 100, base)  # the system profile says percent
        dropped = neuron.get("dropped_events")
        if isinstance(dropped, dict) and dropped.get("dropped"):
            inst["dropped"].add(int(dropped["dropped"]), base)
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: recording Neuron metrics failed: %s", exc)


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


def shutdown_providers() -> None:
    OTEL_SINK.shutdown()
    PROMETHEUS_SINK.shutdown()


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: %s failed: %s", getattr(fn, "__qualname__", fn), exc)
        return False
