"""Load a saved Kineto trace (``trace.json`` or ``trace.json.gz``) into the trace model.

Any Kineto chrome trace works: neuronscope's own run directories, TensorBoard's
``tensorboard_trace_handler`` output, TorchNeuron's ``trace.json``, a colleague's file.
Timestamps in the file are microseconds relative to ``baseTimeNanoseconds``; wall clock is
``ts_us * 1000 + baseTimeNanoseconds`` (as HolisticTraceAnalysis does).
Device work is linked to the op that launched it through the ``External id`` both carry.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import msgspec

from ..errors import TraceLoadError
from .memory import MemoryRecords
from .model import ACTIVITY_KINDS, FILTERED_NAMES, INPUT_OPS, MARKER_PREFIX, EventKind, Trace

__all__ = ["load_trace", "parse_trace_bytes"]

_GZIP_MAGIC = b"\x1f\x8b"


# The fast path: msgspec decodes straight into these typed records, skipping every field we
# do not read (~2x faster than a generic JSON parser building dicts, and far less memory).
# Anything that does not fit (a foreign or hostile file) falls back to the generic path.
class _Args(msgspec.Struct):
    external_id: int = msgspec.field(name="External id", default=0)
    correlation: int = 0
    name: str | None = None  # metadata events: process_name
    labels: str | None = None  # metadata events: process_labels
    input_dims: Any = msgspec.field(name="Input Dims", default=None)  # record_shapes=True
    input_type: Any = msgspec.field(name="Input type", default=None)
    # [memory] records (profile_memory=True)
    mem_bytes: int = msgspec.field(name="Bytes", default=0)
    mem_addr: int = msgspec.field(name="Addr", default=-1)
    mem_total_allocated: int = msgspec.field(name="Total Allocated", default=-1)
    mem_total_reserved: int = msgspec.field(name="Total Reserved", default=-1)
    mem_device_type: int = msgspec.field(name="Device Type", default=0)
    mem_device_id: int = msgspec.field(name="Device Id", default=-1)


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event]
    baseTimeNanoseconds: int = 0
    neuronscope_device: str | None = None  # written by neuronscope into its own trace.json.gz
    neuronscope: Any = None  # neuronscope's own metadata (rank, job, capture) in its trace.json.gz
    distributedInfo: Any = None  # torch.distributed rank/world size, when initialised
    deviceProperties: Any = None


_decode_typed = msgspec.json.Decoder(_Doc).decode


def load_trace(path: str | os.PathLike[str], *, device: str | None = None) -> Trace:
    """Read a Kineto ``trace.json`` / ``trace.json.gz`` (or a run directory holding one).

    Raises :class:`~neuronscope.TraceLoadError` naming the file when it is missing,
    truncated, not JSON, or not a Kineto trace.
    """
    p = Path(path)
    if p.is_dir():
        candidates = [p / "trace.json.gz", p / "trace.json"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise TraceLoadError(f"{p}: directory holds no trace.json(.gz); was the run saved with save_trace=True?")
        p = found
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise TraceLoadError(f"{p}: cannot read trace file: {exc.strerror or exc}") from exc
    return parse_trace_bytes(raw, source=str(p), device=device)


def parse_trace_bytes(raw: bytes, *, source: str = "<bytes>", device: str | None = None) -> Trace:
    """Parse the bytes of a (possibly gzipped) Kineto trace. See :func:`load_trace`."""
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceLoadError(f"{source}: corrupt or truncated gzip data: {exc}") from exc
    if not raw.strip():
        raise TraceLoadError(f"{source}: the trace file is empty")
    try:
        typed = _decode_typed(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        typed = _decode_generic(raw, source)
    try:
        return _trace_from_typed(typed, device)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceLoadError(f"{source}: malformed trace event: {exc!r}") from exc


def _decode_generic(raw: bytes, source: str) -> _Doc:
    """The slow path for files the typed decoder rejects: say precisely what is wrong, or
    accept what is merely unusual (a bare list of events, numbers given as strings)."""
    try:
        doc = msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceLoadError(f"{source}: not valid JSON (truncated or corrupt trace?): {exc}") from exc
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceLoadError(f"{source}: not a Kineto/Chrome trace (no 'traceEvents' list at the top level)")
    try:
        return msgspec.convert(doc, _Doc, strict=False)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise TraceLoadError(f"{source}: malformed trace event: {exc}") from exc


def _trace_from_typed(doc: _Doc, device: str | None) -> Trace:
    """Records -> columns. Device work is linked to its op through the shared External id."""
    base = int(doc.baseTimeNanoseconds or 0)
    names: list[str] = []
    kinds: list[int] = []
    start: list[int] = []
    dur: list[int] = []
    thread: list[int] = []
    corr: list[int] = []
    linked: list[int] = []
    cats: list[str] = []
    inputs: dict[int, tuple[list, list]] = {}
    threads: dict[tuple[Any, Any], int] = {}
    saw_device = saw_neuron = False
    other = EventKind.OTHER
    device_kinds = (EventKind.DEVICE, EventKind.DEVICE_ANNOTATION, EventKind.RUNTIME)
    get_kind = ACTIVITY_KINDS.get
    mem: dict[str, list[int]] = {k: [] for k in ("time_ns", "bytes", "addr", "total_allocated", "total_reserved", "device_type", "device_id", "thread")}
    oom: list[tuple[int, int, int, int]] = []
    for ev in doc.traceEvents:
        if ev.ph != "X":
            if ev.ph == "i" and ev.name in ("[memory]", "[OutOfMemory]") and ev.args is not None:
                _memory_record(ev, base, threads, mem, oom)
                continue
            if ev.ph == "M" and ev.args is not None and "neuron" in f"{ev.args.name} {ev.args.labels}".lower():
                saw_neuron = True
            continue
        cat = ev.cat
        kind = get_kind(cat, other)
        name = ev.name
        if name in FILTERED_NAMES or name.startswith(MARKER_PREFIX):
            kind = other
        args = ev.args
        if args is not None and args.input_dims is not None and name in INPUT_OPS:
            inputs[len(names)] = (list(args.input_dims), list(args.input_type or ()))
        ext = args.external_id if args is not None else 0
        if kind in device_kinds:
            if cat == "privateuse1_runtime":
                saw_neuron = True
            saw_device = saw_device or kind == EventKind.DEVICE
            c, link = (args.correlation if args is not None else 0), ext
        else:
            c, link = ext, 0
        key = (ev.pid, ev.tid)
        tid = threads.get(key)
        if tid is None:
            tid = threads[key] = len(threads)
        names.append(name)
        kinds.append(kind)
        start.append(round(ev.ts * 1000.0) + base)
        d = round(ev.dur * 1000.0)
        dur.append(d if d > 0 else 0)
        thread.append(tid)
        corr.append(c)
        linked.append(link)
        cats.append(cat or "")
    if device is None:
        device = doc.neuronscope_device or ("neuron" if saw_device and saw_neuron else ("cuda" if saw_device else "cpu"))
    memory = MemoryRecords.build(oom=tuple(oom), **mem) if mem["time_ns"] or oom else None
    return Trace.from_columns(
        memory=memory,
        names=names,
        kind=kinds,
        start_ns=start,
        duration_ns=dur,
        thread=thread,
        correlation_id=corr,
        linked_correlation_id=linked,
        device=device,
        base_time_ns=base,
        metadata=_metadata(doc, base),
        categories=cats,
        inputs=inputs,
    )


def _memory_record(ev: _Event, base: int, threads: dict, mem: dict[str, list[int]], oom: list) -> None:
    a = ev.args
    assert a is not None
    t = round(ev.ts * 1000.0) + base
    if ev.name == "[OutOfMemory]":
        oom.append((t, a.mem_bytes, a.mem_device_type, a.mem_device_id))
        return
    key = (ev.pid, ev.tid)
    tid = threads.get(key)
    if tid is None:
        tid = threads[key] = len(threads)
    mem["time_ns"].append(t)
    mem["bytes"].append(a.mem_bytes)
    mem["addr"].append(a.mem_addr)
    mem["total_allocated"].append(a.mem_total_allocated)
    mem["total_reserved"].append(a.mem_total_reserved)
    mem["device_type"].append(a.mem_device_type)
    mem["device_id"].append(a.mem_device_id)
    mem["thread"].append(tid)


def _metadata(doc: _Doc, base: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"baseTimeNanoseconds": base}
    if isinstance(doc.distributedInfo, dict):
        meta["distributedInfo"] = doc.distributedInfo
    if isinstance(doc.deviceProperties, list):
        meta["deviceProperties"] = doc.deviceProperties
    if isinstance(doc.neuronscope, dict):
        meta["neuronscope"] = doc.neuronscope
    return meta
