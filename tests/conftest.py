from __future__ import annotations

import pytest
import torch

import neuronscope as ns
from neuronscope import _stats


@pytest.fixture
def xw() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 64), torch.randn(64)


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
