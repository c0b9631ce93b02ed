"""The roofline section of the HTML report, from a real CPU profile with shapes recorded.

Positions are checked in the SVG's own coordinates: the chart says its log ranges
(``data-x-log``, ``data-y-log``) and its plot box (``data-box``), and every expected pixel is
computed here from the Summary's numbers and the device's limits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from html.parser import HTMLParser

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope.analysis.roofs import DeviceLimits
from neuronscope.analysis.summary import Summary, summarize
from neuronscope.report.html import render_html
from neuronscope.trace.kineto import trace_from_kineto

# Far above what a CPU reaches, so "below the roof" holds on any test machine; two different
# peaks, so the chart draws two compute roofs.
BW = 2e12
LIMITS = DeviceLimits("test cpu", BW, {"matrix/fp32": 50e12, "vector/fp32": 5e12}, source="the test")


class _Tags(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def find(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and cls in a.get("class", "").split()]


@pytest.fixture(scope="module")
def trace():
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    x, y = torch.randn(4096, 4096), torch.randn(4096, 4096)
    torch.mm(a, b), torch.mul(x, y)  # warm up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, b)
        torch.mul(x, y)
        x.clone()  # a copy: bytes, no FLOPs
    return trace_from_kineto(prof.profiler.kineto_results)


@pytest.fixture(scope="module")
def summary(trace) -> Summary:
    return summarize(trace, limits=LIMITS)


class _Chart:
    """Data -> SVG pixels, from what the svg element says about its axes."""

    def __init__(self, svg: dict[str, str]) -> None:
        self.left, self.top, self.right, self.bottom = map(float, svg["data-box"].split())
        self.xlo, self.xhi = map(int, svg["data-x-log"].split())
        self.ylo, self.yhi = map(int, svg["data-y-log"].split())

    def px(self, intensity: float) -> float:
        return self.left + (math.log10(intensity) - self.xlo) / (self.xhi - self.xlo) * (self.right - self.left)

    def py(self, flops_per_s: float) -> float:
        return self.bottom - (math.log10(flops_per_s) - self.ylo) / (self.yhi - self.ylo) * (self.bottom - self.top)

    def intensity_at(self, px: float) -> float:
        return 10 ** (self.xlo + (px - self.left) / (self.right - self.left) * (self.xhi - self.xlo))


def test_summary_has_the_ops_the_chart_needs(summary):
    rl = {r.name: r.roofline for r in summary.rows if r.roofline is not None}
    assert {"aten::mm", "aten::mul", "aten::copy_"} <= set(rl)
    assert rl["aten::mm"].bound == "compute" and rl["aten::mul"].bound == "memory"
    assert rl["aten::copy_"].flops == 0 and rl["aten::copy_"].intensity == 0


def test_points_roofs_and_tables(summary):
    html = render_html(summary)
    doc = _Tags(html)
    (svg,) = doc.find("svg", "roofline")
    chart = _Chart(svg)
    ops = {r.name: r.roofline for r in summary.rows if r.roofline is not None and r.roofline.flops > 0}
    assert set(ops) >= {"aten::mm", "aten::mul"}

    # a point per op with FLOPs, at (intensity, achieved FLOP/s); area proportional to time
    points = {p["data-op"]: p for p in doc.find("circle", "roof-point")}
    assert set(points) == set(ops) and int(svg["data-points"]) == len(ops)
    for name, rl in ops.items():
        assert float(points[name]["cx"]) == pytest.approx(chart.px(rl.intensity), abs=0.01)
        assert float(points[name]["cy"]) == pytest.approx(chart.py(rl.achieved_flops_per_s), abs=0.01)
    by_time = sorted(ops, key=lambda n: ops[n].time_us)
    radii = [float(points[n]["r"]) for n in by_time]
    assert radii == sorted(radii) and radii[-1] > radii[0]
    mm, mul = ops["aten::mm"], ops["aten::mul"]
    r_mm, r_mul = float(points["aten::mm"]["r"]), float(points["aten::mul"]["r"])
    assert (r_mm / r_mul) ** 2 == pytest.approx(mm.time_us / mul.time_us, rel=0.01)

    # the memory roof: both ends on y = bandwidth · x, ending where the highest compute roof starts
    (memory,) = doc.find("line", "roof-memory")
    for xk, yk in (("x1", "y1"), ("x2", "y2")):
        x = chart.intensity_at(float(memory[xk]))
        assert float(memory[yk]) == pytest.approx(chart.py(BW * x), abs=0.02)
    assert float(memory["x2"]) == pytest.approx(chart.px(50e12 / BW), abs=0.01)
    assert float(memory["x1"]) < float(memory["x2"]) and float(memory["y1"]) > float(memory["y2"])

    # a horizontal compute roof per dtype of the plotted ops, starting at its ridge point
    compute = {line["data-roof"]: line for line in doc.find("line", "roof-compute")}
    assert set(compute) == {"matrix/fp32", "vector/fp32"}
    for dtype, peak in LIMITS.peak_flops.items():
        line = compute[dtype]
        assert float(line["y1"]) == float(line["y2"]) == pytest.approx(chart.py(peak), abs=0.01)
        assert float(line["x1"]) == pytest.approx(chart.px(peak / BW), abs=0.01)
    assert "matrix/fp32 50 TFLOP/s" in html and "vector/fp32 5 TFLOP/s" in html and "memory 2,000 GB/s" in html

    # mul under the memory roof where it is drawn; mm under its compute roof (SVG y grows down)
    cx, cy = float(points["aten::mul"]["cx"]), float(points["aten::mul"]["cy"])
    assert cy > chart.py(BW * chart.intensity_at(cx))
    assert float(points["aten::mm"]["cy"]) > chart.py(50e12)

    # the op table by time at stake; the copy in its own table, not on the chart
    rows = [a["data-op"] for t, a in doc.tags if t == "tr" and "data-op" in a]  # the op table, then the copies
    assert rows[: len(ops)] == sorted(ops, key=lambda n: -ops[n].time_at_stake_us)
    assert "aten::copy_" in rows[len(ops) :] and "aten::copy_" not in points
    assert doc.find("table", "roofline-noflop") and LIMITS.line().rstrip("; ") in html


def test_no_limits_no_chart_but_a_line_when_work_is_known(trace, summary):
    bare = summarize(trace)  # a CPU trace names no limits
    assert bare.limits is None and any(r.work is not None and r.work.calls > 0 for r in bare.rows)
    html = render_html(bare)
    assert not _Tags(html).find("svg", "roofline") and 'id="roofline-a"' not in html
    assert "Roofline: unknown device — give its limits with ns.configure(device_limits=...)" in html

    # no work recorded (no shapes): nothing at all
    no_work = replace(bare, rows=tuple(replace(r, work=None) for r in bare.rows))
    assert "Roofline" not in render_html(no_work)

    # limits but no op with a roofline: no section
    no_roofline = replace(summary, rows=tuple(replace(r, roofline=None) for r in summary.rows))
    html = render_html(no_roofline)
    assert not _Tags(html).find("svg", "roofline") and 'id="roofline-a"' not in html and "unknown device" not in html
