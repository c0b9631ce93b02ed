"""The OS reads a capture makes on the calling thread at its start and end (neuronscope/_system.py,
the Neuron backend's availability check): files kept open stay right across threads ending and
a fork, and the check for torch_neuronx scans sys.path once, not at every capture."""

from __future__ import annotations

import _thread
import importlib.util
import mmap
import os
import sys
import threading

import pytest

from neuronscope import _system
from neuronscope.capture.devices import neuron, select_backend

linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads Linux /proc")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _fresh_schedstat(tid: int) -> tuple[int, int]:
    with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
        run, wait = f.read().split()[:2]
    return int(run), int(wait)


@linux_only
def test_a_thread_python_did_not_start_is_read_while_it_lives_and_its_file_closed_after():
    # _thread's threads are not in threading.enumerate(), as an OpenMP or gRPC thread is not
    started, release, done = threading.Event(), threading.Event(), threading.Event()
    tids: list[int] = []

    def native() -> None:
        tids.append(threading.get_native_id())
        sum(i * i for i in range(200_000))  # some CPU time of its own to read
        started.set()
        release.wait(30)
        done.set()

    before = _system.pool_threads_schedstat()  # every file already kept is open now
    fds_before = _open_fds()
    _thread.start_new_thread(native, ())
    assert started.wait(30)
    tid = tids[0]
    seen = _system.pool_threads_schedstat()
    assert tid in seen and tid not in before
    fresh = _fresh_schedstat(tid)  # read after: the kept file's reading is not newer
    assert 0 < seen[tid][0] <= fresh[0]
    assert len(_open_fds() - fds_before) == 1  # its file, kept open

    release.set()
    assert done.wait(30)
    for _ in range(200):  # the thread is gone from /proc a moment after its function returns
        if not os.path.exists(f"/proc/self/task/{tid}"):
            break
        threading.Event().wait(0.01)
    after = _system.pool_threads_schedstat()
    assert tid not in after
    assert _open_fds() - fds_before == set()  # closed once the thread ended


@linux_only
def test_the_rss_a_forked_child_reads_is_its_own():
    # the parent's /proc/self/statm, kept open, would go on reading the parent's memory
    assert _system.process_rss() is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: grow by 200 MB (written, so resident) and report what it read
        try:
            before = _system.process_rss() or 0
            # pages of a new mapping: malloc may serve 200 MB from a freed region of the heap that
            # the parent had written (resident, shared with the child), and the RSS would not grow
            size = 200 << 20
            block = mmap.mmap(-1, size)
            chunk = b"\x01" * (1 << 20)
            for offset in range(0, size, len(chunk)):
                block[offset : offset + len(chunk)] = chunk
            grown = (_system.process_rss() or 0) - before
            os.write(write_end, f"{grown} {size}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        grown, size = (int(v) for v in f.read().split())
    os.waitpid(pid, 0)
    assert grown >= 0.9 * size, f"the child read {grown / 2**20:.0f} MB of growth for {size / 2**20:.0f} MB written"


@linux_only
def test_the_calling_threads_own_schedstat_matches_a_fresh_read():
    tid = threading.get_native_id()
    kept = _system.read_schedstat(tid)
    fresh = _fresh_schedstat(tid)
    again = _system.read_schedstat(tid)
    assert kept is not None and again is not None
    assert kept[0] <= fresh[0] <= again[0] and kept[1] <= fresh[1] <= again[1]


def test_the_torch_neuronx_lookup_scans_sys_path_once_for_every_capture_start(monkeypatch):
    if neuron.privateuse1_is_neuron() or "torch_neuronx" in sys.modules:
        pytest.skip("a Neuron backend is registered here: the lookup is never reached")
    lookups: list[str] = []
    real = importlib.util.find_spec

    def counting(name, *args, **kwargs):
        if name == "torch_neuronx":
            lookups.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", counting)
    neuron._torch_neuronx_installed.cache_clear()
    try:
        backends = {select_backend("auto").name for _ in range(50)}
    finally:
        neuron._torch_neuronx_installed.cache_clear()  # the next test looks again, unpatched
    assert lookups == ["torch_neuronx"]
    assert backends == {"cuda"} or backends == {"cpu"}
