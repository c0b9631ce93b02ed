"""Facts about the machine, read from the OS (no neuronscope imports: any layer may use it)."""

from __future__ import annotations

import os
import sys
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
class _ProcFile:
    """A ``/proc`` file kept open and re-read from its start (``pread``): ~2 us a read where
    open, read and close cost ~13 us -- and several times that on a busy core, on the profiled
    thread at each capture's start and end. Opened at the first read; a forked child opens its
    own (``/proc/self`` is resolved when the file is opened)."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def read(self, size: int = 256) -> bytes:
        """The file's first ``size`` bytes; OSError where it cannot be read (its thread ended)."""
        if self.fd < 0:
            fd = os.open(self.path, os.O_RDONLY)
            if self.fd < 0:
                self.fd = fd
            else:  # another thread opened it meanwhile
                os.close(fd)
        return os.pread(self.fd, size, 0)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def _parse_schedstat(data: bytes) -> tuple[int, int]:
    fields = data.split()
    return int(fields[0]), int(fields[1])


def read_schedstat(native_tid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one) of one thread of this process (Linux
    ``/proc/self/task/<tid>/schedstat``; None where there is none)."""
    if native_tid == threading.get_native_id():
        return _own_schedstat().read()  # the file kept open
    try:
        with open(f"/proc/self/task/{native_tid}/schedstat", "rb") as f:
            return _parse_schedstat(f.read())
    except (OSError, ValueError, IndexError):
        return None


#: the schedstat files of the threads Python did not start, kept open while the thread lives
_pool_files: dict[int, _ProcFile] = {}
_pool_lock = threading.Lock()


def pool_threads_schedstat() -> dict[int, tuple[int, int]]:
    """:func:`read_schedstat` of each thread of this process that Python did not start: the
    intra-op pool's (OpenMP), which record no events of their own -- and any other library's
    (an exporter's gRPC threads): their count grows the cost of this read, so their files are
    kept open (Linux; {} elsewhere)."""
    try:
        tids = {int(name) for name in os.listdir("/proc/self/task")}
    except OSError:
        return {}
    python = {t.native_id for t in threading.enumerate()}
    out: dict[int, tuple[int, int]] = {}
    with _pool_lock:
        for tid in [t for t in _pool_files if t not in tids or t in python]:
            _pool_files.pop(tid).close()  # ended (its id may be reused by a new thread)
        for tid in tids - python:
            file = _pool_files.get(tid)
            if file is None:
                file = _pool_files[tid] = _ProcFile(f"/proc/self/task/{tid}/schedstat")
            try:
                out[tid] = _parse_schedstat(file.read(128))
            except (OSError, ValueError, IndexError):
                _pool_files.pop(tid).close()
    return out


_statm = _ProcFile("/proc/self/statm")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss() -> int | None:
    """The process's resident memory now, bytes (None where /proc is not there)."""
    try:
        return int(_statm.read(128).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


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

    def read(self) -> tuple[int, int] | None:
        """(ns on a CPU, ns runnable but waiting for one); None where unreadable."""
        try:
            return _parse_schedstat(os.pread(self.fd, 128, 0))
        except (OSError, ValueError, IndexError):
            return None

    def wait_ns(self) -> int:
        """Nanoseconds the thread was runnable but waited for a core; 0 where unreadable."""
        stat = self.read()
        return 0 if stat is None else stat[1]

    def __del__(self) -> None:  # the thread ended (its threading.local went) or a fork reset it
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


_schedstat = threading.local()


def _own_schedstat() -> _ThreadSchedstat:
    try:
        stat: _ThreadSchedstat = _schedstat.stat
    except AttributeError:
        stat = _schedstat.stat = _ThreadSchedstat()
    return stat


def core_wait_ns() -> int:
    """This thread's run-queue wait so far (ns; Linux schedstat, 0 elsewhere)."""
    return _own_schedstat().wait_ns()


def _forget_schedstat() -> None:
    # a forked child's threads are not its parent's: each opens its own file on its first read
    global _schedstat, _pool_lock
    _schedstat = threading.local()
    _pool_lock = threading.Lock()
    for file in (*_pool_files.values(), _statm, _proc_stat):
        file.close()
    _pool_files.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_schedstat)


def lower_thread_priority(by: int) -> bool:
    """Raise the calling thread's nice value by ``by`` (at most 19): when it and the program's
    threads want a core at the same moment, the kernel gives it to theirs. Linux only (nice is
    per thread there; elsewhere ``PRIO_PROCESS`` would name the whole process). False where
    nothing changed."""
    if by <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError:
        return False
    return True


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


_proc_stat = _ProcFile("/proc/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine_busy_ns() -> int | None:
    """CPU time every process has used since boot (``/proc/stat``), ns; None elsewhere."""
    try:
        fields = _proc_stat.read().split(b"\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) * 1_000_000_000 // _CLOCK_TICKS


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
