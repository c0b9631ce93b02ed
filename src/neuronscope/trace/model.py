"""The trace model: every profiler event of one capture, as immutable columns.

Why columns and not one object per event: a 20,000-step profile holds ~420,000 events.
One Python object each costs ~0.3 s and ~100 MB before any analysis starts; int64
numpy arrays cost 8 bytes a value and let the analysis run vectorised (see ``analysis``).
numpy, not torch: everything after capture (analysis, reports, the CLI) runs without
importing torch, so ``neuronscope show`` starts in a fraction of a second.

The model is built from live Kineto results (:mod:`.kineto`) or from a saved Kineto
``trace.json(.gz)`` (:mod:`.chrome`); everything downstream reads only this model, so it
works the same online and offline.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigurationError
from .kinds import EventKind, compiled_graph_call_ids

__all__ = ["Event", "EventKind", "Trace", "compiled_graph_calls_as_ops"]


class Event(NamedTuple):
    """One event, materialised on demand from the columns (for inspection and tests)."""

    kind: EventKind
    name: str
    start_ns: int  #: Unix-epoch nanoseconds
    duration_ns: int
    thread: int  #: CPU thread, or device stream/lane for device events
    correlation_id: int
    linked_correlation_id: int  #: for device/runtime events: the op that launched them
    category: str = ""  #: the Kineto activity type / chrome ``cat`` (``kernel``, ``gpu_memcpy``, ``cuda_sync``...)


@dataclass(frozen=True, eq=False)
class Trace:
    """All events of one capture. Columns are aligned int64 numpy arrays; ``names`` is the string table.

    ``base_time_ns`` is the Unix-epoch time of the trace's relative zero (Kineto's
    ``baseTimeNanoseconds``); ``start_ns`` values are already absolute. ``category`` indexes
    ``categories`` (the raw Kineto activity type, finer than ``kind``: ``gpu_memcpy`` vs
    ``kernel``, ``cuda_sync``...). ``inputs`` holds, for a few op names the analysis needs
    (matmuls, convolutions, copies), the recorded input shapes and dtypes by event position
    (``record_shapes=True``); it is empty otherwise.
    """

    names: tuple[str, ...]
    kind: np.ndarray
    name_id: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    thread: np.ndarray
    correlation_id: np.ndarray
    linked_correlation_id: np.ndarray
    device: str = "cpu"  #: "cpu" | "cuda" | "neuron": which device the device columns describe
    base_time_ns: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    category: np.ndarray | None = None
    categories: tuple[str, ...] = ("",)
    inputs: dict[int, Any] = field(default_factory=dict)  #: event position -> (shapes, dtypes)
    #: what Kineto records of a collective (``record_param_comms`` and NCCL kernels of a saved
    #: trace): event position -> (collective name, in elements, out elements, dtype, group size)
    collectives: dict[int, Any] = field(default_factory=dict)
    #: allocator records (``[memory]`` events, a :class:`~.memory.MemoryRecords`) read with a saved
    #: trace file; None when it has none (live captures hand them to the memory stage directly)
    memory: Any = None

    def __post_init__(self) -> None:
        if self.category is None:
            object.__setattr__(self, "category", np.zeros(len(self.kind), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.kind.size)

    def __iter__(self) -> Iterator[Event]:
        for i in range(len(self)):
            yield self.event(i)

    def event(self, i: int) -> Event:
        return Event(
            EventKind(int(self.kind[i])),
            self.names[int(self.name_id[i])],
            int(self.start_ns[i]),
            int(self.duration_ns[i]),
            int(self.thread[i]),
            int(self.correlation_id[i]),
            int(self.linked_correlation_id[i]),
            self.categories[int(self.category[i])],  # type: ignore[index]
        )

    @property
    def start_time_ns(self) -> int:
        """Wall-clock start of the earliest event (0 for an empty trace)."""
        return int(self.start_ns.min()) if len(self) else 0

    @property
    def end_time_ns(self) -> int:
        """Wall-clock end of the latest event (0 for an empty trace)."""
        return int((self.start_ns + self.duration_ns).max()) if len(self) else 0

    def count(self, kind: EventKind) -> int:
        return int((self.kind == int(kind)).sum())

    def category_mask(self, *names: str) -> np.ndarray:
        """Events whose Kineto category is one of ``names``."""
        ids = [i for i, c in enumerate(self.categories) if c in names]
        if not ids:
            return np.zeros(len(self), dtype=bool)
        return np.isin(self.category, ids)  # type: ignore[arg-type]

    def name_mask(self, predicate: "Callable[[str], bool]") -> np.ndarray:
        """Events whose name satisfies ``predicate`` (evaluated once per distinct name)."""
        table = np.fromiter((bool(predicate(n)) for n in self.names), dtype=bool, count=len(self.names))
        if not len(table):
            return np.zeros(len(self), dtype=bool)
        mask: np.ndarray = table[self.name_id]
        return mask

    def select(self, mask: np.ndarray) -> "Trace":
        """A new trace holding the events where ``mask`` is true (string tables shared)."""
        positions = np.flatnonzero(mask)
        remap = {int(p): i for i, p in enumerate(positions.tolist())} if (self.inputs or self.collectives) else {}
        return Trace(
            names=self.names,
            kind=self.kind[positions],
            name_id=self.name_id[positions],
            start_ns=self.start_ns[positions],
            duration_ns=self.duration_ns[positions],
            thread=self.thread[positions],
            correlation_id=self.correlation_id[positions],
            linked_correlation_id=self.linked_correlation_id[positions],
            device=self.device,
            base_time_ns=self.base_time_ns,
            metadata=dict(self.metadata),
            category=self.category[positions],  # type: ignore[index]
            categories=self.categories,
            inputs={remap[p]: v for p, v in self.inputs.items() if p in remap},
            collectives={remap[p]: v for p, v in self.collectives.items() if p in remap},
        )

    @classmethod
    def from_columns(
        cls,
        *,
        names: list[str],
        kind: list[int],
        start_ns: list[int],
        duration_ns: list[int],
        thread: list[int],
        correlation_id: list[int] | None = None,
        linked_correlation_id: list[int] | None = None,
        device: str = "cpu",
        base_time_ns: int = 0,
        metadata: dict[str, Any] | None = None,
        categories: list[str] | None = None,
        inputs: dict[int, Any] | None = None,
        memory: Any = None,
        collectives: dict[int, Any] | None = None,
    ) -> "Trace":
        """Build a trace from per-event Python lists (``names`` and ``categories`` per event,
        interned here)."""
        table: dict[str, int] = {}
        name_id = [table.setdefault(n, len(table)) for n in names]
        count = len(name_id)
        cat_table: dict[str, int] = {"": 0}
        cat_id = [cat_table.setdefault(c or "", len(cat_table)) for c in categories] if categories is not None else None
        return cls(
            names=tuple(table),
            kind=_int64(kind),
            name_id=_int64(name_id),
            start_ns=_int64(start_ns),
            duration_ns=_int64(duration_ns),
            thread=_int64(thread),
            correlation_id=_int64(correlation_id) if correlation_id is not None else np.zeros(count, dtype=np.int64),
            linked_correlation_id=(
                _int64(linked_correlation_id) if linked_correlation_id is not None else np.zeros(count, dtype=np.int64)
            ),
            device=device,
            base_time_ns=base_time_ns,
            metadata=dict(metadata or {}),
            category=_int64(cat_id) if cat_id is not None else None,
            categories=tuple(cat_table),
            inputs=dict(inputs or {}),
            memory=memory,
            collectives=dict(collectives or {}),
        )

    @classmethod
    def concat(cls, traces: "list[Trace]", *, device: str | None = None, metadata: dict[str, Any] | None = None) -> "Trace":
        """One trace holding the events of several (e.g. the segments of a capture), string
        tables merged. ``base_time_ns`` is the earliest one's."""
        if not traces:
            raise ConfigurationError("Trace.concat needs at least one trace")
        names: dict[str, int] = {}
        cats: dict[str, int] = {"": 0}
        cols: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
        name_ids, cat_ids = [], []
        inputs: dict[int, Any] = {}
        collectives: dict[int, Any] = {}
        offset = 0
        for tr in traces:
            name_map = np.array([names.setdefault(n, len(names)) for n in tr.names] or [0], dtype=np.int64)
            cat_map = np.array([cats.setdefault(c, len(cats)) for c in tr.categories] or [0], dtype=np.int64)
            name_ids.append(name_map[tr.name_id])
            cat_ids.append(cat_map[tr.category])
            for k in _COLUMNS:
                cols[k].append(getattr(tr, k))
            inputs.update({offset + p: v for p, v in tr.inputs.items()})
            collectives.update({offset + p: v for p, v in tr.collectives.items()})
            offset += len(tr)
        return cls(
            names=tuple(names),
            name_id=np.concatenate(name_ids),
            category=np.concatenate(cat_ids),
            categories=tuple(cats),
            device=device or traces[0].device,
            base_time_ns=min(t.base_time_ns for t in traces),
            metadata=dict(metadata if metadata is not None else traces[0].metadata),
            inputs=inputs,
            collectives=collectives,
            **{k: np.concatenate(v) for k, v in cols.items()},
        )


def compiled_graph_calls_as_ops(names: tuple[str, ...], name_id: np.ndarray, kind: np.ndarray, device: str) -> None:
    """On a CPU-only trace, make every call of a torch.compile graph an op (``kind``, in place).

    The call runs Inductor's C++ kernels on the calling thread: its self time is the model's
    work, which a CPU profile counts as device time. torch 2.13 writes it as a region
    (``user_annotation``) when ``record_shapes=True`` and as an op otherwise (see
    :data:`.kinds.COMPILED_GRAPH_CALL`); both trace readers call this, so a profile counts the
    same time with or without shapes, live or reloaded. Kernels Inductor's kernel profiling
    names (``graph_0_cpp_fused_...``) are ops already, nested inside the call.
    """
    if device != "cpu":  # on an accelerator the graph's kernels are device events of their own
        return
    calls = compiled_graph_call_ids(names)
    if calls:
        kind[np.isin(name_id, calls) & (kind == int(EventKind.REGION))] = int(EventKind.OP)


_COLUMNS = ("kind", "start_ns", "duration_ns", "thread", "correlation_id", "linked_correlation_id")


def _int64(values: list[int]) -> np.ndarray:
    # array('q') packs a list of ints ~3x faster than np.array(list); frombuffer shares it.
    packed = array("q", values)
    if not packed:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(packed, dtype=np.int64)
