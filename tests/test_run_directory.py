"""The run directory on disk: layout, permissions, manifest, and failure to write."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from workloads import rmsnorm_naive

import neuronscope as ns


def test_layout_permissions_and_manifest(xw, _isolated_runs):
    x, w = xw
    with ns.profile_neuron(name="my model/v2") as run:
        rmsnorm_naive(x, w)
    path = run.path
    # <output_dir>/<name>-<UTC time>-<pid>-<n>, name made filesystem-safe
    name, stamp, pid, n = path.name.rsplit("-", 3)
    assert name == "my_model_v2" and stamp.endswith("Z") and int(pid) == os.getpid() and int(n) >= 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(_isolated_runs.stat().st_mode) == 0o700
    for f in path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["schema_version"] == 1
    assert manifest["name"] == "my model/v2" and manifest["device"] == "cpu"
    assert manifest["torch_version"] == torch.__version__ and manifest["neuronscope_version"] == ns.__version__
    assert manifest["start_ns"] == run.start_ns < manifest["end_ns"] == run.end_ns
    assert {f["path"] for f in manifest["files"]} == {"summary.json", "trace.json.gz"}
    assert all(f["bytes"] > 0 for f in manifest["files"])
    assert "sampling" in manifest
    summary = ns.Summary.from_json((path / "summary.json").read_text())
    assert summary == run.summary


def test_output_dir_argument_beats_environment(xw, tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "env"))
    with ns.profile_neuron() as run:
        xw[0].sum()
    assert run.path.parent == tmp_path / "env"
    with ns.profile_neuron(output_dir=tmp_path / "arg") as run:
        xw[0].sum()
    assert run.path.parent == tmp_path / "arg"


def test_unwritable_output_dir_warns_once_and_keeps_the_summary(xw, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    target = blocker / "runs"  # cannot be created: a path component is a file
    with pytest.warns(RuntimeWarning, match="cannot write run directories") as record:
        for _ in range(3):
            with ns.profile_neuron(output_dir=target) as run:
                rmsnorm_naive(*xw)
        ns.flush(30)  # the run directory is made on the output worker: wait for the warning
    assert len(record) == 1
    assert run.wait(30) and run.status == ns.RunStatus.COMPLETE and run.path is None
    assert run.summary["aten::rsqrt"].calls == 1


def test_summary_json_round_trip_and_table(xw):
    with ns.profile_neuron() as run:
        with ns.region("forward"):
            rmsnorm_naive(*xw)
    s = run.summary
    again = ns.Summary.from_json(s.to_json())
    assert again == s and again.regions["forward"] == s.regions["forward"]
    text = str(s)
    assert "Self device" in text and "CPU op time" in text and "aten::mul" in text
    assert s.top(0) == [] and len(s.top(100)) == len(s)
    with pytest.raises(ValueError, match="top"):
        s.top(-1)
    with pytest.raises(KeyError, match="no op named"):
        s["aten::nothing"]
