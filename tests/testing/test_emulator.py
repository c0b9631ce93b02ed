"""neuronscope.testing: the emulated Neuron device, through real torch.profiler runs.

Installing the emulator renames PyTorch's PrivateUse1 backend for the rest of the
process, so every scenario runs in its own interpreter (``emulator_scenarios.py``)
and reports JSON; the assertions live here. The C++ extension is built once, into
``$NEURONSCOPE_EMULATOR_BUILD_DIR`` or the default cache, by the first fixture.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import neuronscope.testing as nt

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "emulator_scenarios.py"
TRACE_DATA = HERE.parent / "data" / "emulated_neuron_rmsnorm.trace.json.gz"
SRC_ROOT = Path(nt.__file__).resolve().parents[2]

NEFF_ID = r"\d{15}"
INSTANCE_DIR = re.compile(r"^i-[0-9a-f]{17}_pid_(\d+)$")
TIMESTAMP_DIR = re.compile(r"^\d{8}_\d{6}_\d{6}$")
# The naive RMSNorm, per call, executes (attribution="leaf") on CPU:
# pow, mean -> sum -> fill_, mean -> div_ -> ... -> copy_, add -> ... -> copy_, rsqrt, mul, mul
KERNELS_PER_CALL = 7
DISTINCT_NEFFS = {"pow", "fill_", "copy_", "rsqrt", "mul"}


def _env(build_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_ROOT), env.get("PYTHONPATH")) if p)
    env["NEURONSCOPE_EMULATOR_BUILD_DIR"] = str(build_dir)
    env.pop("NEURON_RT_NUM_CORES", None)
    return env


@pytest.fixture(scope="session")
def emulator_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build (or load from cache) the extension once for the whole test session."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler: the Neuron emulator extension cannot be built")
    build_dir = nt.default_build_dir()
    proc = subprocess.run(
        [sys.executable, "-c", "from neuronscope.testing import install_emulated_neuron as i; print(i().build_dir)"],
        env=_env(build_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"building the emulator failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return build_dir


@pytest.fixture(scope="session")
def scenario(emulator_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """``scenario(name)`` -> the scenario's JSON result (each run once per session)."""
    cache: dict[str, dict[str, Any]] = {}

    def run(name: str) -> dict[str, Any]:
        if name not in cache:
            work = tmp_path_factory.mktemp(name)
            proc = subprocess.run(
                [sys.executable, str(SCENARIOS), name, str(work)],
                env=_env(emulator_build),
                capture_output=True,
                text=True,
                timeout=300,
                cwd=work,
            )
            assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            cache[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        return cache[name]

    return run


# --------------------------------------------------------------------------- in-process


def test_install_rejects_bad_arguments_before_touching_torch() -> None:
    with pytest.raises(ValueError, match="layout"):
        nt.install_emulated_neuron(layout="flat")
    with pytest.raises(ValueError, match="attribution"):
        nt.install_emulated_neuron(attribution="root")


def test_default_build_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONSCOPE_EMULATOR_BUILD_DIR", str(tmp_path))
    assert nt.default_build_dir() == tmp_path
    monkeypatch.delenv("NEURONSCOPE_EMULATOR_BUILD_DIR")
    import torch

    assert nt.default_build_dir().name == f"emulator-{torch.__version__}"


# --------------------------------------------------------------------------- key_averages


def test_key_averages_shows_neuron_columns_and_leaf_device_time(scenario) -> None:
    r = scenario("session")
    assert r["use_device"] == "neuron"
    assert "Self NEURON" in r["table"] and "NEURON total" in r["table"]
    mul = r["rows"]["aten::mul"]
    assert mul["count"] == 4  # two calls x (x * rsqrt(..)) * w
    assert mul["self_device_us"] > 0
    assert r["rows"]["aten::rsqrt"]["self_device_us"] > 0
    # Containers and non-device ops get none of their own.
    for name in ("aten::mean", "aten::empty_strided", "aten::result_type"):
        assert r["rows"][name]["self_device_us"] == 0, name


def test_device_time_is_counted_once(scenario) -> None:
    r = scenario("session")
    kernel_us = sum(k["dur_ns"] for k in r["kernels"]) / 1000
    assert kernel_us > 0
    assert r["cpu_self_device_us"] == pytest.approx(kernel_us, rel=1e-6, abs=1e-3)
    # The hardware lane mirrors every kernel but is linked to nothing.
    assert len(r["annotations"]) == len(r["kernels"])
    assert all(a["name"] == "nc_exec_running" and a["linked"] == 0 for a in r["annotations"])
    assert r["rows"]["nc_exec_running"]["device_type"] == r["kernels"][0]["device_type"]


def test_kernel_duration_is_ratio_of_op_cpu_time(scenario) -> None:
    r = scenario("session")
    for k in r["kernels"]:
        name, start, dur = r["cpu_ops"][str(k["linked"])]
        assert abs(k["dur_ns"] - max(1, round(0.5 * dur))) <= 1, k
        assert k["start_ns"] >= start  # launched by the op, never before it
        assert k["name"].endswith(":" + name.split("::", 1)[1])


# --------------------------------------------------------------------------- kineto events


def test_device_events_are_privateuse1_and_linked_to_their_op(scenario) -> None:
    r = scenario("session")
    assert len(r["kernels"]) == 2 * KERNELS_PER_CALL
    for k in r["kernels"]:
        assert k["is_privateuse1"] and k["device_index"] == 0
        assert k["activity_type"] == "kernel"
        assert re.fullmatch(rf"neff_{NEFF_ID}:\w+", k["name"])
        assert str(k["linked"]) in r["cpu_ops"]
    assert {k["name"].split(":")[1] for k in r["kernels"]} == DISTINCT_NEFFS


def test_runtime_events_on_host(scenario) -> None:
    r = scenario("session")
    assert len(r["runtime"]) == len(r["kernels"])
    kernel_links = sorted(k["linked"] for k in r["kernels"])
    assert sorted(e["linked"] for e in r["runtime"]) == kernel_links
    for e in r["runtime"]:
        assert e["name"] == "nrta_execute_schedule"
        assert e["activity_type"] == "privateuse1_runtime"
        assert not e["is_privateuse1"]
        _, start, dur = r["cpu_ops"][str(e["linked"])]
        assert start <= e["start_ns"] and e["start_ns"] + e["dur_ns"] <= start + dur


def test_cpu_only_profiling_has_no_device_events_or_files(scenario) -> None:
    r = scenario("limits")["cpu_only"]
    assert r["kernels"] == 0 and r["annotations"] == 0
    assert r["cpu_self_device_us"] == 0
    assert r["files"] == {}
    assert r["use_device"] is None
    # Kineto still asks for PRIVATEUSE1_RUNTIME with CPU alone (like CUDA runtime rows).
    assert r["runtime"] == 2 * KERNELS_PER_CALL


# --------------------------------------------------------------------------- raw files


def _split(files: dict[str, int]) -> tuple[set[str], set[str], dict[str, int]]:
    instance_dirs = {p.split("/")[0] for p in files}
    session_dirs = {p.split("/")[1] for p in files if p.count("/") >= 2}
    leaf = {p.rsplit("/", 1)[1]: size for p, size in files.items()}
    return instance_dirs, session_dirs, leaf


def test_session_layout(scenario) -> None:
    r = scenario("session")
    instances, sessions, leaf = _split(r["files"])
    assert len(instances) == 1 and len(sessions) == 1
    (instance,) = instances
    m = INSTANCE_DIR.match(instance)
    assert m and int(m.group(1)) == r["pid"]
    assert TIMESTAMP_DIR.match(next(iter(sessions)))
    assert r["session_dir"] == f"{instance}/{next(iter(sessions))}"
    assert r["exported"] == [f"{r['session_dir']}/trace.json"]  # NeuronProfiler.export_trace

    neffs = {n for n in leaf if n.endswith(".neff")}
    assert all(re.fullmatch(rf"neff_{NEFF_ID}_vnc_0\.neff", n) for n in neffs)
    assert {n[5:20] for n in neffs} == {k["name"][5:20] for k in r["kernels"]}
    assert len(neffs) == len(DISTINCT_NEFFS)
    expected = neffs | {
        "profile_nc_0_session_0.ntff",
        "profile_nc_1_session_0.ntff",
        "ntrace.pb",
        "trace_info.pb",
        "cpu_util.pb",
        "host_mem.pb",
        "trace.json",
    }
    assert set(leaf) == expected
    # Captured core 1 never ran: an empty NTFF, as on hardware. Everything else has content.
    assert leaf["profile_nc_1_session_0.ntff"] == 0
    assert all(size > 0 for name, size in leaf.items() if name != "profile_nc_1_session_0.ntff")


def test_model_layout_pairs_neff_and_ntff(scenario) -> None:
    r = scenario("model_layout")["model"]
    assert r["kernels"] == 2 * KERNELS_PER_CALL
    instances, sessions, leaf = _split(r["files"])
    assert len(instances) == 1 and INSTANCE_DIR.match(next(iter(instances)))
    assert sessions == set()  # DEVICE only: no system-profile subdirectory
    neff_ids = {m.group(1) for n in leaf if (m := re.fullmatch(rf"neff_({NEFF_ID})\.neff", n))}
    ntff_ids = {m.group(1) for n in leaf if (m := re.fullmatch(rf"({NEFF_ID})_instid_0_vnc_0\.ntff", n))}
    assert len(neff_ids) == len(DISTINCT_NEFFS)
    assert neff_ids == ntff_ids and len(leaf) == 2 * len(neff_ids)
    assert all(size > 0 for size in leaf.values())


def test_layout_can_change_between_profiles(scenario) -> None:
    r = scenario("model_layout")["session"]
    instances, sessions, leaf = _split(r["files"])
    assert len(sessions) == 1 and TIMESTAMP_DIR.match(next(iter(sessions)))
    assert "profile_nc_0_session_0.ntff" in leaf
    assert not any(n.endswith("_instid_0_vnc_0.ntff") for n in leaf)


def test_device_mode_off_writes_no_neff_or_ntff(scenario) -> None:
    _, _, leaf = _split(scenario("limits")["runtime_only"]["files"])
    assert set(leaf) == {"ntrace.pb", "trace_info.pb"}


def test_config_values_survive_kineto_parsing(scenario) -> None:
    # '#', '=' and ';' in profile_output_dir would break Kineto's CUSTOM_CONFIG line.
    _, _, leaf = _split(scenario("limits")["odd_path"]["files"])
    assert set(leaf) == {"ntrace.pb", "trace_info.pb"}


def test_core_not_captured_gets_no_device_events(scenario) -> None:
    r = scenario("limits")["nc1_only"]
    assert r["kernels"] == 0
    _, _, leaf = _split(r["files"])
    assert leaf["profile_nc_1_session_0.ntff"] == 0
    assert not any(n.endswith(".neff") for n in leaf)


def test_events_past_max_events_per_nc_overwrite_the_oldest_and_the_runtime_says_so(scenario) -> None:
    r = scenario("limits")["dropped"]
    total = 2 * KERNELS_PER_CALL
    assert len(r["kernels"]) == 3
    assert len(r["runtime"]) == total  # host side is not limited
    assert r["info"]["events_dropped"] == str(total - 3)
    # A ring buffer: the newest executions are the ones kept (troubleshooting.rst).
    newest = [e["linked"] for e in sorted(r["runtime"], key=lambda e: e["start_ns"])[-3:]]
    assert sorted(k["linked"] for k in r["kernels"]) == sorted(newest)
    # The documented sentence, written to fd 2 by native code; no file of the emulator's own.
    assert (
        f"Warning: {total - 3} trace events were dropped during capture (stored 3 out of {total} total events)."
        in r["stderr"]
    )
    _, _, leaf = _split(r["files"])
    assert not any(n.endswith(".json") and n != "trace.json" for n in leaf) and leaf["profile_nc_0_session_0.ntff"] > 0
    assert f"capture stored=3 total={total} dropped={total - 3} max_events_per_nc=3" in r["ntrace"]
    assert r["ntrace"].count("event nrta_execute_schedule ") == total and r["ntrace"].count("event nc_exec_running ") == 3


# --------------------------------------------------------------------------- fake neuron-explorer

# Field sets as the Neuron docs print them (archive/profiler/neuron-profiler-2-0-beta-user-guide.rst).
RUNTIME_EVENT_FIELDS = {"duration", "group", "id", "instance_id", "lnc_idx", "name", "parent_id", "process_id", "thread_id", "timestamp", "type"}
FRAMEWORK_EVENT_FIELDS = {"duration", "group", "id", "instance_id", "name", "process_id", "thread_id", "timestamp", "type"}
MEM_FIELDS = {"duration", "instance_id", "percent_usage", "timestamp", "usage"}
CPU_FIELDS = {"cpu_id", "duration", "instance_id", "timestamp", "util"}


def test_fake_explorer_summary_json_has_the_documented_fields(scenario) -> None:
    r = scenario("fake_explorer")
    assert r["version"]["rc"] == 0 and "neuron-explorer" in r["version"]["stdout"]
    assert r["summary"]["rc"] == 0
    doc = json.loads(r["summary"]["stdout"])
    # One device profile per non-empty NTFF: core 1 was captured but never ran.
    assert len(doc) == 1 and next(iter(doc)).endswith("profile_nc_0_session_0")
    fields = next(iter(doc.values()))
    for name in ("total_time", "mfu_estimated_percent", "hfu_estimated_percent", "mbu_estimated_percent", "hbm_read_bytes",
                 "spill_reload_bytes", "dma_active_time", "tensor_engine_active_time_percent", "cc_op_active_time_percent",
                 "model_flops", "hardware_flops", "transpose_flops"):
        assert name in fields, name
    assert fields["total_time"] == pytest.approx(r["ntff_span_s"])
    new = next(iter(json.loads(r["summary_234"]["stdout"]).values()))
    assert "mbu_estimated_percent" not in new and new["hbm_mbu_estimated_percent"] == fields["mbu_estimated_percent"]
    assert new["instruction_hbm_read_bytes"] == fields["hbm_read_bytes"] and "packet_hbm_read_bytes" in new
    assert next(iter(json.loads(r["summary_file"]).values()))["spill_reload_bytes"] == 7
    # Processing a capture that dropped events prints Explorer's documented warning.
    assert "WARN[0000] Warning: 9 trace events were dropped during capture (stored 5 out of 14 total events)." in r["summary"]["stderr"]


def test_fake_explorer_json_is_the_documented_system_profile(scenario) -> None:
    from neuronscope.sinks.otel.lanes import load_system_profile

    r = scenario("fake_explorer")
    assert r["json"]["rc"] == 0, r["json"]["stderr"]
    doc = r["system_profile"]
    assert set(doc) == {"trace_events", "mem_usage", "cpu_util"}
    runtime = [e for e in doc["trace_events"] if e["group"].startswith("nrt-nc-")]
    framework = [e for e in doc["trace_events"] if e["group"].startswith("framework-")]
    assert runtime and framework
    assert all(set(e) == RUNTIME_EVENT_FIELDS for e in runtime)
    assert all(set(e) == FRAMEWORK_EVENT_FIELDS and e["type"] == 99999 for e in framework)
    assert {e["name"] for e in runtime} == {"nrta_execute_schedule", "nc_exec_running"}
    assert sum(e["name"] == "nc_exec_running" for e in runtime) == len(r["kernels"])  # dropped ones are gone
    assert all(set(m) == MEM_FIELDS for m in doc["mem_usage"]) and len(doc["mem_usage"]) == 2
    assert all(set(c) == CPU_FIELDS for c in doc["cpu_util"]) and doc["cpu_util"]
    assert r["device_profiles"]  # device_profile_model_<id>.json next to it
    # neuronscope's reader takes it as it is
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(doc, fh)
    profile = load_system_profile(fh.name)
    assert len(profile.events) == len(doc["trace_events"]) and profile.facts()["host_memory"]["samples"] == 2
    os.unlink(fh.name)


def test_fake_explorer_cli_upload_and_errors(scenario) -> None:
    r = scenario("fake_explorer")
    assert r["ingest"]["rc"] == 0 and "my-profile-run" in r["ingest"]["stdout"]
    assert r["missing"]["rc"] == 1 and "No profiling data" in r["missing"]["stderr"]


# --------------------------------------------------------------------------- lifecycle


def test_repeated_sessions_in_one_process(scenario) -> None:
    runs = scenario("lifecycle")["repeat"]
    assert [x["kernels"] for x in runs] == [2 * KERNELS_PER_CALL] * 3
    assert len({x["session_dir"] for x in runs}) == 3


def test_schedule_cycles(scenario) -> None:
    r = scenario("lifecycle")
    assert [c["kernels"] for c in r["schedule"]] == [2 * KERNELS_PER_CALL] * 2
    assert len(r["schedule_dirs"]) == 2


def test_backward_ops_get_device_time(scenario) -> None:
    r = scenario("lifecycle")["backward"]
    assert r["kernels_in_backward"] > 0
    assert r["kernels"] > r["kernels_in_backward"]  # forward ones too
    assert r["cpu_self_device_us"] == pytest.approx(r["kernel_us"], rel=1e-6, abs=1e-3)


def test_backend_attribution_executes_outermost_backend_op(scenario) -> None:
    r = scenario("lifecycle")["backend"]
    rows = r["rows"]
    for name in ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"):
        assert rows[name]["self_device_us"] > 0, name
    for name in ("aten::sum", "aten::fill_", "aten::div_", "aten::copy_"):
        assert rows[name]["device_us"] == 0, name
    assert r["cpu_self_device_us"] == pytest.approx(r["kernel_us"], rel=1e-6, abs=1e-3)
    assert r["min_self_cpu_us"] >= 0  # runtime events nest under their op only


def test_fake_torch_neuronx_modules(scenario) -> None:
    assert scenario("session")["markers"] == {
        "torch_neuronx": True,
        "profiling": True,
        "torch.neuron": True,
        "backend_name": "neuron",
        "is_experimental_config": True,
    }


# --------------------------------------------------------------------------- kept trace


def test_kept_chrome_trace_links_kernels_to_ops() -> None:
    trace = json.loads(gzip.decompress(TRACE_DATA.read_bytes()))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ops = {e["args"]["External id"]: e for e in events if e["cat"] == "cpu_op"}
    kernels = [e for e in events if e["cat"] == "kernel"]
    runtime = [e for e in events if e["cat"] == "privateuse1_runtime"]
    assert kernels and len(runtime) == len(kernels)
    for k in kernels:
        op = ops[k["args"]["External id"]]
        assert k["name"].endswith(":" + op["name"].split("::", 1)[1])
    assert any(e["cat"] == "gpu_user_annotation" and e["name"] == "nc_exec_running" for e in events)
