"""This CPU's roofs, measured once and cached: memory bandwidth and matmul FLOP/s.

A CPU has no datasheet figure a profile can trust (turbo, SMT, a VM's share of the host), so
the roofs are measured with the threads torch uses: streaming copies and multiplies of 128 MiB
tensors (4x a large last-level cache; bytes read + written, the STREAM convention the work
models count in) and float32 / bfloat16 matmuls, best of a few runs. It takes about 1-3 s and
is cached in ``$NEURONSCOPE_CACHE_DIR`` (default ``~/.cache/neuronscope``) per host, torch
version and thread count. Elementwise work is measured against the matmul's FLOP/s (the same
SIMD units at their best) but is memory-bound at any size worth fusing.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ... import _env
from ..._system import available_memory
from ...analysis.roofs import DeviceLimits

__all__ = ["cache_path", "cpu_limits", "measure_cpu_limits"]

_lock = threading.Lock()
_UNDER_LOAD = "measured under load"
#: CPUs' worth of other processes' work during the measurement above which it is not trusted
_MAX_OTHERS_CPUS = 0.25
_cached: tuple[Path, DeviceLimits] | None = None  #: this process's roofs, and the cache file they belong to
_STREAM_BYTES = 128 << 20


def cache_path() -> Path:
    base = _env.CACHE_DIR.get(lenient=True)
    if base is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neuronscope"
    host = socket.gethostname().replace("/", "_") or "host"
    return Path(base) / f"cpu-limits-{host}-torch{torch.__version__}-t{torch.get_num_threads()}.json"


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


def _matmul_flops(dtype: torch.dtype) -> float:
    """Square matmuls, doubled in size until one takes 50 ms (a CPU without native bfloat16 is
    100x slower at it: a fixed size would take seconds), then the best of three."""
    m = 256
    while True:
        a = torch.randn(m, m).to(dtype)
        b = torch.randn(m, m).to(dtype)
        t = time.perf_counter()
        torch.mm(a, b)
        if time.perf_counter() - t > 0.05 or m >= 2048:
            break
        m *= 2
    return 2.0 * m**3 / _best(lambda: torch.mm(a, b), 3, 0.5)


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
    """Measure now (1-3 s): the best of a few streaming passes and matmuls. When other processes
    used more than a quarter of a CPU meanwhile, the figures are kept for this process only."""
    busy0, own0, wall0 = _busy_seconds(), _own_seconds(), time.monotonic()
    threads = torch.get_num_threads()
    size = _STREAM_BYTES
    avail = available_memory()
    if avail is not None and avail < 8 * size:  # three tensors and room to spare
        size = max(avail // 16, 16 << 20)
    n = size // 4
    with torch.no_grad():
        bandwidth = _stream_bandwidth(n)
        peaks: dict[str, float] = {}
        for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            peaks[f"matrix/{key}"] = _matmul_flops(dtype)
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
    )
