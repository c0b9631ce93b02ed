"""torch's allocator records (``profile_memory=True``) as columns: one row per alloc/free.

Each ``[memory]`` instant event says ``Bytes`` (negative for a free), ``Addr``, ``Total
Allocated``, ``Total Reserved``, ``Device Type`` and ``Device Id``. ``_KinetoEvent`` hands
out only the size, not the address, and torch's event tree costs ~4 µs per allocation in
Python (it was the whole cost of an earlier design). So the records are read, in order:

1. from Kineto's own JSON, which the run writes anyway (``trace.json.gz``), in chunks and
   vectorised (~0.6 µs per record, no Python per record; from the file's end when no OOM
   event is expected): see :func:`records_from_kineto_json`; their time and thread come from
   the trace model's own ``[memory]`` rows, which are in the same order (checked by count and
   by the first and last records' times);
2. otherwise from torch's event tree (exact, slower): :func:`records_from_event_tree`;
3. offline, from a saved trace file, in the same pass that builds the trace model
   (:mod:`.chrome`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MEMORY_EVENT", "OOM_EVENT", "MemoryRecords", "records_from_event_tree", "records_from_kineto_json"]

MEMORY_EVENT = "[memory]"
OOM_EVENT = "[OutOfMemory]"

#: c10::DeviceType values that Kineto writes as "Device Type"
DEVICE_TYPES = {0: "cpu", 1: "cuda", 20: "neuron"}  # 20 = PrivateUse1, which TorchNeuron renames "neuron"

_COLUMNS = ("time_ns", "bytes", "addr", "total_allocated", "total_reserved", "device_type", "device_id", "thread")


@dataclass(frozen=True, eq=False)
class MemoryRecords:
    """Allocator records in time order (int64 columns). ``bytes`` < 0 is a free.
    ``total_*`` are the allocator's own totals after the event (-1 when not recorded)."""

    time_ns: np.ndarray
    bytes: np.ndarray
    addr: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    device_type: np.ndarray
    device_id: np.ndarray
    thread: np.ndarray
    #: out-of-memory events torch recorded: (time_ns, bytes asked, device type, device id)
    oom: tuple[tuple[int, int, int, int], ...] = ()

    def __len__(self) -> int:
        return int(self.time_ns.size)

    @classmethod
    def empty(cls) -> "MemoryRecords":
        z = np.zeros(0, dtype=np.int64)
        return cls(time_ns=z, bytes=z, addr=z, total_allocated=z, total_reserved=z, device_type=z, device_id=z, thread=z)

    @classmethod
    def build(cls, oom: tuple = (), **cols: Any) -> "MemoryRecords":
        """From equal-length sequences, sorted by time (stable: same-instant order kept)."""
        arrays = {k: np.asarray(cols.get(k, ()), dtype=np.int64) for k in _COLUMNS}
        n = arrays["time_ns"].size
        for k in _COLUMNS:
            if arrays[k].size != n:
                arrays[k] = np.full(n, -1, dtype=np.int64)
        order = np.argsort(arrays["time_ns"], kind="stable")
        if n and not bool((order[1:] > order[:-1]).all()):
            arrays = {k: v[order] for k, v in arrays.items()}
        return cls(**arrays, oom=tuple(oom))

    @classmethod
    def concat(cls, parts: "list[MemoryRecords]") -> "MemoryRecords":
        parts = [p for p in parts if p is not None]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls.build(
            oom=tuple(o for p in parts for o in p.oom), **{k: np.concatenate([getattr(p, k) for p in parts]) for k in _COLUMNS}
        )

    def select(self, mask: np.ndarray) -> "MemoryRecords":
        return MemoryRecords(**{k: getattr(self, k)[mask] for k in _COLUMNS}, oom=self.oom)


# The args object of every [memory] event; no brace can occur between the name and its args.
_MEMORY_ARGS = re.compile(rb'"name":\s*"\[memory\]",[^{}]*"args":\s*\{([^}]*)\}')
_OOM_ARGS = re.compile(rb'"name":\s*"\[OutOfMemory\]",[^{}]*"ts":\s*([-\d.]+)[^{}]*"args":\s*\{([^}]*)\}')
_KEY = re.compile(rb'"([^"]+)":\s*(-?\d+)?')
_KEYS = {
    b"Bytes": "bytes",
    b"Addr": "addr",
    b"Total Allocated": "total_allocated",
    b"Total Reserved": "total_reserved",
    b"Device Type": "device_type",
    b"Device Id": "device_id",
}

# --- the vectorised reader -------------------------------------------------------------------
# Each [memory] event's name is found by one byte scan ('[' is rare in a trace), its args by a
# fixed offset from the name (checked byte for byte; the few that moved are found one by one),
# and every number by a few numpy steps over all records at once: no Python per record.
_CHUNK = 4 << 20  # bytes per read: the scan and the parse work on cache-hot bytes
_REACH = 4096  # bytes a record may need after its name (kept over to the next chunk)
_NAME = np.frombuffer(b'[memory]"', dtype=np.uint8)
_OOM_NAME = b'[OutOfMemory]"'
_FIRST = re.compile(rb'\[memory\]",[^{}]*?"args":\s*\{([^}]*)\}')
_TO_ARGS = re.compile(rb'\[memory\]",[^{}]*?"args":\s*\{')
_OOM_AT = re.compile(rb'\[OutOfMemory\]",[^{}]*"ts":\s*([-\d.]+)[^{}]*"args":\s*\{([^}]*)\}')
_NUMBER = re.compile(rb'"([^"]+)":\s*(-?\d+)(?=\s*[,}]|\s*$)')
_SEPARATOR = re.compile(rb'\s*,?\s*"[^"]+":\s*')
_BASE_NS = re.compile(rb'"baseTimeNanoseconds":\s*(\d+)')
_WIDE = 19  # digits an int64 can hold


class _LayoutError(ValueError):
    """The records are not all written alike: read them one by one instead."""


class _Layout:
    """How Kineto wrote the first record's args, reused for every record: the bytes from the
    name to the args, then literal, number, literal, number... up to the last key we need."""

    def __init__(self, window: Any, name_at: int) -> None:
        m = _FIRST.match(window, name_at)
        if m is None:
            raise _LayoutError("no args after the first [memory] event")
        self.offset = m.start(1) - name_at  # name '[' -> first byte inside the args' braces
        head = m.group(0)[: self.offset]
        self.args_lit = np.frombuffer(head[head.rindex(b'"args"') :], dtype=np.uint8)  # '"args": {'
        content = m.group(1)
        found = list(_NUMBER.finditer(content))
        need = [i for i, t in enumerate(found) if t.group(1) in _KEYS]
        if not need:
            raise _LayoutError("the [memory] events carry none of the allocator's numbers")
        found = found[: need[-1] + 1]
        self.keys: list[str | None] = []
        self.literals: list[np.ndarray] = []
        self.first: list[bytes] = []  # the first record's number and the byte after it
        prev = 0
        for t in found:
            lit = content[prev : t.start(2)]
            if not _SEPARATOR.fullmatch(lit):  # a non-numeric value in between: not a fixed layout
                raise _LayoutError("the [memory] args hold a non-numeric value between the numbers")
            self.literals.append(np.frombuffer(lit, dtype=np.uint8))
            self.keys.append(_KEYS.get(t.group(1)))
            self.first.append(t.group(2) + content[t.end(2) : t.end(2) + 1])
            prev = t.end(2)
        self.constant = [True] * len(found)  # try "same as the first record" while it mostly holds


class _Windows:
    """``rows(at, width)``: the bytes [at, at + width) of a buffer for many ``at`` at once."""

    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf
        self._views: dict[int, np.ndarray] = {}

    def rows(self, at: np.ndarray, width: int) -> np.ndarray:
        v = self._views.get(width)
        if v is None:
            v = self._views[width] = np.lib.stride_tricks.sliding_window_view(self.buf, width)
        return v[at]  # one gather of whole rows, no index matrix

    def equal(self, at: np.ndarray, lit: np.ndarray) -> np.ndarray:
        # each row compared as one opaque value (~10x faster than an element-wise compare)
        return self.rows(at, lit.size).view(f"V{lit.size}").ravel() == lit.view(f"V{lit.size}")[0]


# SWAR: 8 ASCII digits in one little-endian uint64 -> their value in three multiply-shifts
_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_SWAR = (
    (np.uint64(0x00FF00FF00FF00FF), np.uint64(6553601), np.uint64(16)),
    (np.uint64(0x0000FFFF0000FFFF), np.uint64(42949672960001), np.uint64(32)),
)
_DIGITS = 16  # per number, read as two uint64 lanes; longer ones take numpy's string cast
_PROBE = _DIGITS + 2  # sign, 16 digits, and the byte that ends the number
# _KEEP[k]: the first k of 16 bytes (the digits, left-aligned), as two uint64 lanes
_KEEP = np.zeros((_DIGITS + 1, _DIGITS), dtype=np.uint8)
for _k in range(_DIGITS + 1):
    _KEEP[_k, :_k] = 0xFF
_KEEP = _KEEP.view(np.uint64)
_SCALE = (10 ** np.arange(_DIGITS, -1, -1, dtype=np.uint64)).astype(np.uint64)  # 10**(16 - digits)


def _numbers(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The integers at the start of each row of ``w`` (``_PROBE`` bytes wide) and their lengths
    (sign included); None when one has no digit or more than 16."""
    neg = w[:, 0] == 45
    any_neg = bool(neg.any())
    isd = (w - np.uint8(48)) < 10
    if any_neg:
        isd[neg, 0] = True
    length = np.argmin(isd, axis=1)  # the first byte that is not a digit
    digits = length - neg
    if not bool((digits > 0).all()):
        return None
    # left-aligned digits, the bytes after them masked off: SWAR gives value * 10**(16 - digits)
    lanes = np.where(neg[:, None], w[:, 1 : _DIGITS + 1], w[:, :_DIGITS]) if any_neg else w[:, :_DIGITS]
    x = np.ascontiguousarray(lanes).view(np.uint64) & _KEEP[digits] & _LOW_NIBBLES
    x = (x * np.uint64(2561)) >> np.uint64(8)  # pairs of digits
    for mask, mul, shift in _SWAR:  # then fours, then eights
        x = ((x & mask) * mul) >> shift
    value = ((x[:, 0] * np.uint64(10**8) + x[:, 1]) // _SCALE[digits]).astype(np.int64)
    return (np.where(neg, -value, value) if any_neg else value), length


def _long_numbers(win: _Windows, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = win.rows(at, _WIDE + 2)
    isd = ((w - np.uint8(48)) < 10) | ((np.arange(w.shape[1]) == 0) & (w == 45))
    length = np.argmin(isd, axis=1)
    if not bool((length > (w[:, 0] == 45)).all()):
        raise _LayoutError("a [memory] record holds a number this reader cannot convert")
    text = np.where(np.arange(w.shape[1]) < length[:, None], w, np.uint8(32))
    return np.ascontiguousarray(text).view(f"S{w.shape[1]}").ravel().astype(np.int64), length


def _same(rows: np.ndarray, lit: np.ndarray) -> np.ndarray:
    """Rows whose first ``lit.size`` bytes are ``lit`` (each compared as one opaque value)."""
    block = np.ascontiguousarray(rows[:, : lit.size])
    return block.view(f"V{lit.size}").ravel() == lit.view(f"V{lit.size}")[0]


def _parse_records(win: _Windows, names: np.ndarray, layout: _Layout, text: Any) -> dict[str, np.ndarray]:
    """The numbers of the records whose name '[' is at ``names`` (positions in ``win.buf``)."""
    at = names + layout.offset
    moved = ~win.equal(at - layout.args_lit.size, layout.args_lit)
    if moved.any():  # a wider pid/tid/ts than the first record's: find these args one by one
        for i in np.flatnonzero(moved).tolist():
            m = _TO_ARGS.match(text, int(names[i]))
            if m is None:
                raise _LayoutError("a [memory] event without args")
            at[i] = m.end()
    out: dict[str, np.ndarray] = {}
    for k, (lit, key, first) in enumerate(zip(layout.literals, layout.keys, layout.first)):
        n = at.size
        if layout.constant[k]:
            # most fields (device, reserved totals) repeat: literal + the first value in one compare
            same = win.equal(at, np.concatenate([lit, np.frombuffer(first, dtype=np.uint8)]))
            if 2 * int(same.sum()) < n:
                layout.constant[k] = False
            rest = np.flatnonzero(~same)
            value = np.full(n, int(first[:-1]), dtype=np.int64)
            step = np.full(n, lit.size + len(first) - 1, dtype=np.int64)
        else:
            rest = np.arange(n)
            value = step = np.empty(n, dtype=np.int64)
        if rest.size:
            p = at[rest]
            w = win.rows(p, lit.size + _PROBE)  # the literal and the number in one gather
            if not bool(_same(w, lit).all()):
                raise _LayoutError("the [memory] records do not all share the first one's layout")
            got = _numbers(w[:, lit.size :])
            v, length = got if got is not None else _long_numbers(win, p + lit.size)
            if rest.size == n:
                value, step = v, lit.size + length
            else:
                value[rest] = v
                step[rest] = lit.size + length
        at = at + step
        if key is not None:
            out[key] = value
    return out


def _chunks(source: Any, backward: bool) -> Any:
    """(buffer, file offset, names_end) over the source, first to last chunk or last to first:
    names are read from buffer[:names_end]; the buffer holds ``_REACH`` bytes more, so that a
    record whose name is near the chunk's end is read whole."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        a = np.frombuffer(source, dtype=np.uint8)
        size = a.size
        for lo in _chunk_starts(size, backward):
            hi = min(lo + _CHUNK, size)
            yield a[lo : min(hi + _REACH, size)], lo, hi - lo
        return
    with open(source, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        buf = bytearray(_CHUNK + _REACH)  # one buffer, reused: nothing the size of the file
        mv = memoryview(buf)
        a = np.frombuffer(buf, dtype=np.uint8)
        for lo in _chunk_starts(size, backward):
            hi = min(lo + _CHUNK, size)
            want = min(hi + _REACH, size) - lo
            f.seek(lo)
            have = 0
            while have < want:
                got = f.readinto(mv[have:want])
                if not got:
                    break
                have += got
            yield a[:have], lo, min(hi - lo, have)


def _chunk_starts(size: int, backward: bool) -> range:
    starts = range(0, max(size, 1), _CHUNK)
    return starts[::-1] if backward else starts


def records_from_kineto_json(
    source: bytes | str | os.PathLike[str],
    time_ns: np.ndarray,
    thread: np.ndarray,
    *,
    base_ns: int | None = 0,
    default_base_ns: int = 0,
    oom_events: int | None = None,
) -> MemoryRecords:
    """The memory records of one Kineto JSON trace (its bytes, or its path: read in chunks)
    whose ``[memory]`` events are, in order, the trace-model rows with times ``time_ns`` and
    threads ``thread``. ``base_ns``: added to out-of-memory events' times (None: the file's
    ``baseTimeNanoseconds``, or ``default_base_ns`` when it names none). ``oom_events``: how
    many out-of-memory events the trace model holds (None: unknown); when none, the file is
    read from its end, where Kineto writes the instant events, only until every record is found.

    Raises ValueError when the file does not line up with them (the caller falls back)."""
    try:
        return _records_vectorised(source, time_ns, thread, base_ns, default_base_ns, backward=oom_events == 0)
    except (_LayoutError, IndexError):  # an unusual writer: parse record by record
        raw = bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).read_bytes()
        return _records_by_regex(raw, time_ns, thread, base_ns, default_base_ns)


_TS_AT = re.compile(rb'\[memory\]",[^{}]*?"ts":\s*(-?[\d.]+)')


def _records_vectorised(
    source: Any, time_ns: np.ndarray, thread: np.ndarray, base_ns: int | None, default_base_ns: int, *, backward: bool
) -> MemoryRecords:
    n = int(time_ns.size)
    layout: _Layout | None = None
    parts: list[dict[str, np.ndarray]] = []
    oom: list[tuple[float, bytes]] = []
    found = 0
    ends: list[float | None] = []  # the ts of the first and the last record, in file order
    for buf, _off, names_end in _chunks(source, backward):
        if found == n and backward:
            break
        cand = np.flatnonzero(buf[:names_end] == 91)
        if not cand.size:
            continue
        win = _Windows(buf)
        cand = cand[cand + _NAME.size <= buf.size]
        names = cand[win.equal(cand, _NAME)]
        if names.size != cand.size:
            for c in cand[buf[np.minimum(cand + 1, buf.size - 1)] == ord("O")].tolist():
                m = _OOM_AT.match(buf, c)
                if m is not None:
                    oom.append((float(m.group(1)), m.group(2)))
        if not names.size:
            continue
        found += int(names.size)
        if found > n:
            raise ValueError(f"the trace file holds more than the profiler's {n} memory records")
        if layout is None:
            layout = _Layout(buf, int(names[0]))
        parts.append(_parse_records(win, names, layout, buf))
        first, last = _ts_at(buf, int(names[0]), backward), _ts_at(buf, int(names[-1]), backward)
        ends = [first, ends[1] if ends else last] if backward else [ends[0] if ends else first, last]
    if found != n:
        raise ValueError(f"the trace file holds {found} memory records, the profiler {n}")
    first_ts, last_ts = ends if len(ends) == 2 else (None, None)
    if (
        n > 1
        and first_ts is not None
        and last_ts is not None
        and abs(round((last_ts - first_ts) * 1000) - int(time_ns[-1] - time_ns[0])) > 10
    ):
        # the first and last records must be the profiler's (reading from the end stops at n)
        raise ValueError("the trace file's memory records do not line up with the profiler's")
    if backward:
        parts.reverse()
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if oom and base_ns is None:
        base_ns = _file_base_ns(source, default_base_ns)
    oom_tuples = tuple(_oom_event(ts, args, base_ns or 0) for ts, args in oom)
    return MemoryRecords.build(oom=oom_tuples, time_ns=time_ns, thread=thread, **cols)


def _ts_at(buf: np.ndarray, name_at: int, backward: bool) -> float | None:
    m = _TS_AT.match(buf.data, name_at)  # the array's bytes (its buffer), typed as such
    if m is None and backward:  # no check possible: read record by record (and count all)
        raise _LayoutError("a [memory] event without ts after its name")
    return float(m.group(1)) if m else None


def _file_base_ns(source: Any, default: int) -> int:
    """Kineto's ``baseTimeNanoseconds`` (written near the start or the end of the file)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        head, tail = bytes(source[:4096]), bytes(source[-4096:])
    else:
        with open(source, "rb") as f:
            head = f.read(4096)
            f.seek(max(os.fstat(f.fileno()).st_size - 4096, 0))
            tail = f.read()
    m = _BASE_NS.search(tail) or _BASE_NS.search(head)
    return int(m.group(1)) if m else default


def _records_by_regex(
    raw: bytes, time_ns: np.ndarray, thread: np.ndarray, base_ns: int | None, default_base_ns: int
) -> MemoryRecords:
    found = _MEMORY_ARGS.findall(raw)
    if len(found) != time_ns.size:
        raise ValueError(f"the trace file holds {len(found)} memory records, the profiler {time_ns.size}")
    out: dict[str, list[int]] = {v: [] for v in _KEYS.values()}
    for args in found:
        pairs = {k: int(v) for k, v in _KEY.findall(args) if v}
        for k, col in _KEYS.items():
            out[col].append(pairs.get(k, -1))
    oom = []
    if b"[OutOfMemory]" in raw:
        if base_ns is None:
            m = _BASE_NS.search(raw[-4096:]) or _BASE_NS.search(raw[:4096])
            base_ns = int(m.group(1)) if m else default_base_ns
        oom = [_oom_event(float(ts), args, base_ns) for ts, args in _OOM_ARGS.findall(raw)]
    return MemoryRecords.build(oom=tuple(oom), time_ns=time_ns, thread=thread, **out)


def _oom_event(ts: float, args: bytes, base_ns: int) -> tuple[int, int, int, int]:
    pairs = {k: int(v) for k, v in _KEY.findall(args) if v}
    return (round(ts * 1000) + base_ns, pairs.get(b"Bytes", 0), pairs.get(b"Device Type", -1), pairs.get(b"Device Id", -1))


def records_from_event_tree(kineto_results: Any) -> MemoryRecords:
    """Exact but slow (~4 µs per record): torch's event tree, for when no Kineto JSON can be
    read (a trace another exporter consumed, a capture split in several sessions)."""
    import torch

    alloc_type = torch._C._profiler._ExtraFields_Allocation
    oom_type = getattr(torch._C._profiler, "_ExtraFields_OutOfMemory", None)
    t: list[int] = []
    thr: list[int] = []
    fields: list[Any] = []
    oom: list[tuple[int, int, int, int]] = []
    stack = list(kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        ch = e.children
        if ch:
            stack.extend(ch)
            continue
        f = e.extra_fields
        if type(f) is alloc_type:
            t.append(e.start_time_ns)
            thr.append(e.start_tid)
            fields.append(f)
        elif oom_type is not None and type(f) is oom_type:
            oom.append((e.start_time_ns, 0, -1, -1))
    dev = [f.device for f in fields]
    return MemoryRecords.build(
        oom=tuple(oom),
        time_ns=t,
        thread=thr,
        bytes=[f.alloc_size for f in fields],
        addr=[f.ptr for f in fields],
        total_allocated=[f.total_allocated for f in fields],
        total_reserved=[f.total_reserved for f in fields],
        device_type=[_device_type_code(d) for d in dev],
        device_id=[d.index if d.index is not None else -1 for d in dev],
    )


def _device_type_code(device: Any) -> int:
    kind = getattr(device, "type", "cpu")
    return {"cpu": 0, "cuda": 1}.get(kind, 20)
