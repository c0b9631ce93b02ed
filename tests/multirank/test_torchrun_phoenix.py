"""A real torchrun job exporting OTLP to a real backend (Arize Phoenix), read back over REST:
one trace per distributed step, its step span at the root, one child per rank."""

from __future__ import annotations

import os
import uuid

import pytest
from jobs import run_torchrun
from support.phoenix import iso_to_unix_nano, phoenix_url, wait_for_spans

pytestmark = pytest.mark.skipif(os.environ.get("NEURONSCOPE_PHOENIX") == "0", reason="NEURONSCOPE_PHOENIX=0")


def test_one_trace_per_step_with_one_child_per_rank(tmp_path):
    base = phoenix_url()
    steps, nproc = 3, 2
    job = run_torchrun(
        tmp_path, nproc, "--steps", str(steps), "--slow-rank", "1", "--sleep-ms", "5",
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": base,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": f"ranks-{uuid.uuid4().hex[:8]}",
            "OTEL_METRICS_EXPORTER": "none",  # Phoenix takes traces only: the job's ns.flush() is True then
        },
    )
    ids = [[job.reports[r]["runs"][i]["otel"]["trace_id"] for r in range(nproc)] for i in range(steps)]
    for i, per_rank in enumerate(ids):
        assert len(set(per_rank)) == 1, f"step {i}: the ranks' root spans are in different traces: {per_rank}"
    assert len({row[0] for row in ids}) == steps  # one trace per step

    for i, row in enumerate(ids):
        trace_id = row[0]
        wanted = {f"train_step step {i}", *(f"train_step rank {r}" for r in range(nproc))}
        spans = wait_for_spans(base, lambda ss, want=wanted: want <= {s["name"] for s in ss}, timeout=60, trace_id=trace_id)
        assert all(s["context"]["trace_id"] == trace_id for s in spans)
        by_name = {s["name"]: s for s in spans}
        step = by_name[f"train_step step {i}"]
        assert step["parent_id"] is None  # the trace's real root
        assert [s["name"] for s in spans].count(step["name"]) == 1
        assert step["attributes"]["neuronscope.world_size"] == nproc
        for r in range(nproc):
            root = by_name[f"train_step rank {r}"]
            assert root["parent_id"] == step["context"]["span_id"]
            assert root["attributes"]["neuronscope.rank"] == r
            assert root["attributes"]["neuronscope.job.id"] == f"127.0.0.1:{job.port}"
            assert root["context"]["span_id"] == job.reports[r]["runs"][i]["otel"]["span_id"]
            # the rank's own spans (ops, regions) hang under its root
            assert any(s["parent_id"] == root["context"]["span_id"] for s in spans)
            assert iso_to_unix_nano(root["start_time"]) > 0
