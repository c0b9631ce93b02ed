"""End to end against a real OTLP backend: Arize Phoenix (its own venv, loopback only).

Started by .ci/run (NEURONSCOPE_PHOENIX_URL) or, locally, by tests/support/phoenix.py.
"""

from __future__ import annotations

import os
import uuid

import pytest
from support.phoenix import iso_to_unix_nano, phoenix_url, wait_for_spans
from workloads import rmsnorm_naive

import neuronscope as ns

pytestmark = pytest.mark.skipif(os.environ.get("NEURONSCOPE_PHOENIX") == "0", reason="NEURONSCOPE_PHOENIX=0")


def test_profile_spans_read_back_from_phoenix(xw, monkeypatch):
    base = phoenix_url()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    name = f"phoenix-{uuid.uuid4().hex[:8]}"
    ns.configure(exporter="otlp", otlp_endpoint=base, service_name="neuronscope-e2e")
    with ns.profile_neuron(name=name) as run:
        with ns.region("forward"):
            for _ in range(3):
                with ns.region("attn"):
                    rmsnorm_naive(*xw)
    assert ns.flush(30)
    trace_id = run.manifest["otel"]["trace_id"]

    spans = wait_for_spans(base, lambda ss: sum(s["context"]["trace_id"] == trace_id for s in ss) >= 4, timeout=30)
    mine = [s for s in spans if s["context"]["trace_id"] == trace_id]
    by_id = {s["context"]["span_id"]: s for s in mine}
    root = next(s for s in mine if s["name"] == name)
    assert root["parent_id"] is None
    # Phoenix keeps microseconds.
    assert abs(iso_to_unix_nano(root["start_time"]) - run.start_ns) <= 1000
    assert abs(iso_to_unix_nano(root["end_time"]) - run.end_ns) <= 1000
    assert root["attributes"]["neuronscope.device"] == "cpu"
    assert root["attributes"]["neuronscope.top_op.name"] == run.summary.top(1)[0].name
    attn = next(s for s in mine if s["name"] == "attn")
    assert by_id[attn["parent_id"]]["name"] == "forward"
    assert by_id[by_id[attn["parent_id"]]["parent_id"]]["name"] == name
    assert attn["attributes"]["neuronscope.region.occurrences"] == 3
    mul = next(s for s in mine if s["name"] == "aten::mul" and s["parent_id"] == attn["context"]["span_id"])
    assert mul["attributes"]["neuronscope.op.calls"] == 6
    for s in mine:
        if s["parent_id"] in by_id:
            parent = by_id[s["parent_id"]]
            assert iso_to_unix_nano(parent["start_time"]) <= iso_to_unix_nano(s["start_time"]) + 1000
            assert iso_to_unix_nano(s["end_time"]) <= iso_to_unix_nano(parent["end_time"]) + 1000
