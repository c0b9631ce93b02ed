"""Facts about the machine, read from the OS (no neuronscope imports: any layer may use it)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

__all__ = ["add_contention", "available_memory", "core_wait_ns", "cpu_contention", "cpu_sample", "preemptions"]


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, bytes (None where there is none: not Linux)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# -- CPU contention: did the profiled thread have a CPU while it ran? ----------------------------
def read_schedstat(native_tid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one) of one thread of this process (Linux
    ``/proc/self/task/<tid>/schedstat``; None where there is none)."""
    try:
        with open(f"/proc/self/task/{native_tid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def pool_threads_schedstat() -> dict[int, tuple[int, int]]:
    """:func:`read_schedstat` of each thread of this process that Python did not start: the
    intra-op pool's (OpenMP), which record no events of their own (Linux; {} elsewhere)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    python = {t.native_id for t in threading.enumerate()}
    out: dict[int, tuple[int, int]] = {}
    for name in tids:
        tid = int(name)
        if tid not in python and (stat := read_schedstat(tid)) is not None:
            out[tid] = stat
    return out


class _ThreadSchedstat:
    """One thread's ``/proc/self/task/<tid>/schedstat``, kept open: re-read in ~2 us where
    opening it costs ~12 us (measured), for a read at each suspension of a timed coroutine."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        self.fd = -1
        try:
            self.fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            pass

    def wait_ns(self) -> int:
        """Nanoseconds the thread was runnable but waited for a core; 0 where unreadable."""
        try:
            return int(os.pread(self.fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def __del__(self) -> None:  # the thread ended (its threading.local went) or a fork reset it
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


_schedstat = threading.local()


def core_wait_ns() -> int:
    """This thread's run-queue wait so far (ns; Linux schedstat, 0 elsewhere)."""
    try:
        stat: _ThreadSchedstat = _schedstat.stat
    except AttributeError:
        stat = _schedstat.stat = _ThreadSchedstat()
    return stat.wait_ns()


def _forget_schedstat() -> None:
    # a forked child's threads are not its parent's: each opens its own file on its first read
    global _schedstat
    _schedstat = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_schedstat)


def preemptions() -> int:
    """How many times a thread of this process lost its core while it could run (involuntary
    context switches, ``getrusage(RUSAGE_SELF)``; ~0.8 us). A call during which this changed
    waited for a core -- its own thread, or an intra-op thread its thread then spun waiting for
    at a barrier, burning CPU time -- so neither its wall time nor its CPU time is its own.
    0 where the count is not kept."""
    return _resource.getrusage(_resource.RUSAGE_SELF).ru_nivcsw if _resource is not None else 0


try:
    import resource as _resource
except ImportError:  # not on this platform: calls are never taken as preempted
    _resource = None  # type: ignore[assignment]


def _machine_busy_ns() -> int | None:
    """CPU time every process has used since boot (``/proc/stat``), ns; None elsewhere."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def cpu_sample(native_tid: int) -> tuple[int, tuple[int, int] | None, int | None, int]:
    """A reading to compare with a later one (:func:`cpu_contention`): (monotonic ns, the thread's
    schedstat, the machine's busy ns, this process's CPU ns). Three small reads, ~20 us."""
    t = os.times()
    return time.monotonic_ns(), read_schedstat(native_tid), _machine_busy_ns(), int((t.user + t.system) * 1e9)


def cpu_contention(start: Any, end: Any) -> dict[str, Any] | None:
    """What happened between two :func:`cpu_sample` readings of the same thread: its time on a
    CPU and waiting for one, and the other processes' CPU time (``CpuContention``'s fields)."""
    if start is None or end is None or start[1] is None or end[1] is None:
        return None
    wall = end[0] - start[0]
    if wall <= 0:
        return None
    others = None
    if start[2] is not None and end[2] is not None:
        # the machine's busy time less ours; /proc/stat counts in clock ticks: never below zero
        others = max((end[2] - start[2]) - (end[3] - start[3]), 0) / 1e3
    return {
        "wall_us": wall / 1e3,
        "run_us": (end[1][0] - start[1][0]) / 1e3,
        "wait_us": (end[1][1] - start[1][1]) / 1e3,
        "others_cpu_us": others,
        "cpus": os.cpu_count() or 1,
    }


def add_contention(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two readings' figures together (a window recorded in several sessions)."""
    if a is None or b is None:
        return a or b
    others = None if a["others_cpu_us"] is None or b["others_cpu_us"] is None else a["others_cpu_us"] + b["others_cpu_us"]
    return {**a, **{k: a[k] + b[k] for k in ("wall_us", "run_us", "wait_us")}, "others_cpu_us": others}
