"""The memory report wherever a run is shown (issue 19, item 5): the verdict line (print and
terminal), summary.json / ``show --json``, ``neuronscope run --memory``, the HTML report,
``neuronscope diff``. Real torch.profiler runs on CPU, real files, the real CLI."""

from __future__ import annotations

import json
import re
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from cli._profiles import cli_runner

import neuronscope as ns
from neuronscope.cli import cli

MiB = 1 << 20


def _held_in_big(name: str, mib: int, tmp_path: Path) -> ns.Run:
    held = []
    with ns.profile_neuron(name=name, memory=True, output_dir=tmp_path) as run:
        with ns.region("big"):
            held.append(torch.ones(mib * MiB // 4))  # mib MiB of float32, kept while other ops run
        with ns.region("small"):
            held.append(torch.ones(MiB // 4))
        a = torch.randn(64, 64)
        (a @ a).sum()
    assert run.wait(60)
    return run


@pytest.fixture
def runner():
    return cli_runner()


def test_the_verdict_carries_the_memory_line_in_print_and_on_disk(tmp_path):
    run = _held_in_big("verdict", 16, tmp_path)
    line = run.memory.headline()
    assert line.startswith("memory peak 17.0 MiB at aten::ones in big")
    text = str(run.diagnosis)  # print(run.diagnosis)
    assert text.splitlines()[-1] == line
    # saved with the diagnosis, and back from disk
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["diagnosis"]["memory_line"] == line and summary["memory"]["peak_bytes"] == run.memory.peak_bytes
    assert str(ns.load_run(run.path).diagnosis).splitlines()[-1] == line


def test_a_run_without_memory_has_no_memory_line(tmp_path):
    with ns.profile_neuron(name="plain", output_dir=tmp_path) as run:
        torch.ones(8).sum()
    assert run.memory is None and "memory peak" not in str(run.diagnosis)
    assert "memory_line" not in json.loads((run.path / "summary.json").read_text())["diagnosis"]


def test_show_prints_the_line_and_json_has_the_report(tmp_path, runner):
    run = _held_in_big("shown", 8, tmp_path)
    out = runner.invoke(cli, ["show", str(run.path)])
    assert out.exit_code == 0, out.output
    assert "memory peak 9.0 MiB at aten::ones in big" in out.stdout
    data = json.loads(runner.invoke(cli, ["show", "--json", str(run.path)]).stdout)
    assert data["memory"] == json.loads((run.path / "summary.json").read_text())["memory"]
    assert data["memory"]["at_peak"][0]["region"] == "big" and data["memory"]["device"] == "cpu"
    # a raw Kineto trace with [memory] records: the report is computed from it
    trace = run.path / "trace.json.gz"
    data = json.loads(runner.invoke(cli, ["show", "--json", str(trace)]).stdout)
    assert data["memory"]["peak_bytes"] == run.memory.peak_bytes
    assert data["memory"]["at_peak"][0]["region"] == "big"
    assert any(f["rule"] == "memory_peak" for f in data["diagnosis"]["findings"])
    assert "memory peak" in runner.invoke(cli, ["show", str(trace)]).stdout


def test_show_json_memory_is_null_without_memory(tmp_path, runner):
    with ns.profile_neuron(name="plain", output_dir=tmp_path) as run:
        torch.ones(8).sum()
    assert json.loads(runner.invoke(cli, ["show", "--json", str(run.path)]).stdout)["memory"] is None


SCRIPT = textwrap.dedent(
    """
    import torch
    from torch.profiler import record_function

    kept = []
    for _ in range(6):
        with record_function("train_step"):
            kept.append(torch.ones(1 << 18))  # 1 MiB kept per step: a leak
            a = torch.randn(64, 64)
            (a @ a).sum()
    """
)


def test_cli_run_memory(tmp_path, runner):
    script = tmp_path / "leaky.py"
    script.write_text(SCRIPT)
    out_dir = tmp_path / "runs"
    result = runner.invoke(cli, ["run", "--memory", "--device", "cpu", "--output-dir", str(out_dir), str(script)])
    assert result.exit_code == 0, result.output
    assert re.search(r"memory peak 6\.\d MiB at aten::ones in train_step \(\d+%\); \+1\.0 MiB per step", result.stdout), result.stdout
    assert "[memory_growth]" in result.stdout.replace("\n", " ")
    (run_dir,) = [p for p in out_dir.iterdir() if (p / "manifest.json").is_file()]
    mem = json.loads((run_dir / "summary.json").read_text())["memory"]
    assert abs(mem["growth_per_step_bytes"] - MiB) < 0.1 * MiB and len(mem["steps"]) == 6
    growth = next(f for f in json.loads((run_dir / "summary.json").read_text())["diagnosis"]["findings"] if f["rule"] == "memory_growth")
    assert growth["evidence"]["never_freed"][0]["op"] == "aten::ones"  # held past the last step (freed at exit)
    # without --memory: no report
    plain = runner.invoke(cli, ["run", "--device", "cpu", "--output-dir", str(tmp_path / "plain"), str(script)])
    assert plain.exit_code == 0 and "memory peak" not in plain.stdout


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def find(self, tag: str, **want: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(want[k] in (a.get(k) or "").split() if k == "class" else a.get(k) == want[k] for k in want)]


def test_html_report_has_the_memory_chart_and_the_at_peak_table(tmp_path):
    from neuronscope.report.html import render_html

    run = _held_in_big("html", 16, tmp_path)
    m = run.memory
    page = _Tags()
    page.feed(render_html(run))
    (section,) = page.find("div", id="memory-a")
    assert int(section["data-peak-bytes"]) == m.peak_bytes
    (svg,) = page.find("svg", id="memory-chart-a")
    (line,) = page.find("polyline", **{"class": "mem-line"})
    assert int(line["data-points"]) == len(m.timeline) >= 2 and len(line["points"].split()) >= len(m.timeline)
    (peak,) = page.find("circle", **{"class": "mem-peak"})
    assert int(peak["data-bytes"]) == m.peak_bytes and int(peak["data-t-ns"]) == m.peak_at_ns
    # the peak marker sits at the top of the drawn line (smallest y)
    ys = [float(p.split(",")[1]) for p in line["points"].split()]
    assert float(peak["cy"]) == pytest.approx(min(ys), abs=0.01)
    rows = [a for t, a in page.tags if t == "tr" and a.get("data-bytes")]
    assert rows and rows[0]["data-region"] == "big" and rows[0]["data-op"] == "aten::ones"
    assert int(rows[0]["data-bytes"]) == m.at_peak[0].bytes
    # no memory section for a run without memory
    with ns.profile_neuron(name="plain", output_dir=tmp_path) as plain:
        torch.ones(8).sum()
    assert 'id="memory-a"' not in render_html(plain)


def test_diff_explains_the_peak_change_by_op_and_region(tmp_path, runner):
    a = _held_in_big("a", 8, tmp_path / "a")
    b = _held_in_big("b", 24, tmp_path / "b")
    data = json.loads(runner.invoke(cli, ["diff", "--json", str(a.path), str(b.path)]).stdout)
    mem = data["memory"]
    assert mem["delta_bytes"] == b.memory.peak_bytes - a.memory.peak_bytes
    assert sum(c["delta_bytes"] for c in mem["contributions"]) == mem["delta_bytes"]  # exact split
    top = mem["contributions"][0]
    assert (top["op"], top["region"]) == ("aten::ones", "big")
    assert abs(top["delta_bytes"] - 16 * MiB) <= 0.05 * 16 * MiB
    text = runner.invoke(cli, ["diff", str(a.path), str(b.path)]).stdout
    assert "Memory:" in text and re.search(r"memory peak 9\.0 MiB -> 25\.0 MiB: \+16\.0 MiB", text), text
    assert re.search(r"\+16\.0 MiB\s+aten::ones in big", text), text
    # runs without memory: null
    with ns.profile_neuron(name="plain", output_dir=tmp_path) as plain:
        torch.ones(8).sum()
    data = json.loads(runner.invoke(cli, ["diff", "--json", str(a.path), str(plain.path)]).stdout)
    assert data["memory"] is None
