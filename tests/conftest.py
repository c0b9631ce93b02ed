from __future__ import annotations

import pytest
import torch

import neuronscope as ns
from neuronscope import _stats


@pytest.fixture
def xw() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 64), torch.randn(64)


@pytest.fixture
def one_intra_op_thread():
    """One intra-op thread, for a test whose premise is not how torch's pool shares a busy
    machine. Beside two busy processes on two cores, with two intra-op threads, a thread that
    hands work to the pool spins at its barrier while the pool thread waits for a core -- a
    time slice, 4-8 ms, for a 12 us call (its CPU time, measured with the pool thread's
    schedstat: it waited as long, woken, never preempted). Measured in the tests that use this:
    ``mul`` and ``pow`` both 8 ms a call on 2048x2048 (0.6 and 3.6 ms quiet); an MLP's
    AddmmBackward0 ~40 ms in 4 of 14 runs (0 of 16 with one thread); 2-12 ms firings of a
    tight loop's 12 us calls (4-20 a run of 1,300 calls; 5-11 with one thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _isolated_runs(tmp_path, monkeypatch):
    """Every test writes run directories under its own tmp dir and starts with clean counters."""
    out = tmp_path / "runs"
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(out))
    ns.flush(30)
    _stats.reset()
    yield out
    ns.flush(30)
    from neuronscope import _worker
    from neuronscope.capture import session

    # every stopped capture was written out and released: nothing leaks into the backlog
    if not session.open_captures():
        assert _worker.backlog.total_bytes == 0, f"backlog leak: {_worker.backlog._bytes}"
