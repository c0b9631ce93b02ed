"""The workload every notebook test profiles: each op of the loop runs once a step."""

from __future__ import annotations

import torch

import neuronscope as ns

STEPS = 4


def workload() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(64, 64), torch.randn(64)
    for _ in range(STEPS):
        y = torch.relu(x @ x)
        (y * w).sum().item()
        ns.step()
