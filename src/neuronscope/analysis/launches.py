"""Who launched each piece of device work: the runtime call and the op around it.

A kernel (copy, memset) carries the correlation id of the runtime call that launched it
(``cudaLaunchKernel``, ``hipMemcpyAsync``, ``cudaGraphLaunch``...). That call ran on a CPU
thread, inside the ops that were open there: the innermost enclosing *op* launched the kernel.
Ops that launch nothing (views, metadata, allocations) therefore never hold device time.

Kineto also writes an ``External id`` on runtime calls and kernels, meant to name that op —
but in many real traces (torch <= 2.1 and others) a runtime call's ``External id`` equals its
own correlation id and names an unrelated op. So the ``External id`` is used only where the
trace has no runtime call for the kernel (a backend that records none; Neuron's emulated
traces link through it and agree).

Kernels whose launching call has no enclosing op (a graph replayed from Python, a
communication thread) keep ``op == -1``: the summary gives them rows of their own.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace.kinds import EventKind

__all__ = ["Launches", "device_launches"]


@dataclass(frozen=True)
class Launches:
    """Aligned arrays, one entry per device event of the trace (positions into the trace)."""

    device: np.ndarray  #: positions of the device events (kernels, copies, NeuronCore executions)
    runtime: np.ndarray  #: the runtime call that launched each (-1: none in the trace)
    op: np.ndarray  #: the op that launched each (-1: launched outside any op, or unknown)
    #: tree node of ``runtime`` in :func:`~.nesting.nest_kinds` (OP, REGION, RUNTIME) order (-1: none)
    runtime_node: np.ndarray


_last: tuple[Any, Launches | None] = (None, None)
_lock = threading.Lock()


def device_launches(trace: Any) -> Launches:
    """The launching runtime call and op of every device event (computed once per trace)."""
    global _last
    with _lock:
        ref, found = _last
        if ref is not None and ref() is trace and found is not None:
            return found
    result = _resolve(trace)
    for a in (result.device, result.runtime, result.op, result.runtime_node):
        a.flags.writeable = False
    try:
        with _lock:
            _last = (weakref.ref(trace), result)
    except TypeError:  # not weak-referenceable: not kept
        pass
    return result


def _resolve(trace: Any) -> Launches:
    from .nesting import nest_kinds

    kind = trace.kind
    dev = np.flatnonzero(kind == EventKind.DEVICE)
    none = np.full(dev.size, -1, dtype=np.int64)
    if not dev.size:
        return Launches(dev, none, none.copy(), none.copy())

    # 1. the runtime call: same correlation id (the CUPTI/roctracer/Neuron correlation)
    runtime_pos = np.flatnonzero((kind == EventKind.RUNTIME) & (trace.correlation_id > 0))
    launch = none.copy()
    if runtime_pos.size:
        order = np.argsort(trace.correlation_id[runtime_pos], kind="stable")
        keys = trace.correlation_id[runtime_pos][order]
        corr = trace.correlation_id[dev]
        hit = np.minimum(np.searchsorted(keys, corr), keys.size - 1)
        ok = (corr > 0) & (keys[hit] == corr)
        launch = np.where(ok, runtime_pos[order[hit]], -1)

    # 2. the innermost op enclosing that call on its thread: walk up the CPU tree past runtime
    #    calls (a driver call inside a runtime call) and regions (record_function is not an op)
    cpu, nesting = nest_kinds(trace, (EventKind.OP, EventKind.REGION, EventKind.RUNTIME))
    tree_pos = cpu[nesting.order]
    node_of = np.full(len(trace), -1, dtype=np.int64)
    node_of[tree_pos] = np.arange(tree_pos.size, dtype=np.int64)
    has_launch = launch >= 0
    runtime_node = np.where(has_launch, node_of[np.maximum(launch, 0)], -1)
    op = none.copy()
    if tree_pos.size:  # a trace of device work alone has no CPU tree to walk
        is_op_node = kind[tree_pos] == EventKind.OP
        anc = np.where(runtime_node >= 0, nesting.parent[np.maximum(runtime_node, 0)], -1)
        while True:
            climb = (anc >= 0) & ~is_op_node[np.maximum(anc, 0)]
            if not bool(climb.any()):
                break
            anc = np.where(climb, nesting.parent[np.maximum(anc, 0)], anc)
        op = np.where(anc >= 0, tree_pos[np.maximum(anc, 0)], -1)
        op = _checked(trace, launch, op)

    # 3. no runtime call recorded for it: the External id, as the only link the trace gives
    fallback = ~has_launch & (trace.linked_correlation_id[dev] > 0)
    if bool(fallback.any()):
        ops = np.flatnonzero((kind == EventKind.OP) & (trace.correlation_id > 0))
        if ops.size:
            order = np.argsort(trace.correlation_id[ops], kind="stable")
            keys = trace.correlation_id[ops][order]
            linked = trace.linked_correlation_id[dev]
            hit = np.minimum(np.searchsorted(keys, linked), keys.size - 1)
            ok = fallback & (keys[hit] == linked)
            op = np.where(ok, ops[order[hit]], op)
    return Launches(device=dev, runtime=launch, op=op, runtime_node=runtime_node)


def _checked(trace: Any, launch: np.ndarray, op: np.ndarray) -> np.ndarray:
    """The op found through the tree must enclose the call in time. Microsecond timestamps
    stored as floats (1.7e15 us has 0.25 us resolution) make neighbouring ops overlap by a
    fraction of a microsecond, which the vectorised nesting reads as a parent; for those few
    calls (and calls with no op found) search the thread's ops directly: the latest-starting
    op that encloses the call is the innermost one."""
    start, end = trace.start_ns, trace.start_ns + trace.duration_ns
    r = np.maximum(launch, 0)
    o = np.maximum(op, 0)
    encloses = (op >= 0) & (start[o] <= start[r]) & (end[o] >= end[r])
    redo = np.flatnonzero((launch >= 0) & ~encloses)
    if not redo.size:
        return op
    op = op.copy()
    ops = np.flatnonzero(trace.kind == EventKind.OP)
    threads = trace.thread[launch[redo]]
    for t in np.unique(threads).tolist():
        mine = ops[trace.thread[ops] == t]
        queries = redo[threads == t]
        if not mine.size:
            op[queries] = -1
            continue
        mine = mine[np.lexsort((-end[mine], start[mine]))]
        s_sorted, e_sorted = start[mine], end[mine]
        for q in queries.tolist():
            call = int(launch[q])
            i = int(np.searchsorted(s_sorted, start[call], side="right")) - 1
            found = -1
            call_end = int(end[call])
            for _ in range(4096):  # earlier siblings are skipped; an enclosing op is near
                if i < 0:
                    break
                if int(e_sorted[i]) >= call_end:
                    found = int(mine[i])
                    break
                i -= 1
            op[q] = found
    return op
