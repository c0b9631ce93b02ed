from __future__ import annotations

import os

import pytest
import torch
from support.prometheus import REQUIRE_ENV, find_prometheus

import neuronscope as ns

DEFAULTS = dict(
    tracer_provider=None,
    meter_provider=None,
    op_spans="summary",
    max_spans=1000,
    exporter="auto",
    otlp_endpoint=None,
    prometheus_port=None,
    metrics_top_ops=20,
)

N_CUSTOM_OPS = 300
_lib: torch.library.Library | None = None


def custom_ops() -> list:
    """``nsmetrics::op0`` .. ``op299``: real dispatcher ops, each its own name in the profile."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("nsmetrics", "DEF")
        for i in range(N_CUSTOM_OPS):
            _lib.define(f"op{i}(Tensor x) -> Tensor")
            _lib.impl(f"op{i}", lambda x: x + 1, "CPU")
    return [getattr(torch.ops.nsmetrics, f"op{i}") for i in range(N_CUSTOM_OPS)]


def prometheus_or_skip() -> str:
    binary = find_prometheus()
    if binary is None:
        msg = "no prometheus binary: apt-get install prometheus (or set PROMETHEUS_BIN)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set but {msg}", pytrace=False)
        pytest.skip(msg)
    return binary


@pytest.fixture
def reset_otel():
    ns.configure(**DEFAULTS)
    yield
    ns.flush(30)
    ns.configure(**DEFAULTS)
