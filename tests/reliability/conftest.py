from __future__ import annotations

import pytest

import neuronscope as ns

DEFAULTS = dict(
    tracer_provider=None, meter_provider=None, op_spans="summary", max_spans=1000, exporter="auto", otlp_endpoint=None
)


@pytest.fixture(autouse=True)
def _reset():
    ns.configure(**DEFAULTS, max_runs=None, max_bytes=None)
    yield
    ns.flush(60)
    ns.configure(**DEFAULTS, max_runs=None, max_bytes=None)
