"""The device's runtime and hardware lanes as spans: framework -> runtime -> hardware.

On Neuron each op is created in the framework lane, scheduled in the runtime lane
(``nrta_execute_schedule``) and executed in the hardware lane (``nc_exec_running``).
TorchNeuron's Kineto child profiler puts runtime events (PRIVATEUSE1_RUNTIME, linked to
the op) and hardware markers (device annotations, tied to the kernel by correlation id)
into the trace; a Neuron system profile (:func:`read_system_profile`) adds more.

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

__all__ = ["LaneAggregate", "lane_aggregates", "read_system_profile"]

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
    """Aggregate runtime and hardware lane events of a device trace (and a system profile)."""
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
    for ev in system_events or ():
        lane = _lane_of_group(str(ev.get("group", "")))
        name = str(ev.get("name", ""))
        out.setdefault((lane, name), LaneAggregate(lane, name)).add(int(ev["timestamp"]), int(ev.get("duration", 0)), None)
    return sorted(out.values(), key=lambda a: (a.lane, a.first_start_ns))


def _lane_of_group(group: str) -> str:
    g = group.lower()
    if g.startswith("nrt") or "neuron_rt" in g:
        return "runtime"
    if "neuron_hw" in g or g.startswith("nc") or "hw" in g:
        return "hardware"
    if "framework" in g:
        return "framework"
    return g or "system"


def read_system_profile(path: str | Path) -> list[dict[str, Any]]:
    """Events of a Neuron system-profile JSON (``name``, ``timestamp`` ns, ``duration``, ``group``, ...).

    Accepts a list of events or an object holding one under ``events``/``traceEvents``.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TraceLoadError(f"{p}: unreadable system profile JSON: {exc}") from exc
    events = doc if isinstance(doc, list) else (doc.get("events") or doc.get("traceEvents")) if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceLoadError(f"{p}: not a Neuron system profile (expected a list of events with name/timestamp/duration)")
    out = []
    for ev in events:
        if isinstance(ev, dict) and "name" in ev and "timestamp" in ev:
            try:
                out.append({**ev, "timestamp": int(ev["timestamp"]), "duration": int(ev.get("duration", 0))})
            except (TypeError, ValueError) as exc:
                raise TraceLoadError(f"{p}: malformed event {ev!r}: {exc}") from exc
    return out
