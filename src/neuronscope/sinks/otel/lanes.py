"""The device's runtime and hardware lanes as spans: framework -> runtime -> hardware.

On Neuron each op is created in the framework lane, scheduled in the runtime lane
(``nrta_execute_schedule``) and executed in the hardware lane (``nc_exec_running``).
TorchNeuron's Kineto child profiler puts runtime events (PRIVATEUSE1_RUNTIME, linked to
the op) and hardware markers (device annotations, tied to the kernel by correlation id)
into the trace; a Neuron system profile (:func:`load_system_profile`, the ``system_profile.json``
that ``neuron-explorer view --output-format json`` writes) adds more.

In ``summary`` mode each (lane, event name) becomes one aggregate span under the root,
with OpenTelemetry links to the op spans whose device work it carried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import TraceLoadError
from ...trace.model import EventKind, Trace

__all__ = ["HARDWARE_EVENTS", "LaneAggregate", "SystemProfile", "lane_aggregates", "load_system_profile", "read_system_profile"]

MAX_LINKS = 32


@dataclass
class LaneAggregate:
    lane: str  #: "runtime" | "hardware" | a system-profile group
    name: str
    count: int = 0
    total_ns: int = 0
    first_start_ns: int = 0
    last_end_ns: int = 0
    ops: set[str] = field(default_factory=set)  #: names of the ops whose device work this carried

    def add(self, start: int, dur: int, op: str | None) -> None:
        if self.count == 0 or start < self.first_start_ns:
            self.first_start_ns = start
        self.last_end_ns = max(self.last_end_ns, start + dur)
        self.count += 1
        self.total_ns += dur
        if op and len(self.ops) < MAX_LINKS:
            self.ops.add(op)


def lane_aggregates(trace: Trace, system_events: list[dict[str, Any]] | None = None) -> list[LaneAggregate]:
    """Aggregate runtime and hardware lane events of a device trace (and a system profile).

    A system profile adds the events the trace lacks (``nrt_execute``, ``model_load``,
    collectives, ...); an event name the trace already has is counted once, from the trace.
    """
    out: dict[tuple[str, str], LaneAggregate] = {}
    kind = trace.kind
    ops = np.flatnonzero((kind == EventKind.OP) & (trace.correlation_id > 0))
    op_name_by_corr = dict(zip(trace.correlation_id[ops].tolist(), trace.name_id[ops].tolist()))
    dev = np.flatnonzero(kind == EventKind.DEVICE)
    launcher_by_flow = dict(zip(trace.correlation_id[dev].tolist(), trace.linked_correlation_id[dev].tolist()))
    for lane, k in (("runtime", EventKind.RUNTIME), ("hardware", EventKind.DEVICE_ANNOTATION)):
        sel = np.flatnonzero(kind == k)
        for name_id, start, dur, corr, linked in zip(
            trace.name_id[sel].tolist(),
            trace.start_ns[sel].tolist(),
            trace.duration_ns[sel].tolist(),
            trace.correlation_id[sel].tolist(),
            trace.linked_correlation_id[sel].tolist(),
        ):
            # live Kineto gives a marker the op's id as correlation; a saved trace the kernel's flow id
            op_corr = linked or launcher_by_flow.get(corr, 0) or corr
            op_id = op_name_by_corr.get(op_corr)
            op = trace.names[op_id] if op_id is not None else None
            name = trace.names[name_id]
            out.setdefault((lane, name), LaneAggregate(lane, name)).add(start, dur, op)
    from_trace = set(out)
    for ev in system_events or ():
        lane = _lane_of(ev)
        if lane == "framework":
            continue  # the framework lane is the PyTorch trace itself: already the op spans
        name = str(ev.get("name", ""))
        if (lane, name) in from_trace:
            continue  # the same events, already counted from the trace, with their op links
        out.setdefault((lane, name), LaneAggregate(lane, name)).add(int(ev["timestamp"]), int(ev.get("duration", 0)), None)
    return sorted(out.values(), key=lambda a: (a.lane, a.first_start_ns))


#: Hardware events of a Neuron system trace (the ``hardware`` event-type group of
#: ``NEURON_RT_INSPECT_EVENT_FILTER_TYPE``, tools/neuron-explorer/environment-variables.rst);
#: everything else the runtime records is software.
HARDWARE_EVENTS = frozenset(
    {"nc_exec_running", "cc_running", "cc_exec_barrier", "numerical_err", "nrt_model_switch", "timestamp_sync_point", "hw_notify"}
)
#: Explorer's ``trace_event_source`` values (SystemProfileEvents table, profile-schema-reference.rst).
_SOURCE_LANES = {"neuron_rt": "runtime", "neuron_hw": "hardware", "framework": "framework"}


def _lane_of(ev: dict[str, Any]) -> str:
    source = str(ev.get("trace_event_source", "")).lower()
    if source in _SOURCE_LANES:
        return _SOURCE_LANES[source]
    if str(ev.get("name", "")) in HARDWARE_EVENTS:
        return "hardware"  # documented groups are per NeuronCore (nrt-nc-000), so the name decides
    return _lane_of_group(str(ev.get("group", "")))


def _lane_of_group(group: str) -> str:
    g = group.lower()
    if g.startswith("nrt") or "neuron_rt" in g:
        return "runtime"
    if "neuron_hw" in g or g.startswith("nc") or "hw" in g:
        return "hardware"
    if "framework" in g:
        return "framework"
    return g or "system"


#: Keys that hold the event list of a system-profile JSON, most likely first. The documented
#: data type is ``trace_events`` (archive/profiler/neuron-profiler-2-0-beta-user-guide.rst,
#: "JSON Output"); a third-party parser of real files reads ``trace_event``; ``events`` /
#: ``traceEvents`` are what earlier neuronscope versions accepted.
EVENT_KEYS = ("trace_events", "trace_event", "events", "traceEvents")


@dataclass
class SystemProfile:
    """A Neuron system profile as ``neuron-explorer view --output-format json`` writes it.

    ``system_profile.json`` holds three data types (neuron-profiler-2-0-beta-user-guide.rst,
    get-started.rst "Export to JSON"):

    * ``trace_events``: runtime API and framework events with ``duration``, ``group``
      (``nrt-nc-000``, ``framework-<id>``), ``id``, ``instance_id``, ``lnc_idx``, ``name``,
      ``parent_id``, ``process_id``, ``thread_id``, ``timestamp`` (ns), ``type``;
    * ``mem_usage``: sampled host memory (``timestamp``, ``usage`` bytes, ``percent_usage``,
      ``duration``, ``instance_id``);
    * ``cpu_util``: sampled CPU utilisation per core (``timestamp``, ``cpu_id``, ``util`` %,
      ``duration``, ``instance_id``).
    """

    path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    mem_usage: list[dict[str, Any]] = field(default_factory=list)
    cpu_util: list[dict[str, Any]] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        """JSON-able run facts: event counts per lane, host memory and CPU utilisation stats."""
        lanes: dict[str, int] = {}
        for ev in self.events:
            lane = _lane_of(ev)
            lanes[lane] = lanes.get(lane, 0) + 1
        out: dict[str, Any] = {"path": str(self.path), "events": len(self.events), "events_by_lane": lanes}
        instances = sorted({str(ev["instance_id"]) for ev in self.events if ev.get("instance_id")})
        if instances:
            out["instances"] = instances
        usage = [float(s["usage"]) for s in self.mem_usage if _is_number(s.get("usage"))]
        if usage:
            pct = [float(s["percent_usage"]) for s in self.mem_usage if _is_number(s.get("percent_usage"))]
            out["host_memory"] = {
                "samples": len(usage),
                "max_bytes": int(max(usage)),
                "mean_bytes": int(sum(usage) / len(usage)),
                **({"max_percent": round(max(pct), 3)} if pct else {}),
            }
        util = [float(s["util"]) for s in self.cpu_util if _is_number(s.get("util"))]
        if util:
            cores = {str(s.get("cpu_id")) for s in self.cpu_util}
            out["cpu_util"] = {
                "samples": len(util),
                "cores": len(cores),
                "mean_percent": round(sum(util) / len(util), 3),
                "max_percent": round(max(util), 3),
            }
        return out


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _unwrap(item: Any) -> dict[str, Any] | None:
    """One event. The docs print events keyed by their type name
    (``{"Neuron_Runtime_API_Event": {...}}``); unwrap that and keep the type as ``event_type``."""
    if not isinstance(item, dict):
        return None
    if "timestamp" in item:
        return item
    if len(item) == 1:
        ((kind, inner),) = item.items()
        if isinstance(inner, dict) and "timestamp" in inner:
            return {**inner, "event_type": kind}
    return None


def _records(value: Any) -> list[Any]:
    """A list of records, from a list or from a dict of lists/records keyed by type name."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        out: list[Any] = []
        for kind, inner in value.items():
            if isinstance(inner, list):
                out += [{kind: x} if isinstance(x, dict) and "timestamp" in x else x for x in inner]
            elif isinstance(inner, dict):
                out.append({kind: inner})
        return out
    return []


def load_system_profile(path: str | Path) -> SystemProfile:
    """Read a Neuron ``system_profile.json`` (see :class:`SystemProfile`).

    Accepts the documented object (``trace_events`` / ``trace_event`` next to ``mem_usage``
    and ``cpu_util``), events wrapped by type name as the docs print them, or a bare list of
    events. Raises :class:`~neuronscope.TraceLoadError` naming the file and what was expected.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TraceLoadError(f"{p}: unreadable system profile JSON: {exc}") from exc
    raw_events: Any = None
    mem: list[Any] = []
    cpu: list[Any] = []
    if isinstance(doc, list):
        raw_events = doc
    elif isinstance(doc, dict):
        raw_events = next((doc[k] for k in EVENT_KEYS if k in doc), None)
        mem, cpu = _records(doc.get("mem_usage")), _records(doc.get("cpu_util"))
        if raw_events is None and (mem or cpu):
            raw_events = []
    if raw_events is None or not isinstance(raw_events, (list, dict)):
        raise TraceLoadError(
            f"{p}: not a Neuron system profile: expected an object with {' / '.join(EVENT_KEYS[:2])} "
            "(a list of events with name, timestamp in ns, duration, group), as written by "
            "`neuron-explorer view -d <profile dir> --output-format json`"
        )
    profile = SystemProfile(path=p)
    for item in _records(raw_events):
        ev = _unwrap(item)
        if ev is None or "name" not in ev:
            continue
        try:
            profile.events.append({**ev, "timestamp": int(ev["timestamp"]), "duration": int(ev.get("duration") or 0)})
        except (TypeError, ValueError) as exc:
            raise TraceLoadError(f"{p}: malformed event {ev!r}: {exc} (timestamp and duration must be integers, ns)") from exc
    for source, target in ((mem, profile.mem_usage), (cpu, profile.cpu_util)):
        for item in source:
            rec = _unwrap(item)
            if rec is not None:
                target.append(rec)
    return profile


def read_system_profile(path: str | Path) -> list[dict[str, Any]]:
    """Events of a Neuron system-profile JSON (``name``, ``timestamp`` ns, ``duration``, ``group``, ...).

    See :func:`load_system_profile` for the accepted shapes; this keeps only the events.
    """
    return load_system_profile(path).events
