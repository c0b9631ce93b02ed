"""The run directory's format (sinks/run_format.py): a RunResult written and read back keeps
every field the format saves; the fields it does not save are named with the reason, and a
field added to the records fails here until it is one or the other."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope._trigger import Trigger
from neuronscope.analysis.explain import explain_diff
from neuronscope.analysis.ranks import rank_profile
from neuronscope.result import Analysis, Annotation, CaptureFacts, Coverage, RunResult
from neuronscope.sinks.run_format import FORMAT_VERSION, RUN_DIRECTORY, manifest_of, read_result, write_manifest

#: fields the format saves, each read back equal (how each is compared: below)
SAVED = {
    "RunResult.name", "RunResult.device", "RunResult.status", "RunResult.start_ns", "RunResult.end_ns",
    "RunResult.error", "RunResult.error_message", "RunResult.warnings", "RunResult.manifest", "RunResult.path",
    "Analysis.summary", "Analysis.diagnosis", "Analysis.memory", "Analysis.rank_profile", "Analysis.coverage",
    "Analysis.warnings",
    "CaptureFacts.trigger",
    "Annotation.baseline", "Annotation.explanation",
}  # fmt: skip
#: records inside the result: their own fields are checked
NESTED = {"RunResult.analysis", "RunResult.capture", "RunResult.annotation"}
#: fields the format does not save, and why
NOT_SAVED = {
    "Analysis.trace": "trace.json.gz is read on demand (Run.trace), not with the result",
    "Analysis.device": "its manifest fields are in manifest.json, its notes in the summary's",
    "CaptureFacts.otel_parent": "a live OpenTelemetry context means nothing in another process",
    "CaptureFacts.device_start": "the device's own samples: the memory report holds what they said",
    "CaptureFacts.device_end": "the device's own samples: the memory report holds what they said",
    "CaptureFacts.cpu_contention": "the diagnosis holds what it meant (Diagnosis.contention)",
    "Annotation.manifest": "merged into manifest.json",
}


def test_every_field_is_saved_or_named_as_not_saved():
    for cls in (RunResult, Analysis, CaptureFacts, Annotation):
        for f in dataclasses.fields(cls):
            name = f"{cls.__name__}.{f.name}"
            assert (name in SAVED) + (name in NESTED) + (name in NOT_SAVED) == 1, f"{name}: saved or not? say so above"


def _profiled(tmp_path: Path, name: str, size: int) -> ns.Run:
    x = torch.randn(size, size)
    with ns.profile_neuron(name=name, output_dir=tmp_path / "runs", memory=True) as run:
        for _ in range(4):
            with ns.region("step"):
                (x @ x).relu().sum()
            ns.step()
    assert run.wait(60) and run.result is not None
    return run


def _json(value):
    return json.loads(json.dumps(value, default=str))


def test_a_result_with_every_field_set_reads_back_equal(tmp_path):
    before, after = _profiled(tmp_path, "before", 32), _profiled(tmp_path, "after", 96)
    live = after.result
    assert live.analysis is not None and live.memory is not None and live.diagnosis is not None
    explanation = explain_diff(before.summary, after.summary, before.diagnosis, after.diagnosis)
    trigger = Trigger(kind="slow", reason="call 3 took 5.0 ms > p99 1.0 ms", call_ms=5.0, threshold_ms=1.0, key="batch-8")
    coverage = Coverage(
        wall_ns=2_000_000, recorded_ns=1_500_000, events=len(after.trace), stopped="budget", max_events=100,
        budget_source="max_events", steps=4, recorded_steps=3, overhead_ns=1000, overhead_basis="steps",
    )  # fmt: skip
    where = tmp_path / "copy"
    where.mkdir()
    result = dataclasses.replace(
        live,
        status="error",
        error="Boom",
        error_message="boom at step 3",
        warnings=("first warning", "second warning"),
        path=where,
        capture=CaptureFacts(trigger=trigger),
        annotation=Annotation(
            manifest={"baseline": str(before.path), "explanation": explanation.to_dict()},
            baseline=before.path,
            explanation=explanation,
        ),
        analysis=dataclasses.replace(live.analysis, rank_profile=rank_profile(after.trace), coverage=coverage),
    )
    extra = {"rank": 0, "world_size": 1}
    result = dataclasses.replace(
        result,
        manifest=manifest_of(
            result, window=None, events=len(after.trace), segments=1, backend={"device": "cpu"}, sampling={}, extra=extra
        ),
    )
    RUN_DIRECTORY.export(result)
    written = write_manifest(result)
    read = read_result(where)

    for name in ("name", "device", "status", "start_ns", "end_ns", "error", "error_message", "warnings", "path"):
        assert getattr(read, name) == getattr(result, name), name
    assert read.manifest == _json(written.manifest) and read.manifest["files"] and read.manifest["rank"] == 0
    assert read.analysis is not None
    assert read.analysis.summary.to_dict() == result.summary.to_dict()
    assert read.analysis.diagnosis.to_dict() == result.diagnosis.to_dict()
    assert read.analysis.memory.to_dict() == result.memory.to_dict()
    assert read.analysis.rank_profile == _json(result.analysis.rank_profile)
    assert read.analysis.coverage == coverage
    assert read.analysis.warnings == result.warnings  # the run's warnings are the analysis' when read back
    assert read.capture.trigger == trigger
    assert read.annotation.baseline == before.path
    assert read.annotation.explanation.to_dict() == explanation.to_dict()


def test_the_live_run_reads_back_as_it_was_written(tmp_path):
    run = _profiled(tmp_path, "live", 48)
    live, read = run.result, read_result(run.path)
    assert read.manifest == _json(live.manifest)
    assert read.diagnosis.to_dict() == live.diagnosis.to_dict() and read.diagnosis.memory_line
    assert read.memory.to_dict() == live.memory.to_dict()
    assert read.summary.to_dict() == live.summary.to_dict()
    assert sorted(f["path"] for f in read.manifest["files"]) == ["summary.json", "trace.json.gz"]


def test_a_newer_format_is_read_with_a_warning(tmp_path):
    run = _profiled(tmp_path, "newer", 16)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["schema_version"] == FORMAT_VERSION
    (run.path / "manifest.json").write_text(json.dumps({**manifest, "schema_version": FORMAT_VERSION + 1}))
    read = read_result(run.path)
    assert read.summary.to_dict() == run.summary.to_dict()
    assert [w for w in read.warnings if f"format {FORMAT_VERSION + 1}" in w]


@pytest.mark.parametrize("broken", ["no manifest", "not ours"])
def test_what_is_not_a_run_directory_is_named(tmp_path, broken):
    if broken == "not ours":
        (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(ns.TraceLoadError, match="manifest"):
        read_result(tmp_path)
