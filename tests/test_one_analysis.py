"""One analysis (analysis/analyse.py): the API, the reports and the capture give one answer for
one trace — the memory findings joined to the diagnosis the same way — and a report renders
the result it is given without analysing anything again."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import neuronscope as ns
from neuronscope.analysis import analyse as analyse_module
from neuronscope.report.html import render_html
from neuronscope.report.sources import open_source


@pytest.fixture(scope="module")
def memory_trace(tmp_path_factory):
    """A Kineto trace recorded with profile_memory=True: allocations that grow step by step."""
    kept = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        for _ in range(6):
            with torch.profiler.record_function("ProfilerStep#x"):
                kept.append(torch.randn(256, 256) @ torch.randn(256, 256))
    path = tmp_path_factory.mktemp("memory") / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_the_api_and_show_give_one_diagnosis_with_the_memory_findings(memory_trace):
    from cli._profiles import cli_runner

    from neuronscope.cli import cli

    diagnosis, memory = ns.diagnose(memory_trace), ns.diagnose_memory(memory_trace)
    out = cli_runner().invoke(cli, ["show", "--json", str(memory_trace)])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    assert shown["diagnosis"] == json.loads(json.dumps(diagnosis.to_dict()))
    assert shown["memory"] == json.loads(json.dumps(memory.to_dict()))
    # the memory findings are in the diagnosis, once: the report's headline is its memory line
    assert diagnosis.memory_line == memory.headline()
    trace = ns.load_trace(memory_trace)
    from neuronscope.analysis.memory import analyse_memory

    _, memory_findings = analyse_memory(trace, trace.memory)
    messages = [f.message for f in diagnosis.findings]
    assert memory_findings and diagnosis.memory_line  # the trace grows: there is something to join
    for finding in memory_findings:
        assert messages.count(finding.message) == 1


def test_a_report_renders_a_saved_run_without_analysing_it_again(tmp_path, monkeypatch):
    x = torch.randn(64, 64)
    with ns.profile_neuron(name="saved", output_dir=tmp_path) as run:
        for _ in range(3):
            (x @ x).relu()
            ns.step()
    assert run.wait(60) and run.path is not None
    saved = run.diagnosis.to_dict()

    def no_analysis(*args, **kwargs):
        raise AssertionError("a report analysed the trace again")

    monkeypatch.setattr(analyse_module, "analyse", no_analysis)
    source = open_source(run.path)
    assert source.diagnosis.to_dict() == saved  # read from summary.json, as written
    page = render_html(source)
    assert run.diagnosis.headline()[0].split(":")[0] in page


def test_the_live_headline_is_the_saved_runs_headline(tmp_path):
    """summary.json rounds the busy share to 2 places: live 94.5049 % read "95%" and the saved
    94.5 % read "94%" (under load a report's page once lacked the live headline). The analysis
    hands out its diagnosis as saved."""
    from dataclasses import replace

    from neuronscope.analysis.diagnosis.model import Diagnosis

    x = torch.randn(64, 64)
    with ns.profile_neuron(name="rounded", output_dir=tmp_path) as run:
        (x @ x).relu()
    assert run.wait(60)
    live = run.diagnosis
    saved = Diagnosis.from_dict(json.loads((run.path / "summary.json").read_text())["diagnosis"])
    assert live == saved and live.headline() == saved.headline()
    edge = replace(live, device_busy_pct=94.5049)
    assert " 95%" in edge.headline()[0]  # the premise: unrounded, it reads 95 %
    assert " 94%" in edge.as_saved().headline()[0]
    assert edge.as_saved().headline() == Diagnosis.from_dict(json.loads(json.dumps(edge.to_dict()))).headline()


def test_a_saved_run_without_its_diagnosis_gets_the_one_analysis_of_its_trace(tmp_path):
    x = torch.randn(64, 64)
    with ns.profile_neuron(name="old", output_dir=tmp_path) as run:
        for _ in range(3):
            (x @ x).relu()
            ns.step()
    assert run.wait(60) and run.path is not None
    summary_file = run.path / "summary.json"
    data = json.loads(summary_file.read_text())
    del data["diagnosis"]  # a run saved before diagnoses were, or whose diagnosis failed
    summary_file.write_text(json.dumps(data))
    loaded = ns.load_run(run.path)
    assert loaded.diagnosis is None
    from neuronscope.analysis.diagnosis import diagnose_trace

    expected = diagnose_trace(loaded.trace, summary=loaded.summary, facts=dict(loaded.manifest))
    assert open_source(run.path).diagnosis.to_dict() == expected.to_dict() == ns.diagnose(run.path).to_dict()
