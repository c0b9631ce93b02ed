"""This CPU's roofs, measured once and cached: bandwidth per cache level and memory, matmul FLOP/s.

A CPU has no datasheet figure a profile can trust (turbo, SMT, a VM's share of the host), so
the roofs are measured with the threads torch uses. Memory: streaming copies and multiplies of
128 MiB tensors (4x a large last-level cache; bytes read + written, the STREAM convention the
work models count in). Each cache level (sizes from ``/sys/devices/system/cpu/cpu0/cache``; a
cache-aware roofline, as Intel Advisor's): a copy and a negation over two tensors that fill half
of what the level holds for torch's threads, less what the same call costs on one element (the
per-call cost is not bandwidth), timed in short blocks, the levels taking turns, the fastest
block of each. Compute: float32 and
bfloat16 matmuls, best of a few runs. It takes about 1-3 s and is cached in
``$NEURONSCOPE_CACHE_DIR`` (default ``~/.cache/neuronscope``) per host, torch version and thread
count. Elementwise work is measured against the matmul's FLOP/s (the same SIMD units at their
best) but is memory-bound at any size worth fusing.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ... import _env
from ..._system import available_memory
from ...analysis.roofs import DeviceLimits

__all__ = ["cache_path", "cache_topology", "cpu_limits", "measure_cpu_limits"]

_lock = threading.Lock()
_UNDER_LOAD = "measured under load"
#: CPUs' worth of other processes' work during the measurement above which it is not trusted
_MAX_OTHERS_CPUS = 0.25
_cached: tuple[Path, DeviceLimits] | None = None  #: this process's roofs, and the cache file they belong to
_STREAM_BYTES = 128 << 20
#: where Linux describes CPU 0's caches (index0, index1...: level, type, size, shared_cpu_list)
_SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
#: a cache level's timing: blocks of calls lasting about this long, this many blocks a round
#: for each arm, this many rounds; the fastest block counts
_BLOCK_S = 1e-4
_BLOCKS_PER_ROUND = 8
_ROUNDS = 7
#: a level whose bytes take less than this share of a call's time is not measured: its figure
#: would be the difference of two per-call costs within their timer's resolution
_MIN_DATA_SHARE = 0.08
#: torch runs an elementwise op on one thread below this many elements (at::internal::GRAIN_SIZE)
_SPLIT_ELEMENTS = 32768


def cache_path() -> Path:
    base = _env.CACHE_DIR.get(lenient=True)
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neuronscope"
    host = socket.gethostname().replace("/", "_") or "host"
    # v2: with the cache levels (a file without them is measured again)
    return Path(base) / f"cpu-limits-v2-{host}-torch{torch.__version__}-t{torch.get_num_threads()}.json"


def cpu_limits(*, refresh: bool = False) -> DeviceLimits:
    """This machine's CPU roofs: from the cache, else measured now (and cached)."""
    global _cached
    with _lock:
        path = cache_path()  # host, torch version and thread count: a change means other roofs
        if not refresh:
            if _cached is not None and _cached[0] == path:
                return _cached[1]  # (measured under load too: this process keeps it, the next measures again)
            try:
                _cached = (path, DeviceLimits.from_dict(json.loads(path.read_text())))
                return _cached[1]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        limits = measure_cpu_limits(source_name=path.name)
        _cached = (path, limits)
        if limits.source.startswith(_UNDER_LOAD):
            return limits  # not written to the cache: the next process measures again
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(limits.to_dict(), indent=1))
            tmp.replace(path)
        except OSError:
            pass  # an unwritable cache: measured again in the next process
        return limits


def _best(fn: Any, runs: int, budget_s: float) -> float:
    fn()  # warm: first touch of the pages, the kernel's own set-up
    best = float("inf")
    deadline = time.perf_counter() + budget_s
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if time.perf_counter() > deadline:
            break
    return best


def _stream_bandwidth(n: int) -> float:
    """Bytes read + written per second by a copy and a multiply of ``n`` float32s, the best."""
    src = torch.ones(n)
    dst = torch.empty(n)
    copy_s = _best(lambda: dst.copy_(src), 5, 1.0)
    mul_s = _best(lambda: torch.mul(src, 2.0, out=dst), 5, 1.0)
    return 2 * n * 4 / min(copy_s, mul_s)


def cache_topology(root: Path = _SYSFS_CACHES) -> list[tuple[str, int, int]]:
    """``(name, bytes of one cache, CPUs sharing it)`` of CPU 0's data and unified caches, fastest
    first (``[("L1", 32768, 1), ("L2", 1048576, 1), ("L3", 33554432, 16)]``); ``[]`` where sysfs
    does not say (not Linux, a container that hides it): then the memory roof stands alone."""
    found: dict[int, tuple[str, int, int]] = {}
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return []
    for entry in entries:
        try:
            if (entry / "type").read_text().strip() == "Instruction":
                continue
            level = int((entry / "level").read_text())
            size = _parse_size((entry / "size").read_text())
        except (OSError, ValueError):
            continue
        try:
            shared = _count_cpus((entry / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            shared = 1
        if size > 0:
            found.setdefault(level, (f"L{level}", size, max(shared, 1)))
    return [found[level] for level in sorted(found)]


def _parse_size(text: str) -> int:
    """sysfs' cache size: ``32K``, ``1024K``, ``32M``, or bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMGB") or "0") * scale


def _count_cpus(text: str) -> int:
    """``0-3,8`` -> 5."""
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if lo:
            count += int(hi or lo) - int(lo) + 1
    return count


def _cache_levels(threads: int, avail: int | None) -> tuple[tuple[str, float, float], ...]:
    """``(name, bytes it holds for an op, bytes/s)`` per cache level. torch splits an op over its
    threads from 32,768 elements on (``at::internal::GRAIN_SIZE``): a level whose working set is
    that big holds one cache per thread, as many as there are (the scheduler spreads the threads
    over idle cores); below it the op runs on one thread, in one core's cache."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    sized = []
    for name, size, shared in cache_topology():
        capacity = size * max(1, min(threads, cpus // shared))
        if capacity // 16 < _SPLIT_ELEMENTS:  # its measuring op (half of it, two float32 tensors) is not split
            capacity = size
        if avail is None or capacity < avail // 4:
            sized.append((name, capacity))
    bandwidths = _level_bandwidths([capacity for _, capacity in sized])
    return tuple((name, float(capacity), bw) for (name, capacity), bw in zip(sized, bandwidths) if bw is not None)


def _level_bandwidths(capacities: list[int]) -> list[float | None]:
    """Bytes read + written per second by a copy and a negation of two float32 tensors that fill
    half of each capacity, less the same calls' cost on one element; None for a level whose bytes
    are lost in that cost. Calls are timed in short blocks (~0.1 ms: a timer's resolution is
    ~1 % of one), the fastest block kept: a block slowed by another process is one of many. The
    arms take turns, round after round, so a burst of other work slows one round of each."""
    arms: list[tuple[int, Callable[[], Any]]] = []  # (bytes a call moves, the call); 0: the per-call cost
    for n in [1] + [max(c // 16, 1) for c in capacities]:  # two float32 tensors: 8 bytes an element
        src, dst = torch.ones(n), torch.empty(n)
        nbytes = 0 if n == 1 else 8 * n
        arms.append((nbytes, partial(dst.copy_, src)))
        arms.append((nbytes, partial(torch.neg, src, out=dst)))
    block = [_calls_per_block(fn) for _, fn in arms]
    best = [float("inf")] * len(arms)
    clock = time.perf_counter
    for _ in range(_ROUNDS):
        for i, (_, fn) in enumerate(arms):
            for _ in range(_BLOCKS_PER_ROUND):
                t = clock()
                for _ in range(block[i]):
                    fn()
                best[i] = min(best[i], (clock() - t) / block[i])
    out: list[float | None] = []
    for level in range(len(capacities)):
        rates = []
        for kernel in (0, 1):  # copy, negation: each less its own per-call cost
            i = 2 + 2 * level + kernel
            data_s = best[i] - best[kernel]
            if data_s >= _MIN_DATA_SHARE * best[i]:
                rates.append(arms[i][0] / data_s)
        out.append(max(rates) if rates else None)
    return out


def _calls_per_block(fn: Callable[[], Any]) -> int:
    fn()  # warm: the first touch of the pages
    t = time.perf_counter()
    fn()
    return max(1, min(round(_BLOCK_S / max(time.perf_counter() - t, 1e-7)), 1000))


def _matmul_peaks(runs: int = 4, budget_s: float = 0.8) -> dict[str, float]:
    """FLOP/s of a float32 and a bfloat16 matmul: each sized to take ~50 ms, then the two taking
    turns, the best of ``runs`` each. Taking turns keeps a burst of other work from slowing one
    dtype only: their ratio says whether bf16 has matrix units (``has_bf16_matrix_units``)."""
    sized = {key: _matmul_operands(dtype) for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"))}
    best = dict.fromkeys(sized, float("inf"))
    deadline = time.perf_counter() + budget_s
    for _ in range(runs):
        for key, (a, b) in sized.items():
            t = time.perf_counter()
            torch.mm(a, b)
            best[key] = min(best[key], time.perf_counter() - t)
        if time.perf_counter() > deadline:
            break
    return {f"matrix/{key}": 2.0 * a.shape[0] ** 3 / best[key] for key, (a, _) in sized.items()}


def _matmul_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Square operands, doubled in size until a matmul takes 50 ms (a CPU without native bfloat16
    is 100x slower at it: a fixed size would take seconds)."""
    m = 256
    while True:
        a = torch.randn(m, m).to(dtype)
        b = torch.randn(m, m).to(dtype)
        t = time.perf_counter()
        torch.mm(a, b)
        if time.perf_counter() - t > 0.05 or m >= 2048:
            return a, b
        m *= 2


def _busy_seconds() -> float | None:
    """CPU seconds all processes have used (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def measure_cpu_limits(*, source_name: str = "") -> DeviceLimits:
    """Measure now (1-3 s): the best of a few streaming passes per cache level and over main
    memory, and matmuls. When other processes used more than a quarter of a CPU meanwhile, the
    figures are kept for this process only."""
    busy0, own0, wall0 = _busy_seconds(), _own_seconds(), time.monotonic()
    threads = torch.get_num_threads()
    avail = available_memory()
    with torch.no_grad():
        levels = _cache_levels(threads, avail)
        size = max([_STREAM_BYTES] + [int(4 * capacity) for _, capacity, _ in levels])  # 4x the caches
        if avail is not None and avail < 8 * size:  # three tensors and room to spare
            size = max(avail // 16, 16 << 20)
        bandwidth = _stream_bandwidth(size // 4)
        peaks = _matmul_peaks()
        peaks["vector/fp32"] = peaks["matrix/fp32"]
    busy1, own1, wall = _busy_seconds(), _own_seconds(), max(time.monotonic() - wall0, 1e-3)
    others = (busy1 - busy0 - (own1 - own0)) / wall if busy0 is not None and busy1 is not None else 0.0
    when = f"{time.strftime('%Y-%m-%d')} with torch {torch.__version__}, {threads} threads"
    if others > _MAX_OTHERS_CPUS:
        source = f"{_UNDER_LOAD} (other processes used {others:.1f} CPUs) {when}; not cached: measured again by the next process"
    else:
        source = f"measured {when}; cached {source_name}"
    return DeviceLimits(
        name=f"CPU of {socket.gethostname() or 'this host'}",
        memory_bandwidth=bandwidth,
        peak_flops=peaks,
        source=source,
        scope=f"{threads} threads",
        cache_levels=levels,
    )
