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


def run_scenario(name: str, tmp_path: Path, stderr: list[str] | None = None) -> dict:
    env = dict(os.environ)
    env.pop("NEURON_RT_INSPECT_ENABLE", None)
    env.pop("TORCH_NEURONX_NEFF_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(HERE / "neuron_scenarios.py"), name, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    if stderr is not None:
        stderr.append(proc.stderr)
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
    # Explorer is pointed at the profile root (the folder holding <instance>_pid_<pid>/), as in
    # every documented example (get-started.rst: `neuron-explorer view -d ./profile_output`).
    root = Path(full["path"]) / "neuron"
    assert neuron["profile_root"] == str(root)
    assert all(Path(d).parent.parent == root for d in neuron["session_dirs"])
    cmd = neuron["explorer_command"]
    assert cmd == f"neuron-explorer view -d {root}"
    assert f"open in Neuron Explorer: {cmd}" in full["table"]
    cmds = neuron["explorer_commands"]
    assert f"neuron-explorer view -d {root} --ingest-only --display-name rmsnorm" in cmds
    assert f"neuron-explorer view -d {root} --output-format summary-json --output-file {root.parent / 'explorer' / 'summary.json'}" in cmds
    assert f"neuron-explorer view -d {root} --output-format json --output-file {root.parent / 'explorer' / 'system_profile.json'}" in cmds
    assert any(c.startswith(f"neuron-explorer view -d {root} --output-format perfetto --output-file ") for c in cmds)
    # No Neuron Explorer on this machine: said once, with what to install.
    assert neuron["explorer"]["status"] == "not_installed"
    assert any("aws-neuronx-tools" in n for n in full["notes"])
    # NTFFs need their NEFFs: by default TorchNeuron is pointed at the run's neuron/ folder.
    assert neuron["neff_cache_dir"] == str(root) and neuron["neff_cache_dir_source"].startswith("default")


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


def test_an_idle_core_gives_an_empty_ntff_reported_as_information(tmp_path):
    out = run_scenario("session_idle_core", tmp_path)
    assert any(n.endswith("profile_nc_1_session_0.ntff") for n in out["ntff"])
    # troubleshooting.rst: expected when the process initialises more cores than it runs on
    assert any("profile_nc_1_session_0.ntff" in n and "NeuronCore 1 was initialised but never ran" in n for n in out["notes"])
    assert not any("ntff" in w.lower() for w in out["warnings"])


def test_every_ntff_empty_is_a_problem_with_the_fix(tmp_path):
    out = run_scenario("all_ntffs_empty", tmp_path)
    assert out["ntff"] and all(n.endswith("profile_nc_1_session_0.ntff") for n in out["ntff"])
    problem = next(w for w in out["warnings"] if "every NTFF is empty" in w)
    assert "warm up" in problem and "capture_enabled_for_nc" in problem
    assert not any("never ran" in n for n in out["notes"])


def test_model_layout_pairs_by_id(tmp_path):
    out = run_scenario("model_layout_idle_core", tmp_path)
    neuron = out["manifest"]["neuron"]
    groups = neuron["artifacts"]
    assert groups and all(g["layout"] == "model" for g in groups)
    for g in groups:
        neff_id = Path(g["neff"]).name.removeprefix("neff_").removesuffix(".neff")
        assert g["id"] == neff_id and all(Path(n).name.startswith(f"{neff_id}_instid_") for n in g["ntff"])
    assert out["warnings"] == []
    root = Path(out["path"]) / "neuron"
    assert neuron["explorer_command"] == f"neuron-explorer view -d {root}"
    pairs = [c for c in neuron["explorer_commands"] if c.startswith("neuron-explorer view -n ")]
    assert len(pairs) == len(groups) and all(" -s " in c for c in pairs)


def test_artifacts_command_shows_and_emits_every_problem_note_and_command(tmp_path):
    out = run_scenario("artifacts_cli", tmp_path)
    for name, r in out.items():
        data = r["json"]
        assert data["schema_version"] == 1 and data["directory"] == r["path"], name
        assert set(data) >= {"groups", "problems", "notes", "explorer_commands", "dropped_events", "profile_root"}
        # the JSON carries every line the text prints, and the capture's own warnings
        for line in data["problems"]:
            assert line in r["text"] or line.split(": ", 1)[1] in r["text"], (name, line)
        for line in data["notes"]:
            assert line in r["text"] or line.split(": ", 1)[1] in r["text"], (name, line)
        for cmd in data["explorer_commands"]:
            assert f"open in Neuron Explorer: {cmd}\n" in r["text"]
        assert [w for w in r["warnings"] if "NTFF" in w or "dropped" in w] == [
            p for p in data["problems"] if "NTFF" in p or "dropped" in p
        ], name
        # never a pair view of an empty NTFF: neuron-explorer fails on it
        sizes = {n: b for g in data["groups"] for n, b in zip(g["ntff"], g["ntff_bytes"])}
        for cmd in data["explorer_commands"]:
            if " -s " in cmd:
                assert sizes[cmd.rsplit(" -s ", 1)[1]] > 0, (name, cmd)
    idle = out["idle"]
    note = next(n for n in idle["json"]["notes"] if "empty NTFF" in n)
    assert "NeuronCore 1 was initialised but never ran" in note and f"note: {note}\n" in idle["text"]
    assert idle["json"]["problems"] == [] and "profile_nc_1_session_0.ntff  (empty)" in idle["text"]
    assert any(" -n " in c for c in out["model"]["json"]["explorer_commands"])  # the pair views
    dropped = out["dropped"]["json"]
    assert dropped["dropped_events"]["dropped"] > 0
    assert any("trace events were dropped during capture" in p for p in dropped["problems"])


def test_dropped_events_come_from_the_runtime_message_on_stderr(tmp_path):
    proc_stderr: list[str] = []
    out = run_scenario("dropped_events", tmp_path, stderr=proc_stderr)
    watched, unwatched = out["True"], out["False"]
    # 3 calls x 7 executions on NeuronCore 0, the newest 3 kept: the runtime's own numbers.
    assert watched["dropped"]["dropped"] == 18 and watched["dropped"]["stored"] == 3 and watched["dropped"]["total"] == 21
    problem = next(w for w in watched["warnings"] if "trace events were dropped" in w)
    assert "18 trace events were dropped during capture (stored 3 of 21)" in problem and "max_events_per_nc" in problem
    # No emulator-only file is involved: with the tee off, nothing is detected.
    assert not any(f.endswith(".json") and "emulator" in f for f in watched["files"])
    assert unwatched["dropped"] is None and not any("dropped" in w for w in unwatched["warnings"])
    # The tee loses and reorders nothing: the user's lines and the runtime's, in order.
    err = proc_stderr[0]
    lines = [ln for ln in err.splitlines() if ln.startswith("user line") or "trace events were dropped" in ln]
    assert lines[:4] == [
        "user line before True",
        "user line inside True",
        lines[2],
        "user line after True",
    ] and "Warning: 18 trace events were dropped" in lines[2]
    assert lines[4:] == ["user line before False", "user line inside False", lines[6], "user line after False"]
    assert not any(f == ".neuron-stderr.log" for f in watched["files"])  # the copy is scanned, then removed


def test_options_reach_neuronconfig_and_the_runtime_environment(tmp_path):
    out = run_scenario("options_reach_neuronconfig", tmp_path)
    default, env, off = out["runs"]["default"], out["runs"]["env"], out["runs"]["off"]
    first = out["kwargs"][0]
    assert first["precache_node_info"] == "False" and first["neff_cache_dir"] == default["raw"]
    assert default["manifest"]["neff_cache_dir"] == default["raw"]
    assert env["manifest"]["neff_cache_dir"] == str(tmp_path / "neff-cache")
    assert env["manifest"]["neff_cache_dir_source"] == "TORCH_NEURONX_NEFF_CACHE_DIR"
    assert "neff_cache_dir" not in out["kwargs"][2] and "neff_cache_dir" not in off["manifest"]
    # num_warmup: set for the capture only; the emulated runtime skips each NEFF's first run.
    assert default["env_inside"] == "1" and default["env_after"] is None
    groups = default["manifest"]["artifacts"]
    ran_twice = {Path(g["neff"]).read_text().split("op=aten::")[1].split()[0] for g in groups if g["ntff"]}
    assert ran_twice == {"mul", "copy_"}  # the ops the naive RMSNorm runs twice per call
    # A model-mode NEFF that did not run in the window is information, not a problem.
    assert not any("no NTFF with id" in w for w in default["warnings"])
    assert sum("no NTFF with id" in n for n in default["notes"]) == len(groups) - len(ran_twice)


def test_explorer_metrics_and_insights_reach_every_surface(tmp_path):
    out = run_scenario("explorer_metrics", tmp_path)
    neuron = out["manifest"]["neuron"]
    explorer = neuron["explorer"]
    assert explorer["status"] == "ok" and explorer["executable"].endswith("neuron-explorer")
    assert any("--output-format summary-json" in c for c in explorer["commands"])
    m = explorer["metrics"]
    assert m["total_time_s"] > 0 and m["engine_active_percent"]["tensor"] > 0
    assert m["spill_reload_bytes"] == 300 and m["hbm_read_bytes"] == 1000
    rules = [f["rule"] for f in explorer["findings"]]
    assert "neuron_spill_reload_high" in rules
    spill = next(f for f in explorer["findings"] if f["rule"] == "neuron_spill_reload_high")
    assert spill["evidence"]["spill_reload_share"] == 0.3 and spill["evidence"]["threshold"] == 0.25 and spill["us_at_stake"] > 0
    # Summary (terminal) notes
    assert any(n.startswith("Neuron Explorer: device time ") and "MFU" in n for n in out["notes"])
    assert any(n.startswith("Neuron Explorer insight:") and "spill reloads are 30.0% of HBM reads" in n for n in out["notes"])
    # The system profile Explorer wrote: runtime/hardware events, host memory and CPU samples.
    system = neuron["system_profile"]
    assert system["path"].endswith("explorer/system_profile.json")
    assert system["events_by_lane"]["runtime"] > 0 and system["events_by_lane"]["hardware"] > 0
    assert system["host_memory"]["samples"] == 2 and system["host_memory"]["max_bytes"] > 0
    assert system["cpu_util"]["samples"] >= 1
    assert "explorer/summary.json" in out["files"] and "explorer/system_profile.json" in out["files"]
    # Spans: root attributes; lanes are not double counted by the system profile.
    spans = out["spans"]
    rootspan = next(s for s in spans if s["name"] == "explored")
    a = rootspan["attributes"]
    assert a["neuronscope.neuron.total_time_s"] == m["total_time_s"]
    assert a["neuronscope.neuron.mfu_percent"] == m["mfu_percent"]
    assert "neuron_spill_reload_high" in a["neuronscope.neuron.findings"]
    assert a["neuronscope.neuron.host_memory.max_bytes"] == system["host_memory"]["max_bytes"]
    lanes = [s for s in spans if s["attributes"].get("neuronscope.lane") == "runtime"]
    sched = next(s for s in lanes if s["name"] == "nrta_execute_schedule")
    assert sched["attributes"]["neuronscope.lane.count"] == 21  # 3 calls x 7, from the trace only
    assert not any(s["attributes"].get("neuronscope.lane") == "framework" for s in spans)
    # HTML
    assert 'id="neuron-device-a"' in out["html"] and 'data-rule="neuron_spill_reload_high"' in out["html"]
    assert "MFU" in out["html"]
    # Metrics
    util = {p["attributes"]["neuronscope.neuron.metric"]: p["value"] for p in out["metrics"]["neuronscope.neuron.utilization"]}
    # fractions with unit "1", as OpenTelemetry's *.utilization metrics
    assert util["mfu"] == pytest.approx(m["mfu_percent"] / 100)
    assert util["tensor_engine_active"] == pytest.approx(m["engine_active_percent"]["tensor"] / 100)
    io = {p["attributes"]["neuronscope.neuron.metric"]: p["value"] for p in out["metrics"]["neuronscope.neuron.memory.io"]}
    assert io["spill_reload"] == m["spill_reload_bytes"] and io["hbm_read"] == m["hbm_read_bytes"]
    assert out["metrics"]["neuronscope.neuron.host_memory.usage"][0]["count"] == 2
    assert out["metrics"]["neuronscope.neuron.cpu.utilization"][0]["count"] == system["cpu_util"]["samples"]


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


def test_the_diagnosis_reads_the_neuroncore_lane(full):
    """On the emulated device, busy time is the union of the NeuronCore executions; the
    root span carries the verdict."""
    d = full["diagnosis"]
    assert d["device"] == "neuron" and d["timeline"] == "device"
    lo, hi = d["window_start_ns"], d["window_end_ns"]
    intervals = sorted((max(s, lo), min(s + n, hi)) for s, n in full["kernels"])
    busy, reach = 0, lo
    for s, e in intervals:
        if e > max(s, reach):
            busy += e - max(s, reach)
            reach = max(reach, e)
    assert d["device_busy_us"] == pytest.approx(busy / 1e3, abs=0.01)
    assert d["device_busy_us"] + d["device_idle_us"] == pytest.approx((hi - lo) / 1e3, abs=0.01)
    assert sum(d["idle_us_by_class"].values()) == pytest.approx(d["device_idle_us"], abs=0.01)
    assert d["bound_by"] in ("device", "host", "launch", "sync", "data", "compile")
    root = next(s for s in full["spans"] if s["parent"] is None)
    assert root["attributes"]["neuronscope.bound_by"] == d["bound_by"]
    assert root["attributes"]["neuronscope.device_busy_pct"] == pytest.approx(d["device_busy_pct"], abs=0.01)
    # the naive RMSNorm's chain is found on the device too
    assert "elementwise_chain" in [f["rule"] for f in d["findings"]]
