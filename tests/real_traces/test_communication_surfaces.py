"""Communication is shown wherever the diagnosis is: the terminal verdict, ``show --json``, the
HTML report (in a real Chromium), root-span attributes, ``diff`` and the rank profile — all on
the real DDP rank of the corpus (8×MI300X, RCCL)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import neuronscope as ns
from neuronscope.analysis.ranks import rank_profile
from neuronscope.cli import cli
from neuronscope.report.html import write_html
from neuronscope.sinks.otel.spans import diagnosis_attributes

from report.test_html_in_chromium import browser  # noqa: F401 - the real Chromium the HTML tests use (a fixture)

from .test_real_traces import _corpus_file

DDP = "tracelens__tests_traces_mi300_resnet_act_checkpoint.json.gz"
NCCL = "hta__nccl_parser_config_nccl_data.json.gz"


@pytest.fixture(scope="module")
def ddp():
    path = _corpus_file(DDP)
    return path, ns.diagnose(path)


def test_terminal_and_json(ddp):
    path, d = ddp
    runner = CliRunner()
    text = runner.invoke(cli, ["show", str(path)])
    assert text.exit_code == 0, text.output
    assert "communication-bound" in text.output and "communication (rccl)" in text.output
    out = runner.invoke(cli, ["show", str(path), "--json", "--top", "0"])
    comm = json.loads(out.stdout)["diagnosis"]["communication"]
    assert comm["exposed_us"] == pytest.approx(d.communication.exposed_us, abs=1e-3)
    assert {k["kind"] for k in comm["by_kind"]} >= {"all_reduce"}


def test_span_attributes(ddp):
    _, d = ddp
    attrs = diagnosis_attributes(d)
    assert attrs["neuronscope.bound_by"] == "communication"
    assert attrs["neuronscope.communication.backend"] == "rccl"
    assert attrs["neuronscope.communication.exposed_us"] == pytest.approx(d.communication.exposed_us, abs=1e-3)
    assert attrs["neuronscope.communication.kinds"][0] == d.communication.by_kind[0].kind
    assert attrs["neuronscope.idle.stream_wait_us"] >= 0.0


def test_diff_says_what_changed_in_communication(ddp):
    path, d = ddp
    other = _corpus_file(NCCL)
    out = CliRunner().invoke(cli, ["diff", str(other), str(path)])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if "communication: exposed" in x)
    b = ns.diagnose(other).communication
    assert f"overlapped {b.overlap_pct:.0f}% -> {d.communication.overlap_pct:.0f}%" in line
    data = json.loads(CliRunner().invoke(cli, ["diff", str(other), str(path), "--json"]).stdout)
    assert data["explanation"]["communication"]["b"]["exposed_us"] == pytest.approx(d.communication.exposed_us, abs=1e-3)


def test_rank_profile_carries_exposed_collective_time(ddp):
    path, d = ddp
    profile = rank_profile(ns.load_trace(path))
    assert profile["window"]["exposed_us"] == pytest.approx(d.communication.exposed_us, abs=1.0)
    assert profile["window"]["collective_us"] == pytest.approx(d.communication.collective_us, abs=1.0)


def test_html_report_in_chromium(ddp, browser, tmp_path):  # noqa: F811 - browser is the fixture imported above
    path, d = ddp
    html = write_html(ns.load_trace(path), tmp_path / "ddp.html")
    page = browser.new_page()
    try:
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(html.resolve().as_uri(), wait_until="load")
        box = page.locator("div.communication").first
        assert box.is_visible()
        assert float(box.get_attribute("data-exposed-us")) == pytest.approx(d.communication.exposed_us, abs=1e-2)
        kinds = page.locator("div.communication table.collectives tbody tr").evaluate_all("rs => rs.map(r => r.dataset.kind)")
        assert kinds == [k.kind for k in d.communication.by_kind]
        assert "communication-bound" in page.locator("p.verdict").first.inner_text()
        assert errors == []
    finally:
        page.close()
