"""`run --neuron-inspect`, `run --otlp-endpoint`, `export` and `artifacts`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from support.otlp_receiver import OtlpReceiver

from neuronscope.cli import cli

SCRIPT = """
import os, sys, torch
print("inspect=" + os.environ.get("NEURON_RT_INSPECT_ENABLE", "-"), "dir=" + os.environ.get("NEURON_RT_INSPECT_OUTPUT_DIR", "-"))
print(" ".join(f"{k}={os.environ.get(k, '-')}" for k in (
    "NEURON_RT_INSPECT_SYSTEM_PROFILE", "NEURON_RT_INSPECT_DEVICE_PROFILE", "NEURON_RT_INSPECT_CPU_UTIL", "NEURON_RT_INSPECT_HOST_MEMORY")))
x = torch.randn(4, 8)
print(float((x * x).sum()) >= 0)
sys.stderr.write("script: first\\n"); sys.stderr.flush()
# what the Neuron runtime prints when its trace buffer overflowed (troubleshooting.rst)
os.write(2, b"Warning: 42 trace events were dropped during capture (stored 100 out of 142 total events).\\n")
sys.stderr.write("script: last\\n")
sys.exit(3)
"""


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 separates stderr by default
        return CliRunner()


def test_neuron_inspect_runs_the_script_in_a_child_with_the_runtime_variables(tmp_path):
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "run", "--neuron-inspect", "--output-dir", str(out), str(script)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3  # the script's exit code
    run_dir = next(out.iterdir())
    assert f"inspect=1 dir={run_dir / 'neuron'}" in proc.stdout
    # how-to-profile-workload.rst: CPU and host-memory samples keep the system profile complete
    assert ("NEURON_RT_INSPECT_SYSTEM_PROFILE=1 NEURON_RT_INSPECT_DEVICE_PROFILE=session "
            "NEURON_RT_INSPECT_CPU_UTIL=1 NEURON_RT_INSPECT_HOST_MEMORY=1") in proc.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["capture"] == "neuron-inspect" and manifest["exit_code"] == 3
    # No Neuron hardware here: the runtime wrote nothing, and that is reported, not hidden.
    assert any("no NEFF/NTFF files were written" in w for w in manifest["warnings"])
    # The child's stderr is passed through whole and in order, and scanned.
    lines = proc.stderr.splitlines()
    first, dropped, last = (lines.index(x) for x in (
        "script: first", "Warning: 42 trace events were dropped during capture (stored 100 out of 142 total events).", "script: last"))
    assert first < dropped < last
    assert manifest["neuron"]["dropped_events"]["dropped"] == 42
    problem = next(w for w in manifest["warnings"] if "trace events were dropped" in w)
    assert "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC" in problem
    assert f"warning: {problem}" in proc.stderr
    assert manifest["neuron"]["inspect_env"]["NEURON_RT_INSPECT_CPU_UTIL"] == "1"


def test_neuron_inspect_keeps_the_users_own_inspect_settings(tmp_path):
    import os
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, NEURON_RT_INSPECT_CPU_UTIL="0", NEURON_RT_INSPECT_DEVICE_PROFILE="model")
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "run", "--neuron-inspect", "-o", str(tmp_path / "runs"), str(script)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert "NEURON_RT_INSPECT_DEVICE_PROFILE=model NEURON_RT_INSPECT_CPU_UTIL=0 NEURON_RT_INSPECT_HOST_MEMORY=1" in proc.stdout


def test_run_with_otlp_endpoint_sends_the_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    script = tmp_path / "job.py"
    script.write_text("import torch\nprint(float(torch.ones(3).sum()))\n")
    with OtlpReceiver("http") as rx:
        result = _runner().invoke(cli, ["run", "--otlp-endpoint", rx.endpoint, "--output-dir", str(tmp_path / "r"), str(script)])
        assert result.exit_code == 0, result.output
        spans = rx.wait_for_spans(2, timeout=20)
    assert any(s["name"] == "job" for s in spans)
    import neuronscope as ns

    ns.configure(exporter="auto", otlp_endpoint=None)


def test_export_replays_a_saved_run(tmp_path, monkeypatch):
    import neuronscope as ns

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    ns.configure(exporter="none")
    with ns.profile_neuron(name="saved", output_dir=tmp_path) as run:
        ns.region("r").__enter__()
        __import__("torch").ones(4).sum()
        ns.region("r")  # noqa: B018
    run.wait(30)
    try:
        with OtlpReceiver("http") as rx:
            result = _runner().invoke(cli, ["export", "--otlp-endpoint", rx.endpoint, str(run.path)])
            assert result.exit_code == 0, result.output
            spans = rx.wait_for_spans(2, timeout=20)
        root = next(s for s in spans if s["name"] == "saved")
        assert root["start_time_unix_nano"] == run.start_ns and root["end_time_unix_nano"] == run.end_ns
        assert result.stdout.strip().endswith(root["trace_id"])
        bad = _runner().invoke(cli, ["export", str(run.path)], env={"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
        assert bad.exit_code == 2 and "--otlp-endpoint" in bad.stderr
    finally:
        ns.configure(exporter="auto", otlp_endpoint=None)


def _layouts(root: Path) -> None:
    session = root / "i-0abc_pid_7" / "20260101_000000_000001"
    session.mkdir(parents=True)
    (session / "neff_111_vnc_0.neff").write_bytes(b"neff")
    (session / "profile_nc_0_session_0.ntff").write_bytes(b"ntff")
    (session / "profile_nc_1_session_0.ntff").write_bytes(b"")
    (session / "ntrace.pb").write_bytes(b"x")
    model = root / "i-0abc_pid_8"
    model.mkdir()
    (model / "neff_222.neff").write_bytes(b"neff")
    (model / "222_instid_0_vnc_0.ntff").write_bytes(b"ntff")
    (model / "neff_333.neff").write_bytes(b"neff")
    (model / "444_instid_0_vnc_0.ntff").write_bytes(b"ntff")


def test_artifacts_json_pairs_both_layouts_and_names_the_problems(tmp_path):
    _layouts(tmp_path)
    result = _runner().invoke(cli, ["artifacts", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["directory"] == str(tmp_path)
    groups = {g["id"]: g for g in data["groups"]}
    assert set(groups) == {"111", "222", "333", "444"}
    assert groups["111"]["layout"] == "session" and len(groups["111"]["ntff"]) == 2
    assert groups["111"]["problems"] == []  # one idle core of two: expected (troubleshooting.rst)
    assert groups["222"]["layout"] == "model" and groups["222"]["problems"] == []
    assert groups["222"]["ntff"][0].endswith("222_instid_0_vnc_0.ntff")
    assert groups["333"]["problems"] == [] and any("no NTFF with id 333" in n for n in groups["333"]["notes"])
    assert groups["444"]["neff"] is None and any("different compilation" in p for p in groups["444"]["problems"])
    text = _runner().invoke(cli, ["artifacts", str(tmp_path)])
    assert f"open in Neuron Explorer: neuron-explorer view -d {tmp_path}\n" in text.stdout
    assert "neuron-explorer view -n " in text.stdout and "--ingest-only --display-name" in text.stdout
    # everything the text shows is in the JSON: problems (a group's prefixed with its NEFF), notes, commands
    assert any(p.startswith("444") and "different compilation" in p for p in data["problems"])
    note = next(n for n in data["notes"] if "empty NTFF" in n)
    assert "NeuronCore 1 was initialised but never ran" in note and f"note: {note}\n" in text.stdout
    assert any("no NTFF with id 333" in n for n in data["notes"]) and "note: no NTFF with id 333" in text.stdout
    assert data["explorer_commands"] and all(f"open in Neuron Explorer: {c}\n" in text.stdout for c in data["explorer_commands"])
    missing = _runner().invoke(cli, ["artifacts", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "nope" in missing.stderr


def test_artifacts_never_offers_a_pair_view_of_an_empty_ntff(tmp_path):
    """`neuron-explorer view -n NEFF -s NTFF` fails on a 0-byte NTFF (an idle core's)."""
    model = tmp_path / "i-0abc_pid_9"
    model.mkdir()
    (model / "neff_222.neff").write_bytes(b"neff")
    (model / "222_instid_0_vnc_0.ntff").write_bytes(b"")  # core 0 idle for this NEFF
    (model / "222_instid_0_vnc_1.ntff").write_bytes(b"ntff")
    (model / "neff_333.neff").write_bytes(b"neff")
    (model / "333_instid_0_vnc_0.ntff").write_bytes(b"")  # never ran on a captured core
    data = json.loads(_runner().invoke(cli, ["artifacts", str(tmp_path), "--json"]).stdout)
    pairs = [c for c in data["explorer_commands"] if " -n " in c]
    assert pairs == [f"neuron-explorer view -n {model / 'neff_222.neff'} -s {model / '222_instid_0_vnc_1.ntff'}"]
    text = _runner().invoke(cli, ["artifacts", str(tmp_path)]).stdout
    assert "333_instid_0_vnc_0.ntff  (empty)" in text and "-s " + str(model / "333_instid_0_vnc_0.ntff") not in text
    assert any("2 empty NTFFs" in n for n in data["notes"])


def test_artifacts_of_a_run_directory_reports_its_dropped_events(tmp_path):
    """What only the capture saw (the runtime's dropped-events message) comes from the manifest."""
    _layouts(tmp_path / "neuron")
    dropped = {"dropped": 18, "stored": 3, "total": 21, "line": "Warning: 18 trace events were dropped"}
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 1, "neuron": {"modes": ["device"], "dropped_events": dropped}}))
    data = json.loads(_runner().invoke(cli, ["artifacts", str(tmp_path), "--json"]).stdout)
    assert data["dropped_events"] == dropped
    problem = next(p for p in data["problems"] if "dropped" in p)
    assert "18 trace events were dropped during capture (stored 3 of 21)" in problem
    assert f"! {problem}\n" in _runner().invoke(cli, ["artifacts", str(tmp_path / "neuron")]).stdout  # the raw dir too
