"""The HTML report in a real headless Chromium (Playwright driving the system's chromium).

The page must load from file:// with no console errors and no network requests, the charts
must render (bars with real, non-zero size, as many as ops shown), sorting must work, and a
screenshot is saved under $NEURONSCOPE_ARTIFACTS_DIR (or the test's tmp dir).

Needs ``pip install playwright`` and a Chromium (Debian: ``apt-get install -y chromium``;
or set NEURONSCOPE_CHROMIUM to a chromium/chrome binary). Skipped when either is missing,
unless NEURONSCOPE_REQUIRE_BROWSER=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.browser import launch

import neuronscope as ns
from neuronscope.report.html import write_html



@pytest.fixture(scope="module")
def browser():
    yield from launch()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    where = os.environ.get("NEURONSCOPE_ARTIFACTS_DIR")
    path = Path(where) if where else tmp_path / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Page:
    """A page opened on a report file, recording console errors and network requests."""

    def __init__(self, browser, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url, wait_until="load")

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def bar_sizes(self, selector: str) -> list[tuple[float, float]]:
        """Rendered size (getBBox) of every element matching ``selector``."""
        return self.page.eval_on_selector_all(
            selector, "els => els.map(e => { const b = e.getBBox(); return [b.width, b.height]; })"
        )

    def close(self) -> None:
        self.page.close()


def _check_clean(page: _Page) -> None:
    assert page.errors == [], page.errors
    assert page.requests == [page.url], page.requests  # self-contained: nothing but the file itself


def test_single_report_renders(browser, report_profiles, artifacts):
    summary = ns.load_run(report_profiles.small).summary
    path = write_html(report_profiles.small, artifacts / "single-run.html")
    page = _Page(browser, path)
    try:
        _check_clean(page)
        assert page.page.title() == "neuronscope: small"
        # one bar per op shown, each with a real rendered size, widest first
        n = len(summary)
        assert page.count("svg#op-chart-a rect.op-bar") == n
        assert page.page.get_attribute("svg#op-chart-a", "data-bars") == str(n)
        sizes = page.bar_sizes("svg#op-chart-a rect.op-bar")
        assert all(w > 0 and h > 0 for w, h in sizes)
        widths = [w for w, _ in sizes]
        assert widths == sorted(widths, reverse=True)
        box = page.page.locator("svg#op-chart-a").bounding_box()
        assert box is not None and box["width"] > 600 and box["height"] > 20 * n
        # regions, timeline, metadata, files
        assert page.count("svg#region-chart-a rect.region-bar") == 2
        events = page.count("svg#timeline-a rect.tl-event") + page.count("svg#timeline-a rect.tl-bin")
        assert events > 0 and all(w > 0 for w, _ in page.bar_sizes("svg#timeline-a rect.tl-event"))
        assert page.count("table.manifest tr") > 5
        assert page.count("a.raw-file") == 3
        # sorting: open the op table and sort by Calls, descending
        page.page.click("#run-a details.all-ops summary")
        page.page.click("#op-table-a thead th:nth-child(2)")
        calls = [int(t) for t in page.page.locator("#op-table-a tbody tr td:nth-child(2)").all_inner_texts()]
        assert calls == sorted(calls, reverse=True) and len(calls) == n
        assert page.errors == []
        page.page.screenshot(path=str(artifacts / "single-run.png"), full_page=True)
    finally:
        page.close()
    assert (artifacts / "single-run.png").stat().st_size > 10_000


def test_diff_report_renders(browser, report_profiles, artifacts):
    small, big = ns.load_run(report_profiles.small).summary, ns.load_run(report_profiles.big).summary
    n_ops = len({r.name for r in small.rows} | {r.name for r in big.rows})
    path = write_html(report_profiles.small, artifacts / "diff.html", report_profiles.big, top=10)
    page = _Page(browser, path)
    try:
        _check_clean(page)
        assert page.count("svg#diff-chart rect.diff-bar") == min(10, n_ops)
        assert all(w > 0 for w, _ in page.bar_sizes("svg#diff-chart rect.diff-bar"))
        assert page.count("svg#diff-chart rect.diff-bar.worse") >= 1  # big is slower
        assert page.count("svg#op-chart-a rect.op-bar") == min(10, len(small))
        assert page.count("svg#op-chart-b rect.op-bar") == min(10, len(big))
        assert page.count("svg.timeline") == 2
        assert page.page.inner_text("#diff-total").startswith("+")
        page.page.screenshot(path=str(artifacts / "diff.png"), full_page=True)
    finally:
        page.close()


def test_binned_timeline_renders(browser, report_profiles, artifacts):
    path = write_html(report_profiles.big, artifacts / "binned.html", max_timeline_rects=40, timeline_bins=60)
    page = _Page(browser, path)
    try:
        _check_clean(page)
        bins = page.count("svg#timeline-a rect.tl-bin")
        assert 0 < bins <= 60 * page.count("svg#timeline-a g.tl-lane")
        assert all(w > 0 and h > 0 for w, h in page.bar_sizes("svg#timeline-a rect.tl-bin"))
        page.page.locator("svg#timeline-a").screenshot(path=str(artifacts / "binned-timeline.png"))
    finally:
        page.close()


def test_diagnosis_section_renders_gaps_by_class_and_findings(browser, tmp_path, artifacts):
    """A run with a known structure: sleeps (host_wait gaps) and an unfused chain (a finding)."""
    import time

    import torch
    from workloads import rmsnorm_naive

    x, w = torch.randn(4, 64), torch.randn(64)
    with ns.profile_neuron(name="diagnosed", output_dir=tmp_path) as run:
        for _ in range(6):
            rmsnorm_naive(x, w)
            time.sleep(0.002)
    d = run.diagnosis
    path = write_html(run, artifacts / "diagnosis.html")
    page = _Page(browser, path)
    try:
        _check_clean(page)
        section = page.page.locator("#diagnosis-a")
        assert section.get_attribute("data-bound-by") == d.bound_by == "host"
        assert "host-bound" in page.page.locator("#diagnosis-a p.verdict").inner_text()
        drawn = page.count("svg#diagnosis-timeline-a rect.dg-gap")
        assert drawn == len(d.timeline_data.gaps) == d.gaps.count >= 6
        classes = page.page.eval_on_selector_all("svg#diagnosis-timeline-a rect.dg-gap", "els => els.map(e => e.dataset.class)")
        assert classes.count("host_wait") >= 6
        fills = set(page.page.eval_on_selector_all(
            "svg#diagnosis-timeline-a rect.dg-gap[data-class=host_wait]", "els => els.map(e => getComputedStyle(e).fill)"))
        assert len(fills) == 1  # one colour per class
        sizes = page.bar_sizes("svg#diagnosis-timeline-a rect.dg-gap")
        assert all(w > 0 and h > 0 for w, h in sizes)
        rules = page.page.eval_on_selector_all("#findings-a tbody tr", "els => els.map(e => e.dataset.rule)")
        assert rules == [f.rule for f in d.findings] and "elementwise_chain" in rules
        page.page.screenshot(path=str(artifacts / "diagnosis.png"), full_page=True)
    finally:
        page.close()


def test_memory_section_renders_chart_peak_and_table(browser, tmp_path, artifacts):
    """memory=True: the allocated-bytes line is drawn, the peak marker sits on its highest point,
    and the at-peak table (sortable) names the region that holds the peak."""
    import torch

    held = []
    with ns.profile_neuron(name="memory", memory=True, output_dir=tmp_path) as run:
        with ns.region("big"):
            held.append(torch.ones(4 << 20))  # 16 MiB
        with ns.region("small"):
            held.append(torch.ones(1 << 18))
    m = run.memory
    path = write_html(run, artifacts / "memory.html")
    page = _Page(browser, path)
    try:
        _check_clean(page)
        assert int(page.page.get_attribute("#memory-a", "data-peak-bytes")) == m.peak_bytes
        (w, h), = page.bar_sizes("svg#memory-chart-a polyline.mem-line")
        assert w > 100 and h > 20
        peak = page.page.eval_on_selector("svg#memory-chart-a circle.mem-peak", "e => { const b = e.getBBox(); return [b.y + b.height / 2, +e.dataset.bytes]; }")
        line_top = page.page.eval_on_selector("svg#memory-chart-a polyline.mem-line", "e => e.getBBox().y")
        assert peak[1] == m.peak_bytes and abs(peak[0] - line_top) < 0.5
        rows = page.page.eval_on_selector_all("#memory-at-peak-a tbody tr", "els => els.map(e => [e.dataset.region, +e.dataset.bytes])")
        assert rows[0] == ["big", m.at_peak[0].bytes]
        page.page.locator("#run-a").screenshot(path=str(artifacts / "memory.png"))
    finally:
        page.close()


def test_roofline_renders_points_inside_the_chart(browser, artifacts):
    """A real CPU profile with shapes, against given limits: the roofline's circles are drawn
    with a real size, all inside the chart, as are the roofs."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.analysis.roofs import DeviceLimits
    from neuronscope.analysis.summary import summarize
    from neuronscope.trace.kineto import trace_from_kineto

    a, x = torch.randn(1024, 1024), torch.randn(4096, 4096)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, a)
        torch.mul(x, x)
    limits = DeviceLimits("test cpu", 2e12, {"matrix/fp32": 50e12, "vector/fp32": 5e12})
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results), limits=limits)
    plotted = [r.name for r in summary.rows if r.roofline is not None and r.roofline.flops > 0]
    assert {"aten::mm", "aten::mul"} <= set(plotted)
    path = write_html(summary, artifacts / "roofline.html")
    page = _Page(browser, path)
    try:
        _check_clean(page)
        assert page.count("svg.roofline") == 1
        assert page.count("svg.roofline circle.roof-point") == len(plotted)
        assert all(w > 0 and h > 0 for w, h in page.bar_sizes("svg.roofline circle.roof-point"))
        assert page.count("svg.roofline line.roof") == 3  # memory, matrix/fp32, vector/fp32
        svg = page.page.locator("svg.roofline").bounding_box()
        assert svg is not None and svg["width"] > 600 and svg["height"] > 200
        for selector in ("svg.roofline circle.roof-point", "svg.roofline line.roof"):
            items = page.page.locator(selector)
            for i in range(items.count()):
                b = items.nth(i).bounding_box()
                assert b is not None and b["width"] > 0 and b["height"] >= 0
                assert svg["x"] <= b["x"] and b["x"] + b["width"] <= svg["x"] + svg["width"], (selector, i, b, svg)
                assert svg["y"] <= b["y"] and b["y"] + b["height"] <= svg["y"] + svg["height"], (selector, i, b, svg)
        page.page.locator("#roofline-a").screenshot(path=str(artifacts / "roofline.png"))
    finally:
        page.close()
