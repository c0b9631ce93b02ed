"""Build the trace model straight from live Kineto results.

``prof.profiler.kineto_results.events()`` hands out one ``_KinetoEvent`` per event; reading
a field costs one C++ call. We read each field column-wise with ``map`` over the unbound
accessor (the cheapest loop CPython offers) and with the garbage collector paused, since
the loop allocates hundreds of thousands of ints and would otherwise trigger many
full-collection passes. torch's ``prof.events()`` builds a ``FunctionEvent`` object per event
instead: ~20x slower and ~1 GB more for a 420k-event profile (see docs/performance.md).
"""

from __future__ import annotations

import gc
from typing import Any

from .model import ACTIVITY_KINDS, FILTERED_NAMES, INPUT_OPS, MARKER_PREFIX, EventKind, Trace

__all__ = ["trace_from_kineto"]


def trace_from_kineto(kineto_results: Any, *, device: str = "cpu", metadata: dict | None = None) -> Trace:
    """Read a ``torch._C._autograd._ProfilerResult`` into a :class:`Trace`.

    ``device`` says what the device columns mean. For ``"cpu"`` no device events exist, so
    correlation ids (only needed to link device work to ops) are not read at all.
    """
    from torch._C._autograd import _KinetoEvent as K

    events = kineto_results.events()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        names = list(map(K.name, events))
        activity = list(map(K.activity_type, events))
        start = list(map(K.start_ns, events))
        duration = list(map(K.duration_ns, events))
        thread = list(map(K.start_thread_id, events))
        if device != "cpu":
            corr = list(map(K.correlation_id, events))
            linked = list(map(K.linked_correlation_id, events))
            # Device events carry their stream/lane in device_resource_id; CPU events their thread.
            for i, act in enumerate(activity):
                if ACTIVITY_KINDS.get(act) in (EventKind.DEVICE, EventKind.DEVICE_ANNOTATION):
                    thread[i] = -1 - events[i].device_resource_id()
        else:
            corr = linked = None
        inputs = _recorded_inputs(events, names)
        del events
        other = EventKind.OTHER
        kinds = [ACTIVITY_KINDS.get(a, other) for a in activity]
        # Utility ops torch itself hides from key_averages(); memory records etc.; our own markers.
        hidden = FILTERED_NAMES.union(n for n in set(names) if n.startswith(MARKER_PREFIX))
        if not hidden.isdisjoint(names):
            kinds = [other if n in hidden else k for n, k in zip(names, kinds)]
        return Trace.from_columns(
            names=names,
            kind=kinds,
            start_ns=start,
            duration_ns=duration,
            thread=thread,
            correlation_id=corr,
            linked_correlation_id=linked,
            device=device,
            base_time_ns=int(kineto_results.trace_start_ns()),
            metadata=metadata,
            categories=activity,
            inputs=inputs,
        )
    finally:
        if gc_was_enabled:
            gc.enable()


def _recorded_inputs(events: Any, names: list[str]) -> dict[int, tuple[list, list]]:
    """Shapes and dtypes of the few ops the advisor inspects (empty without record_shapes)."""
    out: dict[int, tuple[list, list]] = {}
    if INPUT_OPS.isdisjoint(names):
        return out
    for i, n in enumerate(names):
        if n in INPUT_OPS:
            ev = events[i]
            shapes = ev.shapes()
            if shapes:
                out[i] = (shapes, ev.dtypes())
    return out
