"""The metrics of a completed run, with bounded attribute cardinality.

Names follow the OpenTelemetry semantic-convention rules for a system-specific instrument
(``neuronscope.*``; durations in ``s``, ratios in ``1``, counts in ``{call}`` / ``{run}``;
counters pluralised, no ``_total``: Prometheus exporters append it). What the Prometheus
exporter (and Prometheus' own OTLP receiver) turn them into is in :data:`PROMETHEUS_NAMES`.

``hw.gpu.utilization`` is deliberately not reused for the device busy fraction: that metric is
a sampled hardware gauge (NVML/DCGM collectors, ``hw.id`` required, GPUs only), and a second
producer with a per-profile meaning would collide with it. ``gen_ai.*`` metrics describe model
requests, which a profiled call is not necessarily.

Cardinality: op names come from the workload (custom ops, compiled graphs, Neuron kernels can
be thousands), so each ``(device, profile name)`` admits at most ``top_ops`` op names, taken
from each run's heaviest ops in order while there is room; once admitted, a name keeps its
series; everything else is folded into ``other`` (its time is kept: the per-run values still
add up to the summary's total). Profile names are capped at
:data:`MAX_PROFILE_NAMES` per process the same way.
"""

from __future__ import annotations

import bisect
import inspect
import logging
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.metrics import Observation

from ... import _stats
from ..._version import __version__

if TYPE_CHECKING:
    from ...result import RunResult

__all__ = [
    "DEFAULT_TOP_OPS",
    "MAX_PROFILE_NAMES",
    "OTHER",
    "PROMETHEUS_NAMES",
    "profile_label",
    "record_run_metrics",
    "reset_cardinality",
]

log = logging.getLogger("neuronscope")
_SCOPE = "neuronscope"

DEFAULT_TOP_OPS = 20
MAX_PROFILE_NAMES = 100
OTHER = "other"
_MAX_LABEL_CHARS = 256

OP_DEVICE_TIME = "neuronscope.op.device_time"
PROFILE_DURATION = "neuronscope.profile.duration"
PROFILE_CALLS = "neuronscope.profile.calls"
DEVICE_BUSY = "neuronscope.device.busy"
DIAGNOSIS_RUNS = "neuronscope.diagnosis.runs"
STEP_DURATION = "neuronscope.step.duration"
#: calls profiled on demand, by ``neuronscope.trigger.kind``: arm, slow, baseline (bounded labels)
TRIGGERED_CALLS = "neuronscope.profile.triggered"
MEMORY_PEAK = "neuronscope.memory.peak"
#: share of a profiled call's window that collectives ran with no compute beside them (0-1)
COMMUNICATION_EXPOSED = "neuronscope.communication.exposed"
#: collective time per profiled call, by ``neuronscope.collective.kind`` (a fixed set of kinds)
COMMUNICATION_TIME = "neuronscope.communication.time"
#: a profiled call's modelled ops against the device's roofs (0-1, time-weighted), by
#: ``neuronscope.roofline.kind``: flops (an MFU), bytes (an MBU), roof (the nearer roof of each op)
ROOFLINE_FRACTION = "neuronscope.roofline.fraction"

#: OpenTelemetry name -> the series Prometheus holds (opentelemetry-exporter-prometheus and
#: Prometheus' OTLP receiver agree on these: unit suffix, ``_total`` on counters, ``1`` -> none).
PROMETHEUS_NAMES = {
    OP_DEVICE_TIME: "neuronscope_op_device_time_seconds",
    PROFILE_DURATION: "neuronscope_profile_duration_seconds",
    PROFILE_CALLS: "neuronscope_profile_calls_total",
    DEVICE_BUSY: "neuronscope_device_busy",
    DIAGNOSIS_RUNS: "neuronscope_diagnosis_runs_total",
    STEP_DURATION: "neuronscope_step_duration_seconds",
    MEMORY_PEAK: "neuronscope_memory_peak_bytes",
    TRIGGERED_CALLS: "neuronscope_profile_triggered_total",
    COMMUNICATION_EXPOSED: "neuronscope_communication_exposed",
    COMMUNICATION_TIME: "neuronscope_communication_time_seconds",
    ROOFLINE_FRACTION: "neuronscope_roofline_fraction",
}

# Bucket boundaries. The SDK's default ([0, 5, 10, ... 10000]) is made for milliseconds and
# would put every value in seconds into its first bucket.
# Op self device time per profile: 1 us .. 10 s.
OP_TIME_BUCKETS_S = (1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
# Profiled calls and steps: 0.5 ms .. 60 s.
DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Memory peak of a profiled call (memory=True): 1 MiB .. 1 TiB, by powers of 4.
MEMORY_BUCKETS_BYTES = tuple(float(1 << (20 + 2 * i)) for i in range(11))
UTILIZATION_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


@dataclass(frozen=True)
class _Instruments:
    op_time: Any
    duration: Any
    utilization: Any
    diagnosis_runs: Any
    step_time: Any
    memory_peak: Any
    takes_context: bool
    comm_exposed: Any = None
    comm_time: Any = None  # API >= 1.27: record(..., context=) -> exemplars with the run's trace id
    roofline: Any = None


_lock = threading.Lock()
# id(meter provider) -> (a reference to it, its instruments). The reference guards against a
# dead provider's id being reused by a new one, which would get the dead one's instruments.
_instruments: dict[int, tuple[Any, _Instruments]] = {}


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:  # not weak-referenceable: hold it (a provider lives as long as the process anyway)
        return lambda: obj


def _histogram(meter: Any, name: str, unit: str, description: str, buckets: tuple[float, ...]) -> Any:
    try:
        return meter.create_histogram(name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets)
    except TypeError:  # API < 1.23: no advisory; the provider's view decides
        return meter.create_histogram(name, unit=unit, description=description)


def instruments_for(meter_provider: Any) -> _Instruments:
    key = id(meter_provider)
    with _lock:
        entry = _instruments.get(key)
        if entry is not None and entry[0]() is meter_provider:
            return entry[1]
        meter = meter_provider.get_meter(_SCOPE, __version__)
        op_time = _histogram(
            meter,
            OP_DEVICE_TIME,
            "s",
            "Self device time of an op within one profiled call, summed over its calls",
            OP_TIME_BUCKETS_S,
        )
        duration = _histogram(meter, PROFILE_DURATION, "s", "Wall-clock duration of profiled calls", DURATION_BUCKETS_S)
        utilization = _histogram(
            meter, DEVICE_BUSY, "1", "Fraction of a profiled call's window the device was busy", UTILIZATION_BUCKETS
        )
        step_time = _histogram(
            meter, STEP_DURATION, "s", "Wall-clock duration of the steps of profiled calls", DURATION_BUCKETS_S
        )
        memory_peak = _histogram(
            meter, MEMORY_PEAK, "By", "Peak allocated memory of profiled calls recorded with memory=True", MEMORY_BUCKETS_BYTES
        )
        diagnosis_runs = meter.create_counter(
            DIAGNOSIS_RUNS,
            unit="{run}",
            description="Diagnosed profiles by what bound them (device, communication, host, launch, sync, data, compile, stream_wait)",
        )
        # Outcome counts come from the process counters at collection time, so the hot path
        # (an unsampled call) pays nothing for metrics.
        meter.create_observable_counter(
            PROFILE_CALLS,
            callbacks=[_observe_calls],
            unit="{call}",
            description="Calls of profiled code by outcome (profiled, unsampled, skipped, skipped_backpressure, joined, ...)",
        )
        meter.create_observable_counter(
            TRIGGERED_CALLS,
            callbacks=[_observe_triggers],
            unit="{call}",
            description="Calls profiled on demand, by trigger kind: arm (ns.arm / neuronscope arm), slow (a SlowCalls trigger), baseline",
        )
        comm_exposed = _histogram(
            meter,
            COMMUNICATION_EXPOSED,
            "1",
            "Fraction of a profiled call's window in collectives with no compute beside them",
            UTILIZATION_BUCKETS,
        )
        comm_time = _histogram(
            meter, COMMUNICATION_TIME, "s", "Collective time within one profiled call, by collective kind", OP_TIME_BUCKETS_S
        )
        roofline = _histogram(
            meter,
            ROOFLINE_FRACTION,
            "1",
            "Modelled ops of a profiled call against the device's roofs, time-weighted: flops (MFU), bytes (MBU), roof",
            UTILIZATION_BUCKETS,
        )
        takes_context = "context" in inspect.signature(op_time.record).parameters
        found = _Instruments(
            op_time,
            duration,
            utilization,
            diagnosis_runs,
            step_time,
            memory_peak,
            takes_context,
            comm_exposed,
            comm_time,
            roofline,
        )
        _instruments[key] = (_ref(meter_provider), found)
        return found


def forget_provider(meter_provider: Any) -> None:
    """Drop the cached instruments of a provider that was shut down (its id may be reused)."""
    with _lock:
        _instruments.pop(id(meter_provider), None)


#: counts in ns.stats() that are not what happened to a call (a profiled call that waited for the
#: backlog is counted as profiled already)
_NOT_OUTCOMES = frozenset(
    {
        "calls",
        "backpressure_waits",
        "armed",
        "triggered",
        "trigger_baselines",
        "arm_expired",
        "triggers_fired",
        "triggers_suppressed",
    }
)
_TRIGGER_KINDS = (("arm", "armed"), ("slow", "triggered"), ("baseline", "trigger_baselines"))


def _observe_calls(_options: Any) -> list[Observation]:
    return [Observation(v, {"neuronscope.outcome": k}) for k, v in _stats.stats().items() if k not in _NOT_OUTCOMES]


def _observe_triggers(_options: Any) -> list[Observation]:
    counts = _stats.stats()
    return [Observation(counts.get(key, 0), {"neuronscope.trigger.kind": kind}) for kind, key in _TRIGGER_KINDS]


class _Cardinality:
    """Which label values a process has admitted; everything else becomes ``other``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: set[str] = set()
        self._ops: dict[tuple[str, str], set[str]] = {}

    def reset(self) -> None:
        with self._lock:
            self._profiles.clear()
            self._ops.clear()

    def profile(self, name: str) -> str:
        name = name[:_MAX_LABEL_CHARS]
        with self._lock:
            if name in self._profiles:
                return name
            if len(self._profiles) < MAX_PROFILE_NAMES:
                self._profiles.add(name)
                return name
        return OTHER

    def ops(self, device: str, profile: str, rows: Iterable[Any], top_ops: int) -> list[tuple[str, float]]:
        """(label, self device seconds) for one run: at most ``top_ops`` distinct names per
        (device, profile) over the life of the process, plus ``other`` for the rest. A name is
        admitted when it is among a run's ``top_ops`` heaviest while there is room."""
        out: list[tuple[str, float]] = []
        other_s = 0.0
        folded = False
        with self._lock:
            admitted = self._ops.setdefault((device, profile), set())
            for rank, row in enumerate(rows):  # heaviest first (Summary.rows is sorted)
                name = row.name[:_MAX_LABEL_CHARS]
                seconds = row.self_device_time_us / 1e6
                # An admitted name always keeps its series (it exists anyway), so one op's time
                # is never split between its own series and "other" from run to run.
                if name in admitted or (rank < top_ops and name != OTHER and len(admitted) < top_ops):
                    admitted.add(name)
                    out.append((name, seconds))
                else:
                    other_s += seconds
                    folded = True
        if folded:
            out.append((OTHER, other_s))
        return out


_cardinality = _Cardinality()


def reset_cardinality() -> None:
    """Forget the admitted op and profile names (when ``metrics_top_ops`` changes)."""
    _cardinality.reset()


def profile_label(name: str) -> str:
    """The bounded ``neuronscope.profile.name`` label of a profile named ``name`` (``other`` past
    :data:`MAX_PROFILE_NAMES`): the core metrics here and the Neuron metrics (export.py) label with it."""
    return _cardinality.profile(name)


def _exemplar_context(span_context: Any) -> Any:
    """A context whose current span is the run's root span: the SDK's trace-based exemplar
    filter then attaches its trace and span id to the measurements."""
    if span_context is None or not span_context.is_valid:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def record_run_metrics(run: "RunResult", meter_provider: Any, top_ops: int = DEFAULT_TOP_OPS, span_context: Any = None) -> None:
    """Record one completed run's measurements on ``meter_provider``."""
    inst = instruments_for(meter_provider)
    ctx = _exemplar_context(span_context) if inst.takes_context else None
    kw = {"context": ctx} if ctx is not None else {}
    profile = _cardinality.profile(run.name)
    base = {"neuronscope.device": run.device, "neuronscope.profile.name": profile}
    duration_s = max(run.end_ns - run.start_ns, 0) / 1e9
    inst.duration.record(duration_s, base, **kw)
    summary = run.summary
    if summary is not None:
        for name, seconds in _cardinality.ops(run.device, profile, summary.rows, top_ops):
            inst.op_time.record(seconds, base | {"neuronscope.op.name": name}, **kw)
    if summary is not None and inst.roofline is not None:
        from ...analysis.roofline import run_roofline

        fractions = run_roofline(summary)  # record_shapes=True on a device with known roofs
        if fractions is not None:
            for kind, pct in (("flops", fractions.flops_pct), ("bytes", fractions.bytes_pct), ("roof", fractions.roof_pct)):
                inst.roofline.record(min(max(pct / 100.0, 0.0), 1.0), base | {"neuronscope.roofline.kind": kind}, **kw)
    memory = run.memory  # profile_neuron(memory=True)
    if memory is not None and memory.allocations:
        inst.memory_peak.record(int(memory.peak_bytes), base | {"neuronscope.memory.device": memory.device}, **kw)
    diagnosis = run.diagnosis  # set by the analysis when it ran; else None
    if diagnosis is None:
        return
    inst.utilization.record(min(max(diagnosis.device_busy_pct / 100.0, 0.0), 1.0), base, **kw)
    inst.diagnosis_runs.add(1, base | {"neuronscope.bound_by": diagnosis.bound_by}, **kw)
    comm = getattr(diagnosis, "communication", None)
    if comm is not None and inst.comm_exposed is not None:
        inst.comm_exposed.record(min(max(comm.exposed_pct_of_window / 100.0, 0.0), 1.0), base, **kw)
        for kind in comm.by_kind:  # kinds are a fixed set (COLLECTIVE_KINDS): bounded labels
            inst.comm_time.record(kind.time_us / 1e6, base | {"neuronscope.collective.kind": kind.kind}, **kw)
    steps = diagnosis.steps
    if steps is not None:
        for step in steps.per_step:
            inst.step_time.record(step.duration_us / 1e6, base, **kw)
    else:
        # No step markers (a decorated call in a service, a block without ns.step()): the
        # profile is one step, so the step-time panels show the calls instead of "No data".
        inst.step_time.record(duration_s, base, **kw)


def bucket_index(bounds: tuple[float, ...] | list[float], value: float) -> int:
    """The explicit-bucket index OpenTelemetry puts ``value`` in: buckets are ``(b[i-1], b[i]]``."""
    return bisect.bisect_left(bounds, value)
