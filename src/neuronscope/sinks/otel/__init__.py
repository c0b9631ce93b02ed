"""OpenTelemetry sink: spans and metrics for every completed run.

Runs on the background worker, after the run has been summarised. The calling thread
only captures the current OpenTelemetry context when the profile starts (one contextvar
read), so the root span lands under the user's request span.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.metrics import Observation

from ... import _stats
from ..._version import __version__
from .providers import OtelSettings, resolve_providers
from .spans import emit_run

if TYPE_CHECKING:
    from ..._run import Run

__all__ = ["capture_parent_context", "export_to_otel", "flush_providers", "settings", "shutdown_providers"]

log = logging.getLogger("neuronscope")
_SCOPE = "neuronscope"
_settings = OtelSettings()
_lock = threading.Lock()
_instruments: dict[int, tuple[Any, Any]] = {}  # id(meter provider) -> (op histogram, duration histogram)

try:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
except ImportError:  # pragma: no cover - very old API
    _SUPPRESS_INSTRUMENTATION_KEY = "suppress_instrumentation"


def settings() -> OtelSettings:
    return _settings


def configure_otel(**changes: Any) -> None:
    """Apply OpenTelemetry options (validated first; nothing changes on error)."""
    global _settings
    candidate = OtelSettings(**{**_settings.__dict__, **changes, "_own": []})
    candidate.validate()
    with _lock:
        old = _settings
        _settings = candidate
    # Providers we built for the old settings are ours to close.
    for provider in old._own:
        if provider is not None:
            _safe(provider.shutdown)


def capture_parent_context() -> Any:
    """The context current on the calling thread (cheap: one contextvar read)."""
    return otel_context.get_current()


def export_to_otel(run: "Run") -> None:
    """The sink: spans + metrics for a completed run. Failures are logged and counted."""
    settings_now = _settings
    parent = getattr(run, "_otel_parent", None)
    if parent is not None and otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY, parent):
        return
    tracer_provider, meter_provider = resolve_providers(settings_now)
    if tracer_provider is not None:
        tracer = tracer_provider.get_tracer(_SCOPE, __version__)
        trace_id, span_id, count = emit_run(run, tracer, settings_now.op_spans, settings_now.max_spans, parent)
        run.manifest["otel"] = {"trace_id": trace_id, "span_id": span_id, "spans": count}
    if meter_provider is not None:
        _record_metrics(run, meter_provider)
        _record_neuron_metrics(run, meter_provider)


def _instruments_for(meter_provider: Any) -> tuple[Any, Any]:
    key = id(meter_provider)
    with _lock:
        found = _instruments.get(key)
        if found is None:
            meter = meter_provider.get_meter(_SCOPE, __version__)
            op_hist = meter.create_histogram(
                "neuronscope.op.device_time", unit="s", description="Self device time of an op within one profiled call"
            )
            dur_hist = meter.create_histogram(
                "neuronscope.profile.duration", unit="s", description="Wall-clock duration of profiled calls"
            )
            # Outcome counts come from the process counters at collection time, so the hot
            # path (an unsampled call) pays nothing for metrics.
            meter.create_observable_counter(
                "neuronscope.profile.calls",
                callbacks=[_observe_calls],
                unit="{call}",
                description="Calls of profiled code by outcome (profiled, skipped, dropped, unsampled, ...)",
            )
            found = _instruments[key] = (op_hist, dur_hist)
        return found


def _observe_calls(_options: Any) -> list[Observation]:
    return [Observation(v, {"neuronscope.outcome": k}) for k, v in _stats.stats().items()]


def _record_metrics(run: "Run", meter_provider: Any) -> None:
    op_hist, dur_hist = _instruments_for(meter_provider)
    base = {"neuronscope.device": run.device, "neuronscope.profile.name": run.name[:256]}
    dur_hist.record(max(run.end_ns - run.start_ns, 0) / 1e9, base)
    summary = run._summary  # not .summary: that waits for processing, which is us
    if summary is None:
        return
    for row in summary.rows:
        op_hist.record(row.self_device_time_us / 1e6, base | {"neuronscope.op.name": row.name[:256]})


_neuron_instruments: dict[int, dict[str, Any]] = {}  # id(meter provider) -> instruments


def _neuron_instruments_for(meter_provider: Any) -> dict[str, Any]:
    key = id(meter_provider)
    with _lock:
        found = _neuron_instruments.get(key)
        if found is None:
            meter = meter_provider.get_meter(_SCOPE, __version__)

            def gauge(name: str, **kw: Any) -> Any:  # a gauge's set(); a histogram's record() before API 1.27
                create = getattr(meter, "create_gauge", None)
                return create(name, **kw).set if create else meter.create_histogram(name, **kw).record

            found = _neuron_instruments[key] = {
                "util": gauge("neuronscope.neuron.utilization", unit="%", description="Neuron Explorer utilisation of one profile (MFU, HFU, MBU, engine active, ...)"),
                "time": gauge("neuronscope.neuron.device_time", unit="s", description="On-device time of one profile (Neuron Explorer total_time)"),
                "host_mem": meter.create_histogram("neuronscope.neuron.host_memory.usage", unit="By", description="Host memory samples of the Neuron system profile"),
                "cpu": meter.create_histogram("neuronscope.neuron.cpu.utilization", unit="%", description="Per-core CPU utilisation samples of the Neuron system profile"),
                "dropped": meter.create_counter("neuronscope.neuron.dropped_events", unit="{event}", description="Trace events the Neuron runtime dropped during capture"),
            }
        return found


_UTIL_METRICS = {"mfu_percent": "mfu", "hfu_percent": "hfu", "mbu_percent": "mbu", "dma_mbu_percent": "dma_mbu",
                 "dma_active_percent": "dma_active", "cc_active_percent": "cc_active", "throttle_active_percent": "throttle_active"}


def _record_neuron_metrics(run: "Run", meter_provider: Any) -> None:
    """Neuron device facts as metrics. Only Neuron runs that have them; failures are logged."""
    neuron = run.manifest.get("neuron")
    if run.device != "neuron" or not isinstance(neuron, dict):
        return
    try:
        inst = _neuron_instruments_for(meter_provider)
        base = {"neuronscope.device": run.device, "neuronscope.profile.name": run.name[:256]}
        metrics = (neuron.get("explorer") or {}).get("metrics") or {}
        for key, label in _UTIL_METRICS.items():
            if isinstance(metrics.get(key), (int, float)):
                inst["util"](float(metrics[key]), base | {"neuronscope.neuron.metric": label})
        for engine, pct in (metrics.get("engine_active_percent") or {}).items():
            inst["util"](float(pct), base | {"neuronscope.neuron.metric": f"{engine}_engine_active"})
        if isinstance(metrics.get("total_time_s"), (int, float)):
            inst["time"](float(metrics["total_time_s"]), base)
        profile = getattr(run, "_system_profile", None)
        for sample in getattr(profile, "mem_usage", ()):
            if isinstance(sample.get("usage"), (int, float)):
                inst["host_mem"].record(sample["usage"], base)
        for sample in getattr(profile, "cpu_util", ()):
            if isinstance(sample.get("util"), (int, float)):
                inst["cpu"].record(sample["util"], base)
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
    for provider in _settings._own:
        if provider is not None:
            _safe(provider.shutdown)


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: %s failed: %s", getattr(fn, "__qualname__", fn), exc)
        return False
