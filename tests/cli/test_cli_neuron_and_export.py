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
x = torch.randn(4, 8)
print(float((x * x).sum()) >= 0)
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
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["capture"] == "neuron-inspect" and manifest["exit_code"] == 3
    # No Neuron hardware here: the runtime wrote nothing, and that is reported, not hidden.
    assert any("no NEFF/NTFF files were written" in w for w in manifest["warnings"])


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
    groups = {g["id"]: g for g in json.loads(result.stdout)}
    assert set(groups) == {"111", "222", "333", "444"}
    assert groups["111"]["layout"] == "session" and len(groups["111"]["ntff"]) == 2
    assert any("NeuronCore 1 was initialised but never ran" in p for p in groups["111"]["problems"])
    assert groups["222"]["layout"] == "model" and groups["222"]["problems"] == []
    assert groups["222"]["ntff"][0].endswith("222_instid_0_vnc_0.ntff")
    assert any("no NTFF with id 333" in p for p in groups["333"]["problems"])
    assert groups["444"]["neff"] is None and any("different compilations" in p for p in groups["444"]["problems"])
    text = _runner().invoke(cli, ["artifacts", str(tmp_path)])
    assert "neuron-explorer view -d " in text.stdout and "neuron-explorer view -n " in text.stdout
    missing = _runner().invoke(cli, ["artifacts", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "nope" in missing.stderr
