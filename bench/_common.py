"""Shared helpers for the benchmarks: the workload, timers and an RSS-peak sampler."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def workload(steps: int) -> None:
    x, w = torch.randn(8, 64), torch.randn(64)
    with record_function("forward"):
        for _ in range(steps):
            rmsnorm_naive(x, w)


def started_profile(**kwargs: Any) -> profile:
    prof = profile(activities=[ProfilerActivity.CPU], **kwargs)
    prof.start()
    return prof


class PeakRss:
    """Samples RSS every 2 ms in a thread; ``growth`` = peak minus the RSS at entry."""

    def __enter__(self) -> "PeakRss":
        gc.collect()
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc: Any) -> None:
        self.peak = max(self.peak, rss_bytes())
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB"
