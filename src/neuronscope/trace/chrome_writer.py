"""Write a trace model back as a Kineto-style chrome trace that :func:`load_trace` reads.

Used for captures recorded in several segments (a profile that nested others): Kineto can
only save each segment on its own, with its own time base, so the merged model is written
instead. Kept: every event's name, category, time, thread/lane, the ids that link device
work to ops, and the inputs the model keeps; not kept: other Kineto args and flow arrows.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec

from .kinds import EventKind
from .model import Trace

__all__ = ["trace_to_chrome"]

_DEVICE_KINDS = (int(EventKind.DEVICE), int(EventKind.DEVICE_ANNOTATION), int(EventKind.RUNTIME))
_CHUNK = 50_000


def trace_to_chrome(trace: Trace, path: Path, extra: dict[str, Any] | None = None, *, opener: Any = None) -> Path:
    """Write ``trace`` to ``path`` (gzipped when it ends in ``.gz``), in chunks."""
    base = int(trace.base_time_ns or trace.start_time_ns)
    head = {"schemaVersion": 1, "baseTimeNanoseconds": base, "displayTimeUnit": "ms", **(extra or {})}
    enc = msgspec.json.Encoder()
    raw = opener(path) if opener is not None else open(path, "wb")
    out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) if str(path).endswith(".gz") else raw
    try:
        out.write(enc.encode(head)[:-1] + b', "traceEvents": [')
        names, cats = trace.names, trace.categories
        kinds = trace.kind.tolist()
        n = len(trace)
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            rows = []
            for i, k, nid, cid, s, d, t, c, lk in zip(
                range(lo, hi),
                kinds[lo:hi],
                trace.name_id[lo:hi].tolist(),
                trace.category[lo:hi].tolist(),  # type: ignore[index]
                trace.start_ns[lo:hi].tolist(),
                trace.duration_ns[lo:hi].tolist(),
                trace.thread[lo:hi].tolist(),
                trace.correlation_id[lo:hi].tolist(),
                trace.linked_correlation_id[lo:hi].tolist(),
            ):
                device_side = k in _DEVICE_KINDS
                args: dict[str, Any] = {"correlation": c, "External id": lk} if device_side else {"External id": c}
                if i in trace.inputs:
                    dims, types, *concrete = trace.inputs[i]
                    args["Input Dims"], args["Input type"] = dims, types
                    if concrete and concrete[0] is not None:  # as Kineto writes them: strings
                        args["Concrete Inputs"] = ["" if v is None else v if isinstance(v, str) else repr(v) for v in concrete[0]]
                if i in trace.collectives:
                    _add_collective(args, trace.collectives[i])
                rows.append(
                    {
                        "ph": "X",
                        "cat": cats[cid] or _cat_of(k),
                        "name": names[nid],
                        "pid": "device" if t < 0 else 0,
                        "tid": t,
                        "ts": (s - base) / 1000.0,
                        "dur": d / 1000.0,
                        "args": args,
                    }
                )
            body = enc.encode(rows)[1:-1]
            if body:
                out.write((b"," if lo else b"") + body)
        out.write(b"]}")
    finally:
        if out is not raw:
            out.close()
        raw.close()
    return path


def _add_collective(args: dict[str, Any], info: tuple) -> None:
    """Kineto's own keys, so that the file reads back (here and in other tools) the same."""
    name, in_n, out_n, dtype, group = info
    args["Collective name"] = name
    for key, value in (("In msg nelems", in_n), ("Out msg nelems", out_n), ("dtype", dtype), ("Group size", group)):
        if value is not None:
            args[key] = value


def _cat_of(kind: int) -> str:
    return {
        int(EventKind.OP): "cpu_op",
        int(EventKind.REGION): "user_annotation",
        int(EventKind.DEVICE): "kernel",
        int(EventKind.DEVICE_ANNOTATION): "gpu_user_annotation",
        int(EventKind.RUNTIME): "cuda_runtime",
        int(EventKind.PYTHON): "python_function",
    }.get(kind, "other")
