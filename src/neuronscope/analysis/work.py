"""Work per op: the FLOPs and bytes of the calls of one op (a summary row), :class:`OpWork`.

What one call does is :mod:`.work_models`' (:func:`op_cost`, the models and their research);
its names are re-exported here. Only one op of a chain that repeats the same work carries it:
the outermost modelled one (:mod:`.work_by_op`), with the device time of everything under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..trace.op_families import CONCRETE_OPS, MODELLED_OPS
from .work_models import DTYPE_BYTES, OpCost, dtype_class, is_modelled, op_cost

__all__ = [
    "CONCRETE_OPS",
    "DTYPE_BYTES",
    "MODELLED_OPS",
    "OpCost",
    "OpWork",
    "call_size_class",
    "dtype_class",
    "is_modelled",
    "op_cost",
]


@dataclass(frozen=True)
class OpWork:
    """The work of the calls of one op (a summary row), and the calls it could not count.

    ``calls`` are the calls whose work is counted in this row; ``time_us`` is their device time
    (inclusive: the kernels of the ops they called). ``flops_by_roof`` splits the FLOPs by the
    roof they are measured against (``matrix/bf16``...). ``bytes_by_call_size`` splits the bytes
    by what one call moves (its working set, which picks a CPU's cache level): ``{k: (bytes of the
    calls that move 2^k to 2^(k+1) bytes each, the most one of them moves)}``. ``not_counted``
    calls of this op carry no work here; ``reason`` says why (the most common reason when there
    are several).
    """

    calls: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    time_us: float = 0.0
    flops_by_roof: dict[str, float] = field(default_factory=dict)
    bytes_by_roof: dict[str, float] = field(default_factory=dict)
    family: str = ""
    not_counted: int = 0
    reason: str = ""
    bytes_by_call_size: dict[int, tuple[float, float]] = field(default_factory=dict)

    def combine(self, other: "OpWork") -> "OpWork":
        by_roof = dict(self.flops_by_roof)
        for k, v in other.flops_by_roof.items():
            by_roof[k] = by_roof.get(k, 0.0) + v
        bytes_by = dict(self.bytes_by_roof)
        for k, v in other.bytes_by_roof.items():
            bytes_by[k] = bytes_by.get(k, 0.0) + v
        by_size = dict(self.bytes_by_call_size)
        for size, (nbytes, largest) in other.bytes_by_call_size.items():
            had, had_largest = by_size.get(size, (0.0, 0.0))
            by_size[size] = (had + nbytes, max(had_largest, largest))
        # the reason of the side that has more calls it could not count
        reason = self.reason if self.not_counted >= other.not_counted else other.reason
        return OpWork(
            calls=self.calls + other.calls,
            flops=self.flops + other.flops,
            bytes=self.bytes + other.bytes,
            time_us=self.time_us + other.time_us,
            flops_by_roof=by_roof,
            bytes_by_roof=bytes_by,
            family=self.family or other.family,
            not_counted=self.not_counted + other.not_counted,
            reason=reason or self.reason or other.reason,
            bytes_by_call_size=by_size,
        )

    def call_sizes(self) -> list[tuple[float, float]]:
        """``(bytes one call moves, bytes of such calls)``, the largest call of each size class
        standing for it; work saved before the classes existed: its mean call."""
        sizes = [(largest, nbytes) for nbytes, largest in self.bytes_by_call_size.values()]
        rest = self.bytes - sum(nbytes for _, nbytes in sizes)  # calls folded in from such a save
        if rest > 1e-9 * max(self.bytes, 1.0) and self.calls > 0:
            sizes.append((self.bytes / self.calls, rest))
        return sizes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpWork":
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "bytes_by_call_size" in data:  # JSON: string keys, lists
            data["bytes_by_call_size"] = {int(k): (float(v[0]), float(v[1])) for k, v in data["bytes_by_call_size"].items()}
        return cls(**data)


def call_size_class(nbytes: float) -> int:
    """The size class of a call that moves ``nbytes``: k for 2^k <= nbytes < 2^(k+1)."""
    return math.frexp(nbytes)[1] - 1 if nbytes >= 1 else 0
