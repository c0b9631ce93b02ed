"""torch's allocator records (``profile_memory=True``) as columns: one row per alloc/free.

Each ``[memory]`` instant event says ``Bytes`` (negative for a free), ``Addr``, ``Total
Allocated``, ``Total Reserved``, ``Device Type`` and ``Device Id``. ``_KinetoEvent`` hands
out only the size, not the address, and torch's event tree costs ~4 µs per allocation in
Python (it was the whole cost of an earlier design). So the records are read, in order:

1. from Kineto's own JSON, which the run writes anyway (``trace.json.gz``): one regex pass
   picks out the ``args`` of the memory events and their numbers are converted in one
   numpy call (~1 µs per record); their time and thread come from the trace model's own
   ``[memory]`` rows, which are in the same order (checked by count and size);
2. otherwise from torch's event tree (exact, slower): :func:`records_from_event_tree`;
3. offline, from a saved trace file, in the same pass that builds the trace model
   (:mod:`.chrome`).
"""

from __future__ import annotations

import re
import warnings
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
        return cls(*(z for _ in _COLUMNS))

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
# every byte that is not part of an integer becomes a space: numbers survive, keys vanish
_NUMBERS_ONLY = bytes(c if (48 <= c <= 57 or c == 45) else 32 for c in range(256))


def records_from_kineto_json(raw: bytes, time_ns: np.ndarray, thread: np.ndarray, *, base_ns: int = 0) -> MemoryRecords:
    """The memory records of one Kineto JSON trace whose ``[memory]`` events are, in order,
    the trace-model rows with times ``time_ns`` and threads ``thread``.

    Raises ValueError when the file does not line up with them (the caller falls back)."""
    found = _MEMORY_ARGS.findall(raw)
    n = len(found)
    if n != time_ns.size:
        raise ValueError(f"the trace file holds {n} memory records, the profiler {time_ns.size}")
    cols = _parse_args(found)
    oom = tuple(_oom_events(raw, base_ns))
    return MemoryRecords.build(oom=oom, time_ns=time_ns, thread=thread, **cols)


def _parse_args(found: list[bytes]) -> dict[str, np.ndarray]:
    n = len(found)
    if not n:
        return {}
    # Kineto writes the same keys in the same order for every record: read the layout once,
    # then convert every number of every record in one numpy call.
    layout = [k for k, v in _KEY.findall(found[0]) if v]
    text = b" ".join(found).translate(_NUMBERS_ONLY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        numbers = np.fromstring(text, dtype=np.int64, sep=" ") if text.strip() else np.zeros(0, dtype=np.int64)  # type: ignore[call-overload]
    if layout and numbers.size == n * len(layout) and _same_layout(found, layout):
        table = numbers.reshape(n, len(layout))
        return {_KEYS[k]: table[:, i] for i, k in enumerate(layout) if k in _KEYS}
    # an unusual writer: parse record by record
    out: dict[str, list[int]] = {v: [] for v in _KEYS.values()}
    for args in found:
        pairs = {k: int(v) for k, v in _KEY.findall(args) if v}
        for k, col in _KEYS.items():
            out[col].append(pairs.get(k, -1))
    return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def _same_layout(found: list[bytes], layout: list[bytes]) -> bool:
    # cheap spot checks: the first, middle and last records carry the same numeric keys
    for args in (found[len(found) // 2], found[-1]):
        if [k for k, v in _KEY.findall(args) if v] != layout:
            return False
    return True


def _oom_events(raw: bytes, base_ns: int) -> list[tuple[int, int, int, int]]:
    if b"[OutOfMemory]" not in raw:
        return []
    out = []
    for ts, args in _OOM_ARGS.findall(raw):
        pairs = {k: int(v) for k, v in _KEY.findall(args) if v}
        out.append((round(float(ts) * 1000) + base_ns, pairs.get(b"Bytes", 0), pairs.get(b"Device Type", -1), pairs.get(b"Device Id", -1)))
    return out


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
