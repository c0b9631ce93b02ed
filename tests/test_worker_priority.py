"""neuronscope's analysis and output threads run below the program's priority (Linux nice, per
thread; ``configure(worker_nice=)`` / ``NEURONSCOPE_WORKER_NICE``, default 5): when both want a
core, the program gets it (the measured effect on a training loop: bench/bench_long_runs.py mlp
--worker-nice 0 5, docs/performance.md)."""

from __future__ import annotations

import os
import sys

import pytest

import neuronscope as ns
from neuronscope import _worker

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")


def _nice_of_a_new_worker() -> int:
    """The nice value a freshly started worker thread reads for itself."""
    seen: list[int] = []
    worker = _worker.Worker("priority-test")
    worker.submit(lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0)))  # 0: the calling thread
    assert worker.flush(30)
    worker._queue.put(None)  # end its thread
    return seen[0]


@linux_only
def test_a_worker_runs_five_below_the_program_by_default(monkeypatch):
    monkeypatch.delenv("NEURONSCOPE_WORKER_NICE", raising=False)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert _nice_of_a_new_worker() == min(19, ours + 5)


@linux_only
def test_the_setting_and_the_variable_choose_how_far_below(monkeypatch):
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setenv("NEURONSCOPE_WORKER_NICE", "2")
    assert _nice_of_a_new_worker() == min(19, ours + 2)
    try:
        ns.configure(worker_nice=0)  # the setting wins over the variable
        assert _nice_of_a_new_worker() == ours
    finally:
        ns.configure(worker_nice=None)
    # the program's own thread was never touched
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours


@pytest.mark.parametrize("bad", [-1, 20, 2.5, True, "5"])
def test_a_bad_priority_is_a_clear_error(bad):
    with pytest.raises(ns.ConfigurationError, match=r"worker_nice=.*use an int 0-19"):
        ns.configure(worker_nice=bad)


def test_a_bad_variable_names_what_to_use(monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_WORKER_NICE", "20")
    with pytest.raises(ns.ConfigurationError, match=r"NEURONSCOPE_WORKER_NICE='20': use a whole number 0-19"):
        ns.configure()
