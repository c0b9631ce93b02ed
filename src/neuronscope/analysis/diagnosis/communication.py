"""Communication: how much of the run went to collectives, and how much of that no compute hid.

Which events are collectives (device time, so they stay in device busy %):

* device work named like one: NCCL/RCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``),
  and kernels named after a collective (``multimem_all_reduce_kernel``, ``cross_device_reduce``);
* device work launched from inside a collective op (``record_param_comms``, ``c10d::*``,
  ``nccl:*``), whatever the kernel is called;
* on a CPU-only run, gloo's collectives (``gloo:all_reduce``...) on any thread.

``collective_us`` is the union of their intervals in the window; ``exposed_us`` the part of it
during which no compute (no other device work, on any stream) ran — what overlapping
communication with compute could win. The kind of each collective comes from the trace's own
``Collective name`` (Kineto's ``record_param_comms`` args), else the kernel's name, else the
name of the op that launched it; bytes and group size where the trace records them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...trace.kinds import EventKind
from ..intervals import clip, subtract, union
from .model import CollectiveStats, Communication

__all__ = ["COLLECTIVE_KERNEL", "collective_kind", "measure"]

#: NCCL (and RCCL, which keeps NCCL's kernel names) kernels
NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
#: device work named after a collective (symmetric-memory and custom all-reduce kernels, Neuron CC ops)
DEVICE_COLLECTIVE = re.compile(
    r"all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|all[-_ ]?to[-_ ]?all|collective[-_ ]?permute", re.IGNORECASE
)
COLLECTIVE_KERNEL = re.compile(NCCL_KERNEL.pattern + "|" + DEVICE_COLLECTIVE.pattern, re.IGNORECASE)
#: CPU ops that launch a collective's device work
_COLLECTIVE_OP = re.compile(r"^(?:record_param_comms$|c10d::|nccl:|gloo:)")
_TOKENS = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("collectivepermute", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
)
#: bytes per element of the dtypes Kineto writes in ``record_param_comms`` args
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "int8": 1,
    "byte": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
}


def collective_kind(name: str) -> str:
    """The normalised kind of a collective's name (``gloo:all_reduce`` -> ``all_reduce``,
    ``ncclDevKernel_AllGather_RING_LL`` -> ``all_gather``, ``c10d::_reduce_scatter_base_`` ->
    ``reduce_scatter``, ``allreduce`` -> ``all_reduce``); ``other`` when the name says nothing more."""
    m = NCCL_KERNEL.match(name)
    token = m.group(1) if m else name.split("::", 1)[-1].split(":", 1)[-1]
    flat = re.sub(r"[^a-z]", "", token.lower())
    for key, kind in _TOKENS:
        if key in flat:
            return kind
    return "other"


def _backend(trace: Any, names: set[str]) -> str:
    if any(n.startswith("gloo:") for n in names):
        return "gloo"
    if any(NCCL_KERNEL.match(n) for n in names):
        return "rccl" if trace.device == "rocm" else "nccl"
    return trace.device


def _positions(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """(collective events, the op that launched each or -1)."""
    from ..launches import device_launches

    kind = trace.kind
    launches = device_launches(trace)
    named = trace.name_mask(lambda n: bool(COLLECTIVE_KERNEL.search(n)))
    if trace.device == "cpu" or not launches.device.size:
        # gloo records its collectives as annotations (user_annotation) on the thread that runs them
        gloo = trace.name_mask(lambda n: n.startswith("gloo:")) & np.isin(kind, [EventKind.OP, EventKind.REGION])
        pos = np.flatnonzero(gloo)
        return pos, np.full(pos.size, -1, dtype=np.int64)
    op = launches.op
    coll_op = trace.name_mask(lambda n: bool(_COLLECTIVE_OP.search(n)))
    by_op = (op >= 0) & coll_op[np.maximum(op, 0)]
    in_coll = named[launches.device] | by_op
    return launches.device[in_coll], op[in_coll]


def _kind_and_size(trace: Any, pos: int, op: int, ancestors: dict[int, int]) -> tuple[str, int | None, int | None]:
    """Kind, bytes and group size of one collective event. The trace's own ``Collective name``
    (on the kernel, else on the op that launched it or an op around that) comes first, then the
    names of those ops, then the kernel's (NCCL runs all-to-all as SendRecv kernels)."""
    chain = [op]
    while len(chain) < 6 and chain[-1] >= 0:  # the op, then its parents (record_param_comms in c10d::…)
        chain.append(ancestors.get(chain[-1], -1))
    chain = [o for o in chain if o >= 0]
    info = trace.collectives.get(pos) or next((trace.collectives[o] for o in chain if o in trace.collectives), None)
    kind = collective_kind(info[0]) if info else "other"
    for o in chain:
        if kind != "other":
            break
        kind = collective_kind(trace.names[int(trace.name_id[o])])
    if kind == "other":
        kind = collective_kind(trace.names[int(trace.name_id[pos])])
    nbytes = group = None
    if info is not None:
        _, in_n, out_n, dtype, group = info
        width = _DTYPE_BYTES.get(str(dtype).lower()) if dtype else None
        elems = max(x for x in (in_n, out_n, 0) if x is not None)
        nbytes = elems * width if width and elems else None
    return kind, nbytes, group


def _ancestors(trace: Any, ops: np.ndarray) -> dict[int, int]:
    """Parent op (trace position) of each op in ``ops`` and of theirs, a few levels up."""
    from ..nesting import nest_kinds

    cpu, nesting = nest_kinds(trace, (EventKind.OP, EventKind.REGION, EventKind.RUNTIME))
    tree_pos = cpu[nesting.order]
    node_of = np.full(len(trace), -1, dtype=np.int64)
    node_of[tree_pos] = np.arange(tree_pos.size, dtype=np.int64)
    out: dict[int, int] = {}
    frontier = {int(o) for o in ops.tolist() if o >= 0}
    for _ in range(6):
        nxt = set()
        for o in frontier:
            node = int(node_of[o])
            parent = int(nesting.parent[node]) if node >= 0 else -1
            out[o] = int(tree_pos[parent]) if parent >= 0 else -1
            if out[o] >= 0 and out[o] not in out:
                nxt.add(out[o])
        frontier = nxt
        if not frontier:
            break
    return out


_NONE = (None, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def measure(
    trace: Any, lo: int, hi: int, busy_s: np.ndarray, busy_e: np.ndarray
) -> tuple[Communication | None, np.ndarray, np.ndarray]:
    """The run's communication over the window [lo, hi) (None when no collective ran), and its
    exposed intervals (for the verdict: on a CPU run they overlap the main thread's idle time,
    which must not count twice)."""
    pos, op = _positions(trace)
    if not pos.size:
        return _NONE
    start = trace.start_ns[pos]
    end = start + trace.duration_ns[pos]
    cs, ce = clip(*union(start, end), lo, hi)
    collective_ns = int((ce - cs).sum())
    if collective_ns <= 0:
        return _NONE
    # compute: the device's busy time that is not a collective (CPU run: the main thread's)
    if trace.device == "cpu":
        ks, ke = subtract(busy_s, busy_e, cs, ce)
    else:
        others = np.setdiff1d(np.flatnonzero(trace.kind == EventKind.DEVICE), pos, assume_unique=True)
        ks, ke = clip(*union(trace.start_ns[others], trace.start_ns[others] + trace.duration_ns[others]), lo, hi)
    xs, xe = subtract(cs, ce, ks, ke)
    exposed_ns = int((xe - xs).sum())

    ancestors = _ancestors(trace, op[op >= 0]) if bool((op >= 0).any()) else {}
    per: dict[str, list] = {}
    inside = (end > lo) & (start < hi)
    for p, o, s, e in zip(pos[inside].tolist(), op[inside].tolist(), start[inside].tolist(), end[inside].tolist()):
        kind, nbytes, group = _kind_and_size(trace, p, o, ancestors)
        acc = per.setdefault(kind, [0, [], 0, False, None])
        acc[0] += 1
        acc[1].append((s, e))
        if nbytes is not None:
            acc[2] += nbytes
            acc[3] = True
        if group is not None:
            acc[4] = max(acc[4] or 0, group)
    by_kind = []
    for kind, (calls, spans, nbytes, has_bytes, group) in per.items():
        a = np.array(spans, dtype=np.int64)
        ks_, ke_ = clip(*union(a[:, 0], a[:, 1]), lo, hi)
        by_kind.append(CollectiveStats(kind, calls, float((ke_ - ks_).sum()) / 1e3, nbytes if has_bytes else None, group))
    by_kind.sort(key=lambda c: (-c.time_us, c.kind))
    window_ns = max(hi - lo, 1)
    names = {trace.names[i] for i in np.unique(trace.name_id[pos]).tolist()}
    return (
        Communication(
            backend=_backend(trace, names),
            collective_us=collective_ns / 1e3,
            exposed_us=exposed_ns / 1e3,
            overlap_pct=100.0 * (collective_ns - exposed_ns) / collective_ns,
            exposed_pct_of_window=100.0 * exposed_ns / window_ns,
            by_kind=tuple(by_kind),
        ),
        xs,
        xe,
    )
