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
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")  # Phoenix takes traces only: flush() is True then
    name = f"phoenix-{uuid.uuid4().hex[:8]}"
    ns.configure(exporter="otlp", otlp_endpoint=base, service_name="neuronscope-e2e")
    with ns.profile_neuron(name=name) as run:
        with ns.region("forward"):
            for _ in range(3):
                with ns.region("attn"):
                    rmsnorm_naive(*xw)
    assert ns.flush(30)
    trace_id = run.manifest["otel"]["trace_id"]

    def arrived(ss: list) -> bool:
        # Phoenix ingests each export batch on its own: the root can land after its children
        names = {s["name"] for s in ss if s["context"]["trace_id"] == trace_id}
        return {name, "forward", "attn", "aten::mul"} <= names

    spans = wait_for_spans(base, arrived, timeout=30)
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


def test_neuronscope_export_to_phoenix_succeeds_for_the_spans_and_says_metrics_are_not_taken(tmp_path):
    """Phoenix answers /v1/metrics with 405: one line naming the signal and its switch, exit 0."""
    import re
    import subprocess
    import sys

    base = phoenix_url()
    name = f"phoenix-export-{uuid.uuid4().hex[:8]}"
    with ns.profile_neuron(name=name, output_dir=tmp_path) as run:  # no endpoint here: only written
        sum(range(1000))
    assert run.wait(60)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    argv = [sys.executable, "-m", "neuronscope", "export", str(run.path), "--otlp-endpoint", base]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    trace_id = re.search(r"as trace ([0-9a-f]{32}) \(spans only: the endpoint does not take metrics\)", done.stdout).group(1)
    (line,) = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "does not take metrics (HTTP 405" in line and line.endswith("set OTEL_METRICS_EXPORTER=none"), line
    spans = wait_for_spans(base, lambda ss: any(s["name"] == name for s in ss), timeout=30, trace_id=trace_id)
    assert any(s["name"] == name and s["parent_id"] is None for s in spans)
