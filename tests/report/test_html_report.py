"""The HTML report as text: sections, counts, self-containment, links, escaping, timeline caps.

What a browser makes of it is tested in test_html_in_chromium.py.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
import torch
from cli._profiles import COMMITTED_TRACE, DATA

import neuronscope as ns
from neuronscope.report.html import render_html, write_html


class _Elements(HTMLParser):
    """Every start tag with its attributes (and a check that the document parses)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[dict[str, str | None]]:
        out = []
        for t, a in self.tags:
            if tag and t != tag:
                continue
            if cls and cls not in (a.get("class") or "").split():
                continue
            if all(a.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(a)
        return out


def test_single_run_report(report_profiles):
    run = ns.load_run(report_profiles.small)
    html = render_html(run)
    doc = _Elements(html)
    summary = run.summary
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    (chart,) = doc.find("svg", id="op-chart-a")
    bars = doc.find("rect", cls="op-bar")
    assert int(chart["data-bars"]) == len(bars) == len(summary)  # 13 ops < top=30
    assert [b["data-op"] for b in bars] == [r.name for r in summary.rows]
    assert sum(float(b["data-pct"]) for b in bars) == pytest.approx(100.0, abs=0.01)
    assert all(float(b["width"]) > 0 for b in bars)
    assert len(doc.find("rect", cls="region-bar")) == len(summary.regions) == 2
    assert len(doc.find("tr")) >= len(summary) + 1  # the op table has every op
    tl = doc.find("svg", id="timeline-a")[0]
    assert int(tl["data-drawn"]) == int(tl["data-events"]) > 0  # small: every event drawn
    assert doc.find("g", cls="tl-lane", data_mode="events")
    assert len(doc.find("rect", cls="tl-event")) == int(tl["data-drawn"])
    assert doc.find("table", cls="manifest") and "torch_version" in html and summary.device in html
    assert not doc.find("svg", id="diff-chart") and doc.find("body")[0]["data-report"] == "single"


def test_top_limits_the_bars_not_the_table(report_profiles):
    html = render_html(report_profiles.small, top=4)
    doc = _Elements(html)
    assert len(doc.find("rect", cls="op-bar")) == 4 and doc.find("svg", id="op-chart-a")[0]["data-bars"] == "4"
    assert "more ops" in html
    assert len(doc.find("rect", cls="op-bar")) == 4
    all_bars = _Elements(render_html(report_profiles.small, top=0)).find("rect", cls="op-bar")
    assert len(all_bars) == len(ns.load_run(report_profiles.small).summary)


def test_self_contained(report_profiles):
    html = render_html(report_profiles.small, report_profiles.big)
    doc = _Elements(html)
    assert not doc.find("link") and not doc.find("img") and not doc.find("iframe")
    assert all("src" not in a for _, a in doc.tags)  # no external script, image or frame
    assert not re.search(r"https?://", html)
    assert "@import" not in html and "url(" not in html


def test_raw_file_links_are_relative_to_the_report(report_profiles, tmp_path):
    out = tmp_path / "reports" / "r.html"
    out.parent.mkdir()
    write_html(report_profiles.small, out)
    doc = _Elements(out.read_text())
    hrefs = [a["href"] for a in doc.find("a", cls="raw-file")]
    assert {Path(unquote(h)).name for h in hrefs} == {"manifest.json", "summary.json", "trace.json.gz"}
    for h in hrefs:
        assert not h.startswith(("/", "file:")), h
        assert (out.parent / unquote(h)).resolve().is_file(), h
    # without a place to be relative to, absolute file:// URLs
    absolute = [a["href"] for a in _Elements(render_html(report_profiles.small)).find("a", cls="raw-file")]
    assert absolute and all(h.startswith("file:///") for h in absolute)


def test_diff_report(report_profiles):
    small, big = ns.load_run(report_profiles.small).summary, ns.load_run(report_profiles.big).summary
    doc = _Elements(render_html(report_profiles.small, report_profiles.big, title="before/after"))
    assert doc.find("body")[0]["data-report"] == "diff"
    names = {r.name for r in small.rows} | {r.name for r in big.rows}
    bars = doc.find("rect", cls="diff-bar")
    assert len(bars) == int(doc.find("svg", id="diff-chart")[0]["data-bars"]) == min(30, len(names))
    assert all(float(b["data-delta-us"]) > 0 for b in bars if "worse" in b["class"])
    assert doc.find("svg", id="op-chart-a") and doc.find("svg", id="op-chart-b")
    assert doc.find("svg", id="timeline-a") and doc.find("svg", id="timeline-b")
    assert float(doc.find("div", id="diff-total")[0]["data-pct"]) > 0


def test_huge_timelines_are_binned(report_profiles):
    html = render_html(report_profiles.big, max_timeline_rects=50, timeline_bins=20)
    doc = _Elements(html)
    tl = doc.find("svg", id="timeline-a")[0]
    lanes = doc.find("g", cls="tl-lane")
    assert any(lane["data-mode"] == "bins" for lane in lanes)
    assert int(tl["data-drawn"]) < int(tl["data-events"])
    bins = doc.find("rect", cls="tl-bin")
    assert 0 < len(bins) <= 20 * len(lanes)
    assert all(0 < float(b["data-busy"]) <= 1.0 for b in bins)


def test_sources_without_a_trace_or_a_run(report_profiles):
    summary = ns.load_run(report_profiles.small).summary
    html = render_html(summary)  # a bare Summary: no timeline, no files, still a report
    assert "timeline-missing" in html and 'class="op-bar"' in html
    trace_html = render_html(ns.load_trace(COMMITTED_TRACE))  # a Trace: timeline, no run metadata
    assert 'class="tl-event"' in trace_html or 'class="tl-bin"' in trace_html
    assert "timeline-missing" in render_html(ns.Summary(rows=()))
    with pytest.raises(TypeError, match="Run, Summary, Trace or path"):
        render_html(42)
    with pytest.raises(ns.TraceLoadError, match="nope"):
        render_html("nope/trace.json")


def test_names_are_escaped(tmp_path):
    x = torch.randn(4, 8)
    evil = '<script>alert("x")</script>&'
    with ns.profile_neuron(name="escape", output_dir=tmp_path) as run, ns.region(evil):
        (x * 2).sum()
    html = render_html(run)
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in html
    assert html.count("<script>") == 1  # ours


def test_trace_file_source(tmp_path):
    out = tmp_path / "t.html"
    write_html(COMMITTED_TRACE, out, title="committed trace")
    doc = _Elements(out.read_text())
    assert len(doc.find("rect", cls="op-bar")) == 13
    (link,) = doc.find("a", cls="raw-file")
    assert (tmp_path / unquote(link["href"])).resolve() == COMMITTED_TRACE.resolve()


def test_device_timeline_from_an_emulated_neuron_trace():
    """A trace with real device (kernel) events: the timeline draws those, one rect each."""
    trace = ns.load_trace(DATA / "emulated_neuron_rmsnorm.trace.json.gz")
    kernels = [e for e in trace if e.kind == ns.EventKind.DEVICE]
    assert kernels
    doc = _Elements(render_html(trace))
    lanes = [lane for lane in doc.find("g", cls="tl-lane") if "tl-device" in lane["class"]]
    assert sum(int(lane["data-events"]) for lane in lanes) == len(kernels)
    drawn = [r["data-op"] for r in doc.find("rect", cls="tl-event")]
    assert sorted(op for op in drawn if op.startswith("neff_")) == sorted(e.name for e in kernels)
    bars = doc.find("rect", cls="op-bar")
    assert bars[0]["data-op"] == "aten::pow" and float(bars[0]["data-pct"]) > 50


def test_diff_report_explains_the_change_in_wall_time(report_profiles):
    html = render_html(report_profiles.small, report_profiles.big)
    assert 'id="diff-explanation"' in html and 'id="diff-why"' in html
    deltas = [float(v) for v in re.findall(r'<tr data-kind="(?:op|idle)" data-delta-us="(-?[\d.]+)"', html)]
    a = ns.diagnose(report_profiles.small)
    b = ns.diagnose(report_profiles.big)
    # small runs 2 steps, big 20: the report compares them per step (issue 34.7)
    assert 'data-basis="per_step"' in html and a.steps.count == 2 and b.steps.count == 20
    if len(deltas) < 25:  # every part is drawn: they sum to the change of the run windows per step
        per_step = b.window_us / b.steps.count - a.window_us / a.steps.count
        assert sum(deltas) == pytest.approx(per_step, abs=0.01 * len(deltas) + 0.01)
    assert "slower than A" in re.search(r'id="diff-why">([^<]+)<', html).group(1)
