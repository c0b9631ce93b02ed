"""The whole Neuron path against the emulated device (neuronscope.testing), in CI.

detection -> capture with NeuronConfig -> NeuronCore device times in the summary -> spans
(ops, runtime and hardware lanes) -> paired raw files in the run directory -> manifest ->
the Neuron Explorer command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def run_scenario(name: str, tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.pop("NEURON_RT_INSPECT_ENABLE", None)
    proc = subprocess.run(
        [sys.executable, str(HERE / "neuron_scenarios.py"), name, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    return run_scenario("full_path", tmp_path_factory.mktemp("neuron"))


def test_detected_and_device_time_is_neuroncore_time(full):
    assert full["device"] == "neuron" and full["status"] == "complete"
    rows = {r["name"]: r for r in full["rows"]}
    assert "NeuronCore time" in full["table"]
    # Device time lands on the ops that launched it, and matches torch's own key_averages.
    ka = full["key_averages"]
    assert rows["aten::mul"]["self_device_time_us"] > 0
    for name, row in rows.items():
        if name in ka:
            assert row["calls"] == ka[name]["count"], name
    # Shares of self device time sum to 100 and the runtime rows carry no device time.
    assert sum(r["device_pct"] for r in full["rows"]) == pytest.approx(100.0)
    assert rows["nrta_execute_schedule"]["self_device_time_us"] == 0


def test_device_times_agree_with_key_averages_on_the_same_workload(full):
    # Emulated device time is a fixed ratio of each op's CPU time, so two runs differ; the
    # *shares* per op are what must agree closely.
    ka = full["key_averages"]
    ours = {r["name"]: r["self_device_time_us"] for r in full["rows"] if r["self_device_time_us"] > 0}
    theirs = {k: v["self_device_us"] for k, v in ka.items() if v["self_device_us"] > 0 and k.startswith("aten::")}
    assert set(ours) == set(theirs)


def test_raw_files_are_in_the_run_directory_and_paired(full):
    files = full["files"]
    assert "manifest.json" in files and "summary.json" in files and "trace.json.gz" in files
    neffs = [f for f in files if f.endswith(".neff")]
    ntffs = [f for f in files if f.endswith(".ntff")]
    assert neffs and ntffs and all(f.startswith("neuron/") for f in neffs + ntffs)
    assert any(f.endswith("ntrace.pb") for f in files) and any(f.endswith("trace_info.pb") for f in files)
    neuron = full["manifest"]["neuron"]
    assert len(neuron["artifacts"]) == len(neffs)
    for group in neuron["artifacts"]:
        assert group["layout"] == "session" and group["neff"].endswith(".neff") and group["ntff"]
        assert group["neff_bytes"] > 0 and all(b > 0 for b in group["ntff_bytes"])
        assert group["problems"] == []
    cmd = neuron["explorer_command"]
    assert cmd.startswith("neuron-explorer view -d ") and cmd.split(" -d ")[1] in {d for d in neuron["session_dirs"]}
    assert f"open in Neuron Explorer: {cmd}" in full["table"]


def test_spans_show_ops_and_the_runtime_and_hardware_lanes(full):
    spans = full["spans"]
    root = next(s for s in spans if s["name"] == "rmsnorm")
    assert root["attributes"]["neuronscope.device"] == "neuron"
    assert root["attributes"]["neuronscope.raw.neff"] and root["attributes"]["neuronscope.raw.ntff"]
    assert root["attributes"]["neuronscope.raw.explorer_command"].startswith("neuron-explorer view")
    op_ids = {s["id"]: s["name"] for s in spans if s["name"].startswith("aten::")}
    lanes = {s["attributes"]["neuronscope.lane"]: s for s in spans if "neuronscope.lane" in s["attributes"]}
    assert set(lanes) == {"runtime", "hardware"}
    assert lanes["runtime"]["name"] == "nrta_execute_schedule" and lanes["hardware"]["name"] == "nc_exec_running"
    for lane in lanes.values():
        assert lane["parent"] == root["id"]
        assert root["start"] <= lane["start"] <= lane["end"] <= root["end"]
        linked = {op_ids[i] for i in lane["links"] if i in op_ids}
        assert "aten::mul" in linked  # framework -> runtime -> hardware, linked to the op spans
    assert full["manifest"]["otel"]["span_id"] == format(root["id"], "016x")


def test_an_idle_core_gives_an_empty_ntff_reported_as_normal(tmp_path):
    out = run_scenario("session_idle_core", tmp_path)
    assert any(n.endswith("profile_nc_1_session_0.ntff") for n in out["ntff"])
    assert any("profile_nc_1_session_0.ntff is empty: NeuronCore 1" in w and "(normal)" in w for w in out["warnings"])


def test_model_layout_pairs_by_id(tmp_path):
    out = run_scenario("model_layout_idle_core", tmp_path)
    neuron = out["manifest"]["neuron"]
    groups = neuron["artifacts"]
    assert groups and all(g["layout"] == "model" for g in groups)
    for g in groups:
        neff_id = Path(g["neff"]).name.removeprefix("neff_").removesuffix(".neff")
        assert g["id"] == neff_id and all(Path(n).name.startswith(f"{neff_id}_instid_") for n in g["ntff"])
    assert out["warnings"] == []
    assert neuron["explorer_command"].startswith("neuron-explorer view -n ")
    assert " -s " in neuron["explorer_command"]


def test_dropped_events_are_reported(tmp_path):
    out = run_scenario("dropped_events", tmp_path)
    assert any("max_events_per_nc (3) was reached" in w for w in out["warnings"])


def test_warmup_skips_compiling_calls_and_cold_profiles_are_flagged(tmp_path):
    out = run_scenario("warmup_decorator", tmp_path)
    assert out["stats"]["warmup"] == 2 and out["stats"]["profiled"] == 2
    assert not any("compilation" in w for w in out["warm_warnings"])
    assert out["cold_compilation"] is True and any("compilation" in w for w in out["cold_warnings"])
    assert out["cold_span_flag"] is True


def test_environment_capture_is_refused_with_a_clear_message(tmp_path):
    out = run_scenario("env_capture_refused", tmp_path)
    assert "NEURON_RT_INSPECT_ENABLE" in out["error"] and "--neuron-inspect" in out["error"]


def test_auto_detects_neuron(tmp_path):
    assert run_scenario("cpu_only_sees_neuron_as_auto", tmp_path) == {"auto": "neuron", "explicit": "neuron"}
