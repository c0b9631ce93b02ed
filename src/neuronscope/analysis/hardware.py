"""What the analysis needs to know about the machine and the profiler, in one place.

Figures measured on the CI machine class (2-core AMD EPYC VM, torch 2.13.0 CPU) are named
where they are used; ``bench/bench_advice.py`` prints the claims built on them next to the
savings measured by applying each fix.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .work import DTYPE_BYTES as _WORK_DTYPE_BYTES

#: What torch.profiler adds to the host time of each event it records (CPU activity, no
#: stacks): 136-421 ns per event in a warm profile, ~700 ns in a process's first one
#: (/tmp-style microbenchmarks: a loop of small ops, profiled vs not, interleaved; a row loop
#: ``[x[i] * 2 for i in range(512)]``, 7 events a row: 297 ns, thread time, issue 37). Claims
#: built from host time in a profiled run subtract it, so that they are what the fix saves
#: unprofiled.
PROFILER_NS_PER_EVENT = 300

#: An eager op's dispatch on a CPU, at most: what fusing two ops into one saves besides the
#: memory traffic (torch 2.13: 2-5 us per op here; the smallest op of a chain tells it better).
CPU_DISPATCH_NS_MAX = 5_000

#: What a ``torch.compile``'d function's call costs on a CPU beyond one op's dispatch: its
#: guards and wrapper (torch 2.13, one thread: ``x + 1`` on 8 floats, 14.6 us compiled against
#: 3.5 eager, medians of 2,000). A fusion claim whose fix is torch.compile pays it once a call.
CPU_COMPILED_CALL_NS = 11_000

#: bytes per element of the dtype names torch's profiler records (``Input type``): the work
#: models' table (an unknown name is 4 bytes here, where a guess only sizes a fusion claim)
DTYPE_BYTES = _WORK_DTYPE_BYTES


@functools.cache
def cpu_last_level_cache_bytes() -> int:
    """The largest CPU cache of this machine (Linux sysfs), 32 MiB where it cannot be read.

    A trace analysed on another machine is judged by this one's cache: the traces carry no
    cache sizes."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            best = max(best, int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return best or 32 << 20


def tensor_bytes(shape: list, dtype: str) -> int:
    """Bytes of one recorded input (0 for a scalar or a non-tensor argument)."""
    if not isinstance(shape, list) or not shape:
        return 0
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return 0
        n *= d
    return n * DTYPE_BYTES.get(dtype, 4)
