"""Reading ``system_profile.json`` as ``neuron-explorer view --output-format json`` documents it.

Fixtures: tests/data/neuron/system_profile*.json (built from the documented fields; README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import neuronscope as ns
from neuronscope.sinks.otel.lanes import lane_aggregates, load_system_profile, read_system_profile

DATA = Path(__file__).parents[1] / "data"
FIXTURE = DATA / "neuron" / "system_profile.json"


def test_the_documented_container_with_mem_usage_and_cpu_util():
    profile = load_system_profile(FIXTURE)
    assert len(profile.events) == 8
    first = profile.events[0]
    # the documented event, every field kept as written
    assert first["name"] == "nrt_tensor_write" and first["group"] == "nrt-nc-000" and first["type"] == 11
    assert first["timestamp"] == 1729888371056597613 and first["duration"] == 27094
    assert first["lnc_idx"] == "0" and first["process_id"] == "1627711" and first["thread_id"] == 1627711
    facts = profile.facts()
    assert facts["events_by_lane"] == {"runtime": 5, "framework": 1, "hardware": 2}
    assert facts["instances"] == ["i-0f207fb2a99bd2d08"]
    assert facts["host_memory"] == {"samples": 2, "max_bytes": 52721000000, "mean_bytes": 52263403296, "max_percent": 9.9}
    assert facts["cpu_util"] == {"samples": 3, "cores": 2, "mean_percent": 50.0, "max_percent": 97.674}
    json.dumps(facts)


def test_events_wrapped_by_type_name_as_the_docs_print_them():
    profile = load_system_profile(DATA / "neuron" / "system_profile.typed.json")
    assert [e["event_type"] for e in profile.events] == ["Neuron_Runtime_API_Event", "Framework_Event", "Neuron_Runtime_API_Event"]
    assert profile.events[1]["name"] == "PjitFunction(matmul_allgather)" and profile.events[1]["type"] == 99999
    assert profile.facts()["host_memory"]["samples"] == 1 and profile.facts()["cpu_util"]["cores"] == 1


@pytest.mark.parametrize("key", ["trace_event", "events", "traceEvents"])
def test_other_container_keys(tmp_path, key):
    doc = json.loads(FIXTURE.read_text())
    doc[key] = doc.pop("trace_events")
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert read_system_profile(tmp_path / "p.json") == load_system_profile(FIXTURE).events


def test_dict_of_lists_keyed_by_type(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    events = doc.pop("trace_events")
    doc["trace_events"] = {"Neuron_Runtime_API_Event": [e for e in events if e.get("type") != 99999],
                           "Framework_Event": [e for e in events if e.get("type") == 99999]}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    got = load_system_profile(tmp_path / "p.json").events
    assert len(got) == 8 and {e["event_type"] for e in got} == {"Neuron_Runtime_API_Event", "Framework_Event"}


def test_bad_files_name_the_file_and_what_was_expected(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    with pytest.raises(ns.TraceLoadError, match=r"bad\.json: not a Neuron system profile: expected an object with trace_events / trace_event"):
        load_system_profile(bad)
    bad.write_text('{"trace_events": [{"name": "x", "timestamp": "soon"}]}')
    with pytest.raises(ns.TraceLoadError, match="timestamp and duration must be integers"):
        load_system_profile(bad)
    bad.write_text("{")
    with pytest.raises(ns.TraceLoadError, match="unreadable system profile JSON"):
        load_system_profile(bad)


def test_system_profile_adds_what_the_trace_lacks_and_counts_the_rest_once():
    trace = ns.load_trace(DATA / "emulated_neuron_rmsnorm.trace.json.gz")
    alone = {(a.lane, a.name): a for a in lane_aggregates(trace)}
    events = load_system_profile(FIXTURE).events
    both = {(a.lane, a.name): a for a in lane_aggregates(trace, events)}
    # new: the runtime's own events; nc_exec_running stays the trace's (with its op links)
    assert both[("runtime", "nrt_execute")].count == 2 and both[("runtime", "nrt_execute")].total_ns == 1_850_000
    assert ("runtime", "model_load") in both and ("runtime", "kbl_exec_wait") in both
    hw = both[("hardware", "nc_exec_running")]
    assert hw.count == alone[("hardware", "nc_exec_running")].count and hw.ops
    # the framework lane is the PyTorch trace itself
    assert not any(lane == "framework" for lane, _ in both)


def test_hardware_events_by_name_or_source_whatever_their_group(tmp_path):
    doc = {"trace_events": [
        {"name": "cc_running", "timestamp": 5, "duration": 1, "group": "nrt-nc-003"},
        {"name": "custom", "timestamp": 6, "duration": 1, "group": "nrt-nc-003", "trace_event_source": "neuron_hw"},
        {"name": "nrt_execute", "timestamp": 7, "duration": 1, "group": "nrt-nc-003"},
    ]}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert load_system_profile(tmp_path / "p.json").facts()["events_by_lane"] == {"hardware": 2, "runtime": 1}
