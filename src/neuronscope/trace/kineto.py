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

import numpy as np

from .kinds import CONCRETE_OPS, FILTERED_NAMES, INPUT_OPS, MARKER_PREFIX, activity_kind
from .model import EventKind, Trace, compiled_graph_calls_as_ops

__all__ = ["trace_from_kineto"]


def trace_from_kineto(kineto_results: Any, *, device: str = "cpu", metadata: dict | None = None) -> Trace:
    """Read a ``torch._C._autograd._ProfilerResult`` into a :class:`Trace`.

    ``device`` says what the device columns mean. For ``"cpu"`` no device events exist, so
    correlation ids (only needed to link device work to ops) are not read at all.
    """
    from torch._C._autograd import _KinetoEvent as K

    events = kineto_results.events()
    n = len(events)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:

        def column(getter: Any) -> np.ndarray:
            # straight into int64, no list of Python ints in between (memory: ~40 B/event/column)
            try:
                return np.fromiter(map(getter, events), dtype=np.int64, count=n)
            except (OverflowError, ValueError, TypeError):
                return np.fromiter((_safe_int(getter, e) for e in events), dtype=np.int64, count=n)

        name_table: dict[str, int] = {}
        try:
            name_id = np.fromiter(
                (name_table.setdefault(s, len(name_table)) for s in map(K.name, events)), dtype=np.int64, count=n
            )
        except UnicodeDecodeError:
            # torch's Python tracer can hand out a frame name it no longer owns (seen with
            # with_stack=True: "_cupti_monitor.py(0): <garbage>"): keep the event, not the garbage
            name_table.clear()
            name_id = np.fromiter(
                (name_table.setdefault(_safe_name(e), len(name_table)) for e in events), dtype=np.int64, count=n
            )
        cat_table: dict[str, int] = {"": 0}
        category = np.fromiter(
            (cat_table.setdefault(s, len(cat_table)) for s in map(K.activity_type, events)), dtype=np.int64, count=n
        )
        start = column(K.start_ns)
        duration = column(K.duration_ns)
        thread = column(K.start_thread_id)
        names = tuple(name_table)
        categories = tuple(cat_table)
        other = int(EventKind.OTHER)
        kind_of_cat = np.array([int(activity_kind(c)) for c in categories], dtype=np.int64)
        kind = kind_of_cat[category]
        if device != "cpu":
            corr = column(K.correlation_id)
            linked = column(K.linked_correlation_id)
            # Device events carry their stream/lane in device_resource_id; CPU events their thread.
            lanes = np.isin(kind, [int(EventKind.DEVICE), int(EventKind.DEVICE_ANNOTATION)])
            for i in np.flatnonzero(lanes).tolist():
                thread[i] = -1 - events[i].device_resource_id()
        else:
            corr = linked = np.zeros(n, dtype=np.int64)
        inputs = _recorded_inputs(events, names, name_id)
        events = []  # let the Kineto event list go before the trace is built
        # Utility ops torch itself hides from key_averages(); memory records etc.; our own markers.
        hidden = [i for i, nm in enumerate(names) if nm in FILTERED_NAMES or nm.startswith(MARKER_PREFIX)]
        if hidden:
            kind[np.isin(name_id, hidden)] = other
        compiled_graph_calls_as_ops(names, name_id, kind, device)
        return Trace(
            names=names,
            kind=kind,
            name_id=name_id,
            start_ns=start,
            duration_ns=duration,
            thread=thread,
            correlation_id=corr,
            linked_correlation_id=linked,
            device=device,
            base_time_ns=int(kineto_results.trace_start_ns()),
            metadata=dict(metadata or {}),
            category=category,
            categories=categories,
            inputs=inputs,
        )
    finally:
        if gc_was_enabled:
            gc.enable()


_INT64_MAX = (1 << 63) - 1


def _safe_int(getter: Any, event: Any) -> int:
    try:
        v = int(getter(event))
    except (OverflowError, ValueError, TypeError):
        return 0
    return v if -_INT64_MAX <= v <= _INT64_MAX else 0


def _safe_name(event: Any) -> str:
    try:
        return event.name()
    except UnicodeDecodeError:
        return "<undecodable name>"


def _recorded_inputs(events: Any, names: tuple[str, ...], name_id: np.ndarray) -> dict[int, tuple[list, list, list | None]]:
    """Shapes, dtypes (and, for the ops whose work model reads them, scalar arguments) of the
    ops the advisor and the work models inspect; empty without record_shapes. One shared tuple
    per distinct signature, as the trace file reader keeps them (a loop repeats its shapes)."""
    out: dict[int, tuple[list, list, list | None]] = {}
    wanted = [i for i, nm in enumerate(names) if nm in INPUT_OPS]
    if not wanted:
        return out
    concrete_ids = {i for i, nm in enumerate(names) if nm in CONCRETE_OPS}
    shared: dict[str, tuple[list, list, list | None]] = {}
    positions = np.flatnonzero(np.isin(name_id, wanted))
    for i, nid in zip(positions.tolist(), name_id[positions].tolist()):
        ev = events[i]
        shapes = ev.shapes()
        if not shapes:
            continue
        concrete = _concrete(ev) if nid in concrete_ids else None
        rec = (shapes, ev.dtypes(), concrete)
        key = repr(rec)
        out[i] = shared.setdefault(key, rec)
    return out


def _concrete(ev: Any) -> list | None:
    try:
        return list(ev.concrete_inputs())
    except (AttributeError, RuntimeError, TypeError):  # older torch, or a value it cannot convert
        return None
