"""A profile in windows is analysed on a thread of its own, below the program's priority (Linux
nice, per thread; ``configure(worker_nice=)`` / ``NEURONSCOPE_WORKER_NICE``, default 5): when
both want a core, the program gets it (the measured effect on a training loop:
bench/bench_long_runs.py mlp --worker-nice 0 5, docs/performance.md). A profiled call's own
analysis, which the caller may be waiting for, keeps the program's priority."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import neuronscope as ns
from neuronscope import _worker

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")


def _nice_of(worker: _worker.Worker) -> int:
    """The nice value ``worker``'s thread reads for itself, at its next task."""
    seen: list[int] = []
    worker.submit(lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0)))  # 0: the calling thread
    assert worker.flush(60)
    return seen[0]


def _nice_of_a_new_worker(below_program: bool) -> int:
    worker = _worker.Worker("priority-test", below_program=below_program)
    try:
        return _nice_of(worker)
    finally:
        worker._queue.put(None)  # end its thread


@linux_only
def test_a_windowed_profile_is_analysed_five_below_the_program_and_a_call_at_its_priority(tmp_path, monkeypatch):
    monkeypatch.delenv("NEURONSCOPE_WORKER_NICE", raising=False)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    m, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with ns.profile_neuron(name="w", output_dir=tmp_path, device="cpu", windows=ns.Windows(steps=2, keep=0)) as run:
        for _ in range(6):
            m(x)
            ns.step()
    assert run.wait(60) and run.coverage is not None and run.coverage.windows >= 1
    with ns.profile_neuron(name="call", output_dir=tmp_path, device="cpu") as call:
        m(x)
    assert call.wait(60)
    # the threads that did that work: the windows' below the program, the call's at its priority
    # (a worker thread sets its priority once, when it starts; these started in this process)
    assert _nice_of(_worker.windows_worker()) == min(19, ours + 5)
    assert _nice_of(_worker.get_worker()) == ours
    assert _nice_of(_worker.output_worker()) == ours
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours  # the program's own thread was never touched


@linux_only
def test_the_setting_and_the_variable_choose_how_far_below(monkeypatch):
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setenv("NEURONSCOPE_WORKER_NICE", "2")
    assert _nice_of_a_new_worker(below_program=True) == min(19, ours + 2)
    try:
        ns.configure(worker_nice=0)  # the setting wins over the variable
        assert _nice_of_a_new_worker(below_program=True) == ours
    finally:
        ns.configure(worker_nice=None)
    assert _nice_of_a_new_worker(below_program=False) == ours


@pytest.mark.parametrize("bad", [-1, 20, 2.5, True, "5"])
def test_a_bad_priority_is_a_clear_error(bad):
    with pytest.raises(ns.ConfigurationError, match=r"worker_nice=.*use an int 0-19"):
        ns.configure(worker_nice=bad)


def test_a_bad_variable_names_what_to_use(monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_WORKER_NICE", "20")
    with pytest.raises(ns.ConfigurationError, match=r"NEURONSCOPE_WORKER_NICE='20': use a whole number 0-19"):
        ns.configure()
