"""A Comparison's HTML report in a real headless Chromium (as tests/report/test_html_in_chromium.py):
self-contained, the table and the chart drawn from the comparison's own figures, sorting works,
each variant's run section renders its charts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from support.browser import launch

import neuronscope as ns


@pytest.fixture(scope="module")
def browser():
    yield from launch()


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> ns.Comparison:
    rows = torch.randn(200, 32)
    wrong = torch.zeros(200, 32)
    return ns.compare(
        {
            "loop": lambda t: torch.stack([t[i] * 2.0 + 1.0 for i in range(t.shape[0])]),
            "vectorised": lambda t: t * 2.0 + 1.0,
            "wrong": lambda t: wrong,
        },
        rows,
        steps=3,
        max_time_s=1.0,
        output_dir=tmp_path_factory.mktemp("runs"),
    )


def test_the_comparison_report_renders(browser, comparison, tmp_path):
    where = Path(os.environ.get("NEURONSCOPE_ARTIFACTS_DIR") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    path = comparison.write_html(where / "comparison.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    url = path.resolve().as_uri()
    try:
        page.goto(url, wait_until="load")
        assert errors == [] and requests == [url], (errors, requests)
        assert page.title() == "neuronscope: loop vs vectorised vs wrong"
        # one table row per variant, its verdict as the record says
        verdicts = page.eval_on_selector_all(
            "#comparison-table tr.variant", "rs => rs.map(r => [r.dataset.variant, r.dataset.verdict])"
        )
        assert verdicts == [[v.name, v.verdict] for v in comparison]
        assert comparison["wrong"].verdict == "wrong result"
        # one bar per timed variant, its width proportional to the median step time
        bars = page.eval_on_selector_all(
            "svg#compare-chart rect.compare-bar",
            "bs => bs.map(b => [b.dataset.variant, b.getBBox().width, parseFloat(b.dataset.medianS)])",
        )
        assert [b[0] for b in bars] == [v.name for v in comparison]
        for name, width, median in bars:
            assert median == pytest.approx(comparison[name].step.median)
            assert width > 0
        widths = {name: width for name, width, _ in bars}
        ratio = comparison["loop"].step.median / comparison["vectorised"].step.median
        if widths["vectorised"] > 1:  # not clamped to the minimum bar
            assert widths["loop"] / widths["vectorised"] == pytest.approx(ratio, rel=0.02)
        whiskers = page.eval_on_selector_all("svg#compare-chart line.compare-ci", "ls => ls.map(l => l.getBBox().width)")
        assert len(whiskers) == 3 and page.locator("svg#compare-chart line.compare-baseline").count() == 1
        # sorting by the step time: fastest first, then slowest first
        header = page.locator("#comparison-table thead th").nth(1)
        header.click()
        order = page.eval_on_selector_all("#comparison-table tr.variant", "rs => rs.map(r => r.dataset.variant)")
        assert order == sorted((v.name for v in comparison), key=lambda n: -comparison[n].step.median)
        header.click()
        order = page.eval_on_selector_all("#comparison-table tr.variant", "rs => rs.map(r => r.dataset.variant)")
        assert order == sorted((v.name for v in comparison), key=lambda n: comparison[n].step.median)
        # the differences from the baseline, then each variant's run as the run report draws it
        assert page.locator("div.variant-diff").count() == 2
        for i, v in enumerate(comparison):
            shown = min(len(v.summary), 30)
            assert page.locator(f"section#run-v{i} svg#op-chart-v{i} rect.op-bar").count() == shown
            assert page.locator(f"section#run-v{i} h2").inner_text().startswith(f"{v.name}: its profile")
        page.screenshot(path=str(where / "comparison.png"), full_page=True)
    finally:
        page.close()
