"""What Jupyter shows for a Run, a Summary, a Diagnosis and a MemoryReport: the mimebundle
IPython's display formatter builds (the one a notebook stores), read back table by table, and
what ``print(run.diagnosis)`` says about the findings it does not print."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch
from IPython.core.formatters import DisplayFormatter

import neuronscope as ns
from neuronscope.analysis.diagnosis.model import finding_line
from neuronscope.analysis.text import device_cells
from neuronscope.analysis.units import format_us

from ._html import read, table, text
from ._workload import STEPS


def _bundle(obj) -> dict:
    data, _metadata = DisplayFormatter().format(obj)
    return data


def _shown_ops(summary, limit):
    """The rows a table of ``limit`` ops shows: the ops, then compile rows (computed here)."""
    ops = [r for r in summary.rows if not r.compile][:limit]
    comp = sorted((r for r in summary.rows if r.compile), key=lambda r: (-r.self_cpu_time_us, r.name))[: min(limit, 5)]
    return ops + comp


def _findings(n: int) -> tuple[ns.Finding, ...]:
    return tuple(
        ns.Finding(
            rule=f"rule_{i}",
            message=f"change <thing {i}> & more",
            us_at_stake=1000.0 * (n - i),
            severity="high" if i == 0 else "low",
        )
        for i in range(n)
    )


# --- Summary -------------------------------------------------------------------------------
def test_summary_renders_its_op_table_with_the_roof_column(runs):
    summary = runs.shaped.summary
    data = _bundle(summary)
    assert set(data) >= {"text/html", "text/plain"}
    assert data["text/plain"] == summary.table()  # the terminal's IPython prints the table print() shows
    t = table(data["text/html"], "nsnb-ops")
    assert t.header == ["Name", "Calls", "Self device", "Device %", "Device total", "Self CPU", "% of roof"]
    shown = _shown_ops(summary, 20)
    assert len(t.rows) == len(shown) > 0
    for cells, attrs, r in zip(t.rows, t.row_attrs, shown):
        assert attrs["data-op"] == r.name and cells[0] == summary.label(r.name)
        assert cells[1:6] == [str(r.calls), *device_cells(r), format_us(r.self_cpu_time_us)]
        assert cells[6] == (f"{r.roofline.pct_of_roof:.1f}%" if r.roofline is not None else "-")
    assert any(r.roofline is not None for r in shown)  # the column is not all dashes
    mm = next(cells for cells in t.rows if cells[0] == "aten::mm")
    assert mm[1] == str(STEPS)


def test_without_shapes_there_is_no_roof_column(runs):
    t = table(runs.plain.summary._repr_html_(), "nsnb-ops")
    assert "% of roof" not in t.header and len(t.header) == 6


def test_a_long_summary_shows_20_ops_and_counts_the_rest_and_escapes_names():
    rows = tuple(
        ns.OpStats(
            name=f"op<{i}>&",
            calls=i + 1,
            device_time_us=100.0 - i,
            self_device_time_us=100.0 - i,
            device_pct=1.0,
            cpu_time_us=1.0,
            self_cpu_time_us=1.0,
        )
        for i in range(25)
    ) + (
        ns.OpStats(
            name="<script>alert(1)</script>",
            calls=1,
            device_time_us=0.5,
            self_device_time_us=0.5,
            device_pct=0.1,
            cpu_time_us=1.0,
            self_cpu_time_us=1.0,
        ),
    )
    html = ns.Summary(rows=rows, device="cpu", warnings=("<b>careful</b>",))._repr_html_()
    t = table(html, "nsnb-ops")
    assert [c[0] for c in t.rows] == [f"op<{i}>&" for i in range(20)]  # unescaped text = the names
    assert "6 more ops" in text(html) and "to_pandas()" in text(html)
    assert "warning: <b>careful</b>" in text(html)
    tags = {tag for tag, _ in read(html).tags}
    assert tags <= {"style", "div", "p", "b", "table", "thead", "tbody", "tr", "th", "td"}  # no script, no markup from data


def test_an_empty_summary_says_so():
    assert "no ops were recorded" in text(ns.Summary(rows=())._repr_html_())


# --- Run -------------------------------------------------------------------------------------
def test_run_renders_name_device_status_path_verdict_and_top_10(runs):
    run = runs.shaped
    data = _bundle(run)
    assert data["text/plain"] == repr(run)
    html = data["text/html"]
    seen = text(html)
    assert f"neuronscope run {run.name}" in seen
    assert f"device {run.device}" in seen and f"status {run.status}" in seen and f"path {run.path}" in seen
    for line in run.diagnosis.headline():
        assert line in seen
    t = table(html, "nsnb-ops")
    shown = _shown_ops(run.summary, 10)
    assert [a["data-op"] for a in t.row_attrs] == [r.name for r in shown]
    hidden = len(run.summary.rows) - len(shown)
    assert (f"{hidden} more ops (run.summary has all)" in seen) == (hidden > 0)


def test_a_run_shown_inside_its_block_does_not_wait_for_itself(tmp_path):
    shown: list[str] = []
    with ns.profile_neuron(name="inside", output_dir=tmp_path) as run:
        torch.ones(4).sum()
        t = threading.Thread(target=lambda: shown.append(run._repr_html_()), daemon=True)
        t.start()
        t.join(120)  # a deadlock fails here instead of hanging the suite
        assert not t.is_alive(), "_repr_html_ waited for the capture it is inside"
    assert "still capturing" in text(shown[0])
    assert "nsnb-ops" in run._repr_html_()  # after the block: the table


def test_a_skipped_run_says_why(tmp_path):
    with ns.profile_neuron(name="skipped", output_dir=tmp_path, sample=0.0) as run:
        torch.ones(4).sum()
    seen = text(_bundle(run)["text/html"])
    assert "status skipped" in seen and f"skipped {run.skip_reason}" in seen and "nsnb-ops" not in seen


# --- Diagnosis -------------------------------------------------------------------------------
def test_diagnosis_html_lists_every_finding(runs):
    d = replace(runs.shaped.diagnosis, findings=_findings(3))
    html = _bundle(d)["text/html"]
    t = table(html, "nsnb-findings")
    assert t.header == ["Rule", "What to change", "At stake", "Per step", "Severity"]
    assert [c[0] for c in t.rows] == ["rule_0", "rule_1", "rule_2"]
    assert t.rows[0][1] == "change <thing 0> & more" and t.rows[0][2] == format_us(3000.0) and t.rows[0][4] == "high"
    seen = text(html)
    assert "+2 more" not in seen and "3 findings" in seen
    for line in d.headline():
        if not line.startswith("top finding: "):
            assert line in seen


def test_print_says_how_to_see_every_finding(runs):
    d = replace(runs.shaped.diagnosis, findings=_findings(3), memory_line="memory peak 1 MiB at aten::mm")
    printed = str(d)
    assert printed == d.text() and printed.splitlines()[-1] == "memory peak 1 MiB at aten::mm"  # the memory line stays last
    top = next(line for line in printed.splitlines() if line.startswith("top finding: "))
    assert top.endswith("(+2 more; print(run.diagnosis.text(findings=None)) lists them)")
    every = d.text(findings=None)
    assert every.startswith("\n".join(d.headline()))
    assert [line.strip() for line in every.splitlines()[-3:]] == [
        f"{i}. {finding_line(f)} [{f.severity}]" for i, f in enumerate(d.findings, 1)
    ]
    assert "print(run.diagnosis.text" not in every
    one = d.text(findings=1)
    assert "lists them" in one and one.splitlines()[-1].strip() == f"1. {finding_line(d.findings[0])} [high]"
    # one finding: nothing more to list, no hint
    single = replace(d, findings=_findings(1))
    assert "more)" not in str(single) and "lists them" not in str(single) and "findings (1 of 1" in single.text(findings=None)
    with pytest.raises(ns.ConfigurationError, match="findings"):
        d.text(findings=-1)
    with pytest.raises(ns.ConfigurationError, match="findings"):
        d.text(findings="all")  # type: ignore[arg-type]


# --- MemoryReport ----------------------------------------------------------------------------
def test_memory_report_renders_its_headline_and_holders(runs):
    m = runs.memory.memory
    assert m is not None
    data = _bundle(m)
    assert data["text/plain"] == str(m)
    html = data["text/html"]
    assert m.headline() in text(html)
    t = table(html, "nsnb-holders")
    assert [c[0] for c in t.rows] == [h.op for h in m.at_peak[:10]] and t.rows


# --- short reprs -----------------------------------------------------------------------------
def test_reprs_are_one_short_line(runs):
    for obj in (runs.shaped, runs.shaped.summary, runs.shaped.diagnosis, runs.memory.memory):
        r = repr(obj)
        assert r.startswith("<neuronscope.") and "\n" not in r and len(r) < 300, r


def test_nothing_is_imported_until_shown():
    """The analysis never imports the notebook module (nor pandas, nor IPython) at import."""
    import subprocess
    import sys

    code = (
        "import sys, neuronscope as ns; from neuronscope.analysis.summary import Summary; "
        "from neuronscope.analysis.diagnosis import Diagnosis; import neuronscope._run; "
        "print(sorted(m for m in ('neuronscope.analysis.notebook', 'pandas', 'IPython') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
