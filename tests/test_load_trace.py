"""Offline loading of Kineto traces: committed real traces, round trips, bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from workloads import rmsnorm_naive

import neuronscope as ns

DATA = Path(__file__).parent / "data"


def test_committed_cpu_trace_matches_torchs_key_averages():
    trace = ns.load_trace(DATA / "cpu_rmsnorm.trace.json.gz")
    reference = json.loads((DATA / "cpu_rmsnorm.key_averages.json").read_text())
    summary = ns.summarize(trace)
    assert trace.device == "cpu"
    for row in summary.rows:
        count, self_cpu, cpu_total = reference[row.name]
        assert row.calls == count, row.name
        # The file keeps microseconds with 3 decimals: agreement to well under 1%.
        assert row.self_cpu_time_us == pytest.approx(self_cpu, rel=0.01, abs=0.01), row.name
        assert row.cpu_time_us == pytest.approx(cpu_total, rel=0.01, abs=0.01), row.name
    assert summary.regions["forward/norm"].region_stats.occurrences == reference["norm"][0]
    # Wall-clock anchoring: ts_us * 1000 + baseTimeNanoseconds lands in a plausible epoch range.
    assert 1.6e18 < trace.start_time_ns < 2.2e18


def test_live_and_saved_trace_give_the_same_summary(xw, tmp_path):
    x, w = xw
    with ns.profile_neuron(name="roundtrip") as run:
        with ns.region("forward"):
            for _ in range(4):
                rmsnorm_naive(x, w)
    live = run.summary
    for source in (run.path / "trace.json.gz", run.path):
        loaded = ns.summarize(ns.load_trace(source))
        assert [(r.name, r.calls) for r in loaded.rows] == [(r.name, r.calls) for r in live.rows] or sorted(
            (r.name, r.calls) for r in loaded.rows
        ) == sorted((r.name, r.calls) for r in live.rows)
        for row in live.rows:
            assert loaded[row.name].cpu_time_us == pytest.approx(row.cpu_time_us, rel=0.01, abs=0.01)
        assert set(loaded.regions) == set(live.regions)
    # A plain (not gzipped) copy loads too.
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress((run.path / "trace.json.gz").read_bytes()))
    assert len(ns.load_trace(plain)) == len(ns.load_trace(run.path))


def test_load_run_round_trip(xw):
    x, w = xw
    with ns.profile_neuron(name="saved") as run:
        rmsnorm_naive(x, w)
    loaded = ns.load_run(run.path)
    assert loaded.name == "saved" and loaded.device == "cpu" and loaded.status == "complete"
    assert loaded.summary.to_dict() == run.summary.to_dict()
    assert loaded.start_ns == run.start_ns and loaded.end_ns == run.end_ns
    assert len(loaded.trace) > 0


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1', "not valid JSON"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"[1, 2", "not valid JSON"),
        (b'{"schemaVersion": 1}', "traceEvents"),
        (b'"just a string"', "traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "ts": "soon"}]}', "malformed"),
        (b"\xff\xfe\x00binary", "not valid JSON"),
    ],
)
def test_bad_trace_files_raise_a_clear_error_naming_the_file(tmp_path, content, message):
    bad = tmp_path / "bad.trace.json"
    bad.write_bytes(content)
    with pytest.raises(ns.TraceLoadError, match=message) as info:
        ns.load_trace(bad)
    assert str(bad) in str(info.value)


def test_truncated_gzip_is_a_clear_error(tmp_path):
    whole = (DATA / "cpu_rmsnorm.trace.json.gz").read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ns.TraceLoadError, match="cut.json.gz"):
        ns.load_trace(bad)


def test_missing_file_and_directory_without_trace(tmp_path):
    with pytest.raises(ns.TraceLoadError, match="cannot read"):
        ns.load_trace(tmp_path / "nope.json")
    with pytest.raises(ns.TraceLoadError, match="no trace.json"):
        ns.load_trace(tmp_path)
    with pytest.raises(ns.TraceLoadError, match="manifest.json"):
        ns.load_run(tmp_path)


def test_committed_emulated_neuron_trace_loads_as_neuron_with_lanes():
    from neuronscope.sinks.otel.lanes import lane_aggregates

    trace = ns.load_trace(DATA / "emulated_neuron_rmsnorm.trace.json.gz")
    assert trace.device == "neuron"
    summary = ns.summarize(trace)
    assert summary["aten::mul"].self_device_time_us > 0
    assert summary["nrta_execute_schedule"].self_device_time_us == 0
    assert sum(r.device_pct for r in summary.rows) == pytest.approx(100.0)
    lanes = {(a.lane, a.name): a for a in lane_aggregates(trace)}
    runtime = lanes[("runtime", "nrta_execute_schedule")]
    hardware = lanes[("hardware", "nc_exec_running")]
    assert runtime.count == hardware.count > 0
    assert "aten::mul" in runtime.ops and "aten::mul" in hardware.ops
