"""The OpenTelemetry sinks: a finished run's spans and pushed metrics (:class:`OtelSink`) and
its metrics on the scrape endpoint (:class:`PrometheusSink`). Both run on the output worker;
the calling thread only captured the OpenTelemetry context when the profile started (one
contextvar read), so the root span lands under the user's request span."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from ... import _stats
from ..._version import __version__
from . import endpoint as _endpoint
from . import metrics as _metrics
from .providers import resolve_providers
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
    "emit_rank_run",
    "record_metrics",
    "record_neuron_metrics",
]

_SCOPE = "neuronscope"
_lock = threading.Lock()

try:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
except ImportError:  # pragma: no cover - very old API
    _SUPPRESS_INSTRUMENTATION_KEY = "suppress_instrumentation"


def _settings() -> Any:
    from . import settings

    return settings()


class OtelSink:
    """Spans (under the user's span current when the profile started) and pushed metrics, to
    the configured OpenTelemetry providers. Active when a provider is configured."""

    name = "opentelemetry"

    def export(self, result: RunResult) -> dict[str, Any] | None:
        settings_now = _settings()
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
        from . import flush_providers

        return flush_providers(timeout_s)

    def shutdown(self) -> None:
        from . import shutdown_own_providers

        shutdown_own_providers()


class PrometheusSink:
    """The metrics of every run on the scrape endpoint (``NEURONSCOPE_PROMETHEUS_PORT`` or
    ``configure(prometheus_port=...)``), with the run's root span as the exemplar. Active
    while the endpoint serves."""

    name = "prometheus"

    def export(self, result: RunResult) -> None:
        endpoint = _endpoint.prometheus_endpoint()
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
        _endpoint.stop_prometheus()


OTEL_SINK = OtelSink()
PROMETHEUS_SINK = PrometheusSink()


def active_otel_sinks() -> list[Any]:
    """The OpenTelemetry sinks a run goes to now (configuration decides)."""
    # OpenTelemetry: providers come from configure(), the environment or the global API; the
    # sink resolves them per run and does nothing when there are none
    return [OTEL_SINK, PROMETHEUS_SINK] if _endpoint.prometheus_endpoint() is not None else [OTEL_SINK]


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
        record_metrics(result, provider, root_context)
        record_neuron_metrics(result, provider)
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


def record_metrics(run: "RunResult", meter_provider: Any, span_context: Any = None) -> None:
    """One run's metrics on ``meter_provider`` (also used by ``export_run``)."""
    _metrics.record_run_metrics(run, meter_provider, _settings().metrics_top_ops, span_context)


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
                "util": gauge(
                    "neuronscope.neuron.utilization",
                    unit="1",
                    description="Neuron Explorer utilisation of one profile, 0-1 (MFU, HFU, MBU, engine active, ...)",
                ),
                "time": gauge(
                    "neuronscope.neuron.device_time",
                    unit="s",
                    description="On-device time of one profile (Neuron Explorer total_time; metric=dma_active: DMA active time)",
                ),
                "bytes": gauge(
                    "neuronscope.neuron.memory.io",
                    unit="By",
                    description="Bytes one profile moved (Neuron Explorer hbm_read, hbm_write, spill_reload, spill_save)",
                ),
                "host_mem": meter.create_histogram(
                    "neuronscope.neuron.host_memory.usage",
                    unit="By",
                    description="Host memory samples of the Neuron system profile",
                ),
                "cpu": meter.create_histogram(
                    "neuronscope.neuron.cpu.utilization",
                    unit="1",
                    description="Per-core CPU utilisation samples of the Neuron system profile, 0-1",
                ),
                "dropped": meter.create_counter(
                    "neuronscope.neuron.dropped_events",
                    unit="{event}",
                    description="Trace events the Neuron runtime dropped during capture",
                ),
            }
            _neuron_instruments[key] = (weakref.ref(meter_provider), found)
        return found


_UTIL_METRICS = {
    "mfu_percent": "mfu",
    "hfu_percent": "hfu",
    "mbu_percent": "mbu",
    "dma_mbu_percent": "dma_mbu",
    "dma_active_percent": "dma_active",
    "cc_active_percent": "cc_active",
    "throttle_active_percent": "throttle_active",
}


def record_neuron_metrics(run: "RunResult", meter_provider: Any) -> None:
    """Neuron device facts as metrics. Only Neuron runs that have them; failures are logged."""
    neuron = run.manifest.get("neuron")
    if not isinstance(neuron, dict):  # only a Neuron backend writes these facts
        return
    try:
        inst = _neuron_instruments_for(meter_provider)
        # the same bounded profile label as the core metrics (a service cannot blow up the backend)
        base = {"neuronscope.device": run.device, "neuronscope.profile.name": _metrics.profile_label(run.name)}
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
        _stats.contain("recording Neuron metrics", exc, exc_info=False, once=True)
