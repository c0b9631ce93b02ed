"""The trace model: every profiler event of one capture, as immutable columns.

Why columns and not one object per event: a 20,000-step profile holds ~420,000 events.
One Python object each costs ~0.3 s and ~100 MB before any analysis starts; int64
tensors cost 8 bytes a value and let the analysis run vectorised (see ``analysis``).

The model is built from live Kineto results (:mod:`.kineto`) or from a saved Kineto
``trace.json(.gz)`` (:mod:`.chrome`); everything downstream reads only this model, so it
works the same online and offline.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

__all__ = ["Event", "EventKind", "Trace"]


class EventKind(enum.IntEnum):
    """What an event is, independent of the device that produced it."""

    OP = 0  #: a framework op on a CPU thread (``aten::mul``), also runtime API calls
    REGION = 1  #: a ``record_function`` / ``neuronscope.region`` annotation
    DEVICE = 2  #: work executed on the accelerator (kernel, memcpy, NeuronCore execution)
    DEVICE_ANNOTATION = 3  #: a device-side marker (e.g. Neuron ``nc_exec_running``); not device time
    RUNTIME = 4  #: device runtime/driver call on a CPU thread (``cudaLaunchKernel``, ``nrta_execute_schedule``)
    OTHER = 5  #: anything else (instant events, memory records, python functions)


# Kineto activity type names (``_KinetoEvent.activity_type()`` / chrome-trace ``cat``) -> kind.
ACTIVITY_KINDS: dict[str, EventKind] = {
    "cpu_op": EventKind.OP,
    "operator": EventKind.OP,
    "user_annotation": EventKind.REGION,
    "kernel": EventKind.DEVICE,
    "gpu_memcpy": EventKind.DEVICE,
    "gpu_memset": EventKind.DEVICE,
    "concurrent_kernel": EventKind.DEVICE,
    "gpu_user_annotation": EventKind.DEVICE_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "privateuse1_driver": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
}

# Names torch's own post-processing drops (torch.autograd.profiler_util._filter_name);
# dropping the same ones keeps our call counts equal to key_averages().
FILTERED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


class Event(NamedTuple):
    """One event, materialised on demand from the columns (for inspection and tests)."""

    kind: EventKind
    name: str
    start_ns: int  #: Unix-epoch nanoseconds
    duration_ns: int
    thread: int  #: CPU thread, or device stream/lane for device events
    correlation_id: int
    linked_correlation_id: int  #: for device/runtime events: the op that launched them


@dataclass(frozen=True, eq=False)
class Trace:
    """All events of one capture. Columns are aligned int64 tensors; ``names`` is the string table.

    ``base_time_ns`` is the Unix-epoch time of the trace's relative zero (Kineto's
    ``baseTimeNanoseconds``); ``start_ns`` values are already absolute.
    """

    names: tuple[str, ...]
    kind: torch.Tensor
    name_id: torch.Tensor
    start_ns: torch.Tensor
    duration_ns: torch.Tensor
    thread: torch.Tensor
    correlation_id: torch.Tensor
    linked_correlation_id: torch.Tensor
    device: str = "cpu"  #: "cpu" | "cuda" | "neuron": which device the device columns describe
    base_time_ns: int = 0
    metadata: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.kind.numel())

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
        metadata: dict | None = None,
    ) -> "Trace":
        """Build a trace from per-event Python lists (``names`` per event, interned here)."""
        table: dict[str, int] = {}
        name_id = [table.setdefault(n, len(table)) for n in names]
        count = len(name_id)
        return cls(
            names=tuple(table),
            kind=_int64(kind),
            name_id=_int64(name_id),
            start_ns=_int64(start_ns),
            duration_ns=_int64(duration_ns),
            thread=_int64(thread),
            correlation_id=_int64(correlation_id) if correlation_id is not None else torch.zeros(count, dtype=torch.int64),
            linked_correlation_id=(
                _int64(linked_correlation_id)
                if linked_correlation_id is not None
                else torch.zeros(count, dtype=torch.int64)
            ),
            device=device,
            base_time_ns=base_time_ns,
            metadata=dict(metadata or {}),
        )


def _int64(values: list[int]) -> torch.Tensor:
    # array('q') packs a list of ints ~3x faster than torch.tensor(list); frombuffer shares it.
    packed = array("q", values)
    if not packed:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(packed, dtype=torch.int64)
