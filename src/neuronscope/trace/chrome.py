"""Load a saved Kineto trace (``trace.json`` or ``trace.json.gz``) into the trace model.

Any Kineto chrome trace works: neuronscope's own run directories, TensorBoard's
``tensorboard_trace_handler`` output, TorchNeuron's ``trace.json``, a colleague's file.
Timestamps in the file are microseconds relative to ``baseTimeNanoseconds``; wall clock is
``ts_us * 1000 + baseTimeNanoseconds`` (as HolisticTraceAnalysis does).
Device work is linked to the op that launched it through the ``External id`` both carry.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import re
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .._paths import trace_file
from ..errors import TraceLoadError
from .kinds import CONCRETE_OPS, DEVICE_PROCESS, FILTERED_NAMES, INPUT_OPS, MARKER_PREFIX, activity_kind, device_label
from .memory import MEMORY_EVENT, OOM_EVENT, MemoryRecords
from .model import EventKind, Trace, compiled_graph_calls_as_ops

__all__ = ["load_trace", "parse_trace_bytes"]

_GZIP_MAGIC = b"\x1f\x8b"
STEP_PREFIX = "ProfilerStep#"


# The fast path: msgspec decodes straight into these typed records, skipping every field we
# do not read (~2x faster than a generic JSON parser building dicts, and far less memory).
# Anything that does not fit (a foreign or hostile file) falls back to the generic path.
class _Args(msgspec.Struct):
    external_id: int = msgspec.field(name="External id", default=0)
    external_id_lower: int = msgspec.field(name="external id", default=0)  # device/runtime events, torch 1.8-1.10
    correlation: int = 0
    name: str | None = None  # metadata events: process_name
    labels: str | None = None  # metadata events: process_labels
    input_dims: Any = msgspec.field(name="Input Dims", default=None)  # record_shapes=True
    input_type: Any = msgspec.field(name="Input type", default=None)
    concrete: Any = msgspec.field(name="Concrete Inputs", default=None)  # scalar arguments, as strings
    # collectives (record_param_comms, NCCL kernels): what, how much, among how many ranks
    collective_name: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
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


_decode_head = msgspec.json.Decoder(_Doc).decode
_decode_events = msgspec.json.Decoder(list[_Event]).decode

#: bytes read (decompressed) per step: the events of one chunk are decoded into typed records,
#: appended to the columns and dropped, so a trace never holds more than a chunk of records
CHUNK = 2 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEAD_LIMIT = 64 << 20  # a header this long before "traceEvents": not a Kineto trace to stream
#: peak memory of a load, as a share of the decompressed JSON (columns ~0.3x, plus a chunk);
#: a trace whose estimate exceeds the memory available is refused before it is read
MEMORY_PER_JSON_BYTE = 0.5


class _Malformed(Exception):
    """The streaming reader met something it cannot split: read the file the slow way."""

    def __init__(self, bytes_read: int = 0) -> None:
        super().__init__(bytes_read)
        self.bytes_read = bytes_read


def _bytes_read(exc: BaseException) -> int:
    return exc.bytes_read if isinstance(exc, _Malformed) else 0


def load_trace(path: str | os.PathLike[str], *, device: str | None = None) -> Trace:
    """Read a Kineto ``trace.json`` / ``trace.json.gz`` (or a run directory, or a directory
    holding one trace: see :mod:`neuronscope._paths`).

    The file is read in chunks (gzip decompressed as it streams) straight into the columns:
    peak memory stays below the file's size. Raises :class:`~neuronscope.TraceLoadError`
    naming the file when it is missing, truncated, not JSON, not a Kineto trace, or larger
    than the memory available could hold.
    """
    p = Path(path)
    if not p.is_file():  # a directory (or nothing): what ``show`` and ``ns.diagnose`` would read
        p = trace_file(p)
    source = str(p)
    try:
        with open(p, "rb") as f:
            _check_memory(p, f, f.read(2) == _GZIP_MAGIC)
        return _parse(lambda: _chunks(open(p, "rb"), source), source, device)
    except OSError as exc:
        raise TraceLoadError(f"{source}: cannot read trace file: {exc.strerror or exc}") from exc


def parse_trace_bytes(raw: bytes, *, source: str = "<bytes>", device: str | None = None) -> Trace:
    """Parse the bytes of a (possibly gzipped) Kineto trace. See :func:`load_trace`."""
    return _parse(lambda: _chunks(io.BytesIO(raw), source), source, device)


def _chunks(f: Any, source: str) -> Iterator[bytes]:
    """The decompressed bytes of a file object, a chunk at a time (gzip streamed)."""
    with f:
        stream = gzip.GzipFile(fileobj=f, mode="rb") if f.read(2) == _GZIP_MAGIC else f
        f.seek(0)
        while True:
            try:
                block = stream.read(CHUNK)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise TraceLoadError(f"{source}: corrupt or truncated gzip data: {exc}") from exc
            if not block:
                return
            yield block


def _check_memory(path: Path, f: Any, gzipped: bool) -> None:
    """Refuse a trace that cannot fit before reading it (a clear error, not an OOM kill)."""
    size = path.stat().st_size
    json_bytes = size
    if gzipped and size >= 18:
        f.seek(-4, os.SEEK_END)  # gzip's ISIZE: the decompressed size mod 2**32
        isize = int.from_bytes(f.read(4), "little")
        json_bytes = max(isize, size * 4) if size >= 1 << 30 else isize  # ISIZE wraps past 4 GiB
    available = _available_memory()
    need = int(json_bytes * MEMORY_PER_JSON_BYTE)
    if available is not None and need > available:
        raise TraceLoadError(
            f"{path}: loading this trace needs about {need / 2**30:.1f} GiB of memory "
            f"({json_bytes / 2**30:.1f} GiB of JSON) and {available / 2**30:.1f} GiB is available: load it on a "
            "machine with more memory, or profile fewer steps (schedule=, or a shorter window)"
        )


def _available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none: no check)."""
    from .._system import available_memory

    return available_memory()


#: a file the streaming reader cannot split is read whole (to say precisely what is wrong, or
#: to read an unusual layout) only up to this size; past it, the error says what was found
WHOLE_FILE_LIMIT = 1 << 30


def _parse(open_chunks: "Callable[[], Iterator[bytes]]", source: str, device: str | None) -> Trace:
    # the cyclic GC would walk every object the load keeps (the inputs table grows with the
    # trace) again and again while millions of short-lived records come and go: quadratic on
    # a multi-GB trace. Nothing the load makes is cyclic garbage.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_with_gc_paused(open_chunks, source, device)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_with_gc_paused(open_chunks: "Callable[[], Iterator[bytes]]", source: str, device: str | None) -> Trace:
    cols = _Columns()
    try:
        head, tail = _stream_events(open_chunks(), cols)
        doc = _header(head, tail)
    except (_Malformed, msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        cols = _Columns()  # let the partial columns go before anything is read again
        if _bytes_read(exc) > WHOLE_FILE_LIMIT:
            raise TraceLoadError(
                f"{source}: truncated or corrupt: the traceEvents array does not close where the file ends "
                f"(read {_bytes_read(exc) / 2**30:.1f} GiB)"
            ) from None
        return _parse_whole(b"".join(open_chunks()), source, device)
    except (TypeError, ValueError, OverflowError) as exc:  # an event's value does not fit (a ts beyond int64 ns)
        raise TraceLoadError(f"{source}: malformed trace event: {exc!r}") from exc
    try:
        return cols.finish(doc, device)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceLoadError(f"{source}: malformed trace event: {exc!r}") from exc


def _stream_events(chunks: Iterator[bytes], cols: "_Columns") -> tuple[bytes, bytes]:
    """Feed the events of the ``traceEvents`` array to ``cols`` chunk by chunk; return the
    document's text before the array and after it (the small top-level keys).

    The array is cut after the last ``},`` of what was read so far: if the events up to there
    decode, the cut was between two events (a cut inside an event or a string cannot decode).
    Anything unusual raises :class:`_Malformed`, and the caller reads the file whole instead.
    """
    buf = b""
    read = 0
    for block in chunks:
        read += len(block)
        buf += block
        m = _EVENTS_KEY.search(buf)
        if m is not None:
            head, buf = buf[: m.start()], buf[m.end() :]
            break
        if buf.lstrip()[:1] == b"[":  # a bare list of events
            head, buf = b"", buf.lstrip()[1:]
            break
        if len(buf) > _HEAD_LIMIT:
            raise _Malformed(read)
    else:
        raise _Malformed(read)
    if head.lstrip()[:1] not in (b"{", b""):
        raise _Malformed(read)
    for block in chunks:
        read += len(block)
        buf += block
        buf = _take_events(buf, cols)
    try:
        return head, _finish_events(buf, cols)
    except _Malformed:
        raise _Malformed(read) from None


def _take_events(buf: bytes, cols: "_Columns") -> bytes:
    """Decode the complete events at the front of ``buf``; return the rest."""
    end = len(buf)
    for _ in range(8):
        cut = buf.rfind(b"},", 0, end)
        if cut < 0:
            return buf
        try:
            events = _decode_events(b"[" + buf[: cut + 1] + b"]")
        except msgspec.DecodeError:
            end = cut  # inside an event, a string or the trailer: try an earlier one
            continue
        cols.add(events)
        return buf[cut + 2 :]
    return buf


def _finish_events(buf: bytes, cols: "_Columns") -> bytes:
    """The last events, up to the ``]`` that closes the array; return the trailer after it."""
    end = len(buf)
    for _ in range(64):
        close = buf.rfind(b"]", 0, end)
        if close < 0:
            raise _Malformed
        body = buf[:close].strip()
        try:
            events = _decode_events(b"[" + body + b"]") if body else []
        except msgspec.DecodeError:
            end = close
            continue
        cols.add(events)
        return buf[close + 1 :]
    raise _Malformed


def _header(head: bytes, tail: bytes) -> _Doc:
    """The top-level keys around the events (``baseTimeNanoseconds`` comes after them)."""
    if not head.strip():
        return _Doc(traceEvents=[])
    return _decode_head(head + b'"traceEvents": []' + tail)


def _parse_whole(raw: bytes, source: str, device: str | None) -> Trace:
    """The slow path for files the streaming reader cannot split: decode the whole document,
    say precisely what is wrong, or accept what is merely unusual (numbers given as strings)."""
    if not raw.strip():
        raise TraceLoadError(f"{source}: the trace file is empty")
    try:
        doc = _decode_head(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        doc = _decode_generic(raw, source)
    cols = _Columns()
    try:
        cols.add(doc.traceEvents)
        doc.traceEvents = []
        return cols.finish(doc, device)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceLoadError(f"{source}: malformed trace event: {exc!r}") from exc


def _decode_generic(raw: bytes, source: str) -> _Doc:
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


class _Columns:
    """Typed records -> int64 columns, chunk by chunk (8 bytes a value; names interned).

    Device work is linked to its op through the shared External id. What needs the whole file
    (``baseTimeNanoseconds`` and device metadata, which Kineto writes after the events) is
    applied in :meth:`finish`.
    """

    def __init__(self) -> None:
        self.name_table: dict[str, int] = {}
        self.cat_table: dict[str, int] = {"": 0}
        self.name_id, self.kind, self.start, self.dur = array("q"), array("q"), array("q"), array("q")
        self.thread, self.corr, self.linked, self.category = array("q"), array("q"), array("q"), array("q")
        self.inputs: dict[int, tuple[list, list, list | None]] = {}
        self.collectives: dict[int, tuple] = {}
        self.input_signatures: dict[tuple[str, str, str], tuple[list, list, list | None]] = {}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.kind_of: dict[str | None, EventKind] = {}  # categories repeat, events are many
        self.unknown_on: dict[int, tuple[Any, int]] = {}  # position -> (pid, correlation): lanes metadata may claim
        self.device_pids: set[Any] = set()  # lanes process metadata names a device's ("MTIA 9")
        self.runtime_names: set[str] = set()
        self.device_cats: set[str] = set()
        self.saw_device = self.saw_neuron = False
        # allocator records ([memory] instant events), columns like the events'
        self.mem = {
            k: array("q")
            for k in ("time_ns", "bytes", "addr", "total_allocated", "total_reserved", "device_type", "device_id", "thread")
        }
        self.oom: list[tuple[int, int, int, int]] = []

    def add(self, events: list[_Event]) -> None:  # noqa: C901 - the per-event hot loop: one flat branch per field, no calls
        other, op_kind, region = EventKind.OTHER, EventKind.OP, EventKind.REGION
        runtime, device_op = EventKind.RUNTIME, EventKind.DEVICE
        device_kinds = (device_op, EventKind.DEVICE_ANNOTATION, runtime)
        kind_of, threads, inputs = self.kind_of, self.threads, self.inputs
        name_table, cat_table = self.name_table, self.cat_table
        name_id, kinds, start, dur = self.name_id.append, self.kind.append, self.start.append, self.dur.append
        thread, corr, linked, category = self.thread.append, self.corr.append, self.linked.append, self.category.append
        n = len(self.kind)
        for ev in events:
            if ev.ph != "X":
                if ev.ph == "i" and ev.args is not None and ev.name in (MEMORY_EVENT, OOM_EVENT):
                    self._memory_record(ev)
                elif ev.ph == "M" and ev.args is not None:
                    if "neuron" in f"{ev.args.name} {ev.args.labels}".lower():
                        self.saw_neuron = True
                    if ev.name == "process_name" and ev.args.name and DEVICE_PROCESS.match(ev.args.name):
                        self.device_pids.add(ev.pid)
                continue
            cat = ev.cat
            kind = kind_of.get(cat)
            if kind is None:
                kind = kind_of[cat] = activity_kind(cat)
                if kind in device_kinds and cat:
                    self.device_cats.add(cat)
            if kind == other and activity_kind(cat, on_device_lane=True) == device_op:
                # decided in finish(): device metadata may come later
                self.unknown_on[n] = (ev.pid, ev.args.correlation if ev.args is not None else 0)
            name = ev.name
            if name in FILTERED_NAMES or name.startswith(MARKER_PREFIX):
                kind = other
            elif kind == op_kind and "#" in name and (name.startswith(STEP_PREFIX) or cat == "Operator"):
                # torch's own record_function annotations ("ProfilerStep#3", "Optimizer.step#SGD.step",
                # "enumerate(DataLoader)#..."): torch 1.8-1.10 wrote them as operators
                kind = region
            args = ev.args
            if args is not None and args.input_dims is not None and name in INPUT_OPS:
                inputs[n] = self._shared_inputs(args.input_dims, args.input_type, args.concrete if name in CONCRETE_OPS else None)
            if args is not None and args.collective_name:
                self.collectives[n] = _collective_args(args)
            ext = (args.external_id or args.external_id_lower) if args is not None else 0
            if kind in device_kinds:
                if cat == "privateuse1_runtime":
                    self.saw_neuron = True
                if kind == runtime and len(self.runtime_names) < 64:
                    self.runtime_names.add(name)
                if kind == device_op:
                    self.saw_device = True
                corr((args.correlation if args is not None else 0))
                linked(ext)
            else:
                corr(ext)
                linked(0)
            key = (ev.pid, ev.tid)
            tid = threads.get(key)
            if tid is None:
                tid = threads[key] = len(threads)
            nid = name_table.get(name)
            if nid is None:
                nid = name_table[name] = len(name_table)
            cid = cat_table.get(cat or "")
            if cid is None:
                cid = cat_table[cat or ""] = len(cat_table)
            name_id(nid)
            kinds(kind)
            start(round(ev.ts * 1000.0))
            d = round(ev.dur * 1000.0)
            dur(d if d > 0 else 0)
            thread(tid)
            category(cid)
            n += 1

    def _memory_record(self, ev: _Event) -> None:
        a = ev.args
        assert a is not None
        t = round(ev.ts * 1000.0)  # baseTimeNanoseconds is added in finish()
        if ev.name == OOM_EVENT:
            self.oom.append((t, a.mem_bytes, a.mem_device_type, a.mem_device_id))
            return
        key = (ev.pid, ev.tid)
        tid = self.threads.get(key)
        if tid is None:
            tid = self.threads[key] = len(self.threads)
        m = self.mem
        for column, value in (
            ("time_ns", t),
            ("bytes", a.mem_bytes),
            ("addr", a.mem_addr),
            ("total_allocated", a.mem_total_allocated),
            ("total_reserved", a.mem_total_reserved),
            ("device_type", a.mem_device_type),
            ("device_id", a.mem_device_id),
            ("thread", tid),
        ):
            m[column].append(value)

    def _memory(self, base: int) -> MemoryRecords | None:
        if not len(self.mem["time_ns"]) and not self.oom:
            return None
        cols = {k: _int64(v) for k, v in self.mem.items()}
        cols["time_ns"] = cols["time_ns"] + base
        return MemoryRecords.build(oom=tuple((t + base, b, dt, di) for t, b, dt, di in self.oom), **cols)

    def _shared_inputs(self, dims: Any, types: Any, concrete: Any) -> tuple[list, list, list | None]:
        """One (shapes, dtypes, concrete) object per distinct signature: a loop records the same
        shapes thousands of times, and a list per event would cost ~700 bytes each."""
        concrete = list(concrete) if isinstance(concrete, list) else None
        try:
            key = (repr(dims), repr(types), repr(concrete))
        except RecursionError:
            return (list(dims), list(types or ()), concrete)
        shared = self.input_signatures.get(key)
        if shared is None:
            shared = self.input_signatures[key] = (list(dims), list(types or ()), concrete)
        return shared

    def finish(self, doc: _Doc, device: str | None) -> Trace:
        base = int(doc.baseTimeNanoseconds or 0)
        kind = _int64(self.kind)
        corr, linked = _int64(self.corr), _int64(self.linked)
        # unknown categories on lanes that metadata (anywhere in the file) names a device's
        device_pids = self.device_pids | ({d.get("id") for d in (doc.deviceProperties or ()) if isinstance(d, dict)} - {None})
        categories = tuple(self.cat_table)
        names = tuple(self.name_table)
        name_id = _int64(self.name_id)
        for pos, (pid, correlation) in self.unknown_on.items():
            if pid in device_pids and kind[pos] == EventKind.OTHER and names[name_id[pos]] not in FILTERED_NAMES:
                kind[pos] = EventKind.DEVICE
                linked[pos], corr[pos] = corr[pos], correlation  # stored as an op's: a device event links
                self.saw_device = True
                self.device_cats.add(categories[self.category[pos]])
        if device is None:
            device = doc.neuronscope_device or device_label(
                saw_device=self.saw_device,
                saw_neuron=self.saw_neuron,
                categories=self.device_cats,
                runtime_names=self.runtime_names,
                device_names=[str(d.get("name", "")) for d in (doc.deviceProperties or ()) if isinstance(d, dict)],
            )
        compiled_graph_calls_as_ops(names, name_id, kind, device)
        start = _int64(self.start)
        if base:
            start += base
        return Trace(
            names=names,
            kind=kind,
            name_id=name_id,
            start_ns=start,
            duration_ns=_int64(self.dur),
            thread=_int64(self.thread),
            correlation_id=corr,
            linked_correlation_id=linked,
            device=device,
            base_time_ns=base,
            metadata=_metadata(doc, base),
            category=_int64(self.category),
            categories=categories,
            inputs=self.inputs,
            memory=self._memory(base),
            collectives=self.collectives,
        )


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _collective_args(args: _Args) -> tuple:
    """(collective name, in elements, out elements, dtype, group size) as Kineto records them."""
    dtype = args.dtype if isinstance(args.dtype, str) else None
    return (str(args.collective_name), _as_int(args.in_nelems), _as_int(args.out_nelems), dtype, _as_int(args.group_size))


def _int64(values: array) -> np.ndarray:
    """A column over the array's own memory (no copy; the array is not appended to again)."""
    return np.frombuffer(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)


def _metadata(doc: _Doc, base: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"baseTimeNanoseconds": base}
    if isinstance(doc.distributedInfo, dict):
        meta["distributedInfo"] = doc.distributedInfo
    if isinstance(doc.deviceProperties, list):
        meta["deviceProperties"] = doc.deviceProperties
    if isinstance(doc.neuronscope, dict):
        meta["neuronscope"] = doc.neuronscope
    return meta
