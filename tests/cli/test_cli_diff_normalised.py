"""``neuronscope diff`` compares like with like (issue 34.7): two runs that recorded different
shares of their time are compared per recorded step (or per recorded second), the headline
follows the median step, the JSON says what was divided by what, and the CI gate uses the
divided figures. Real windowed and plain torch.profiler runs on CPU; every expected figure is
computed here from the run directories' own files."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope.analysis.diff import RunExtent, choose_basis
from neuronscope.cli import cli
from neuronscope.report.html import render_html


def _train(name: str, out: Path, hidden: int, steps: int, window: int, **limits) -> Path:
    """A small training loop (optimizer steps are the steps), profiled in windows of ``window`` steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(128, hidden)
    with ns.profile_neuron(name=name, output_dir=out, device="cpu", windows=ns.Windows(steps=window, keep=1), **limits) as run:
        for _ in range(steps):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    assert run.wait(120) and run.path is not None, run
    return run.path


def _stepped(name: str, out: Path, steps: int) -> Path:
    """A plain run (no windows, no limit) of ``steps`` ns.step() steps."""
    x = torch.randn(96, 96)
    with ns.profile_neuron(name=name, output_dir=out, device="cpu") as run:
        for _ in range(steps):
            for _ in range(4):
                x = torch.tanh(x @ x)
            ns.step()
    assert run.wait(60) and run.path is not None, run
    return run.path


@dataclass(frozen=True)
class Runs:
    big_few: Path  #: hidden 384: 20 steps, the first 3 recorded (max_steps) in a window of 3 steps
    small_many: Path  #: hidden 192: 61 steps, windows of 60: at least 60 recorded
    plain6: Path
    plain6_again: Path
    plain12: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    out = tmp_path_factory.mktemp("normalised")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two intra-op threads on a loaded 2-core machine stall for 100s of ms
    try:
        _train("warmup", out / "warmup", 64, 12, 5)  # first-call costs land here, not in A
        return Runs(
            big_few=_train("A", out, 384, 20, 3, max_steps=3),
            small_many=_train("B", out, 192, 61, 60),
            plain6=_stepped("p6", out, 6),
            plain6_again=_stepped("p6b", out, 6),
            plain12=_stepped("p12", out, 12),
        )
    finally:
        torch.set_num_threads(threads)


def _read(run_dir: Path) -> tuple[dict, dict, list[dict]]:
    """summary.json, manifest.json and the windows.json rows ([] for a plain run)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    index = run_dir / "windows.json"
    rows = json.loads(index.read_text())["windows"] if index.exists() else []
    return summary, manifest, rows


def _diff_json(runner, a: Path, b: Path, *extra: str) -> tuple[int, dict]:
    result = runner.invoke(cli, ["diff", str(a), str(b), "--json", "--top", "0", *extra])
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_windowed_runs_of_different_coverage_are_compared_per_recorded_step(runner, runs):
    sa, ma, wa = _read(runs.big_few)
    sb, mb, wb = _read(runs.small_many)
    steps_a, steps_b = sum(r["steps"] for r in wa), sum(r["steps"] for r in wb)
    assert wa and wb and 0 < steps_a <= 3 and steps_b >= 60  # B recorded 20x the steps A did
    # the raw totals say B is slower, though B's model is the smaller one: the trap this fixes
    assert sb["total_device_time_us"] > sa["total_device_time_us"]

    _, data = _diff_json(runner, runs.big_few, runs.small_many)
    n = data["normalised"]
    assert n["basis"] == "per_step" and n["label"] == "per step"
    assert n["a"]["divisor"] == n["a"]["steps_recorded"] == steps_a
    assert n["b"]["divisor"] == n["b"]["steps_recorded"] == steps_b
    assert n["a"]["steps_timed"] == ma["coverage"]["steps"] == 20 and n["b"]["steps_timed"] == 61
    assert n["a"]["windows"] == ma["coverage"]["windows"] == len(wa) and n["b"]["windows"] == len(wb)
    assert n["a"]["recorded_s"] == pytest.approx(ma["coverage"]["recorded_ns"] / 1e9, abs=1e-6)
    assert n["a"]["coverage_pct"] == pytest.approx(100 * ma["coverage"]["recorded_ns"] / ma["coverage"]["wall_ns"], abs=0.01)
    assert n["why"]["steps_recorded"] == {"a": steps_a, "b": steps_b, "differ": True}
    assert f"steps recorded {steps_a} vs {steps_b}" in n["reason"]
    assert n["raw_total_device_time_us"]["a"] == pytest.approx(sa["total_device_time_us"], abs=1e-3)

    # every op's figures are its self device time over the steps its side recorded
    raw_a = {r["name"]: r["self_device_time_us"] for r in sa["rows"]}
    raw_b = {r["name"]: r["self_device_time_us"] for r in sb["rows"]}
    assert data["total_device_time_us"]["a"] == pytest.approx(sa["total_device_time_us"] / steps_a, abs=1e-3)
    assert data["total_device_time_us"]["b"] == pytest.approx(sb["total_device_time_us"] / steps_b, abs=1e-3)
    mm = next(o for o in data["ops"] if o["name"] == "aten::mm")
    assert mm["self_device_time_us"]["a"] == pytest.approx(raw_a["aten::mm"] / steps_a, abs=1e-3)
    assert mm["self_device_time_us"]["b"] == pytest.approx(raw_b["aten::mm"] / steps_b, abs=1e-3)
    for o in data["ops"]:
        expect_a = raw_a.get(o["name"], 0.0) / steps_a
        expect_b = raw_b.get(o["name"], 0.0) / steps_b
        assert o["self_device_time_us"]["a"] == pytest.approx(expect_a, abs=1e-3), o["name"]
        assert o["self_device_time_us"]["b"] == pytest.approx(expect_b, abs=1e-3), o["name"]
    assert mm["self_device_time_us"]["delta"] < 0  # per step, the smaller model's GEMMs take less

    # the headline follows the median step, in sign and size
    p50_a, p50_b = sa["diagnosis"]["steps"]["p50_us"], sb["diagnosis"]["steps"]["p50_us"]
    word = "faster" if p50_b < p50_a else "slower"
    assert data["headline"].startswith(f"B is {abs(100 * (p50_b - p50_a) / p50_a):.1f}% {word} than A per step")
    assert f"({(p50_b - p50_a) / 1e3:+.3f} ms per step)" in data["headline"]
    assert p50_b < p50_a  # B's model is the smaller: its median step is shorter

    # the wall-time split is per recorded step too, and still sums to its change
    ex = data["explanation"]
    assert ex["normalised"]["basis"] == "per_step"
    assert ex["a_us"] == pytest.approx(sa["diagnosis"]["evidence"]["recorded_us"] / steps_a, abs=2e-3)
    assert ex["b_us"] == pytest.approx(sb["diagnosis"]["evidence"]["recorded_us"] / steps_b, abs=2e-3)
    assert sum(c["delta_us"] for c in ex["contributions"]) == pytest.approx(ex["delta_us"], abs=0.01 * len(ex["contributions"]))
    assert (ex["steps"]["a_recorded"], ex["steps"]["b_recorded"]) == (steps_a, steps_b)


def test_the_text_leads_with_the_median_step_and_every_figure_says_its_basis(runner, runs):
    result = runner.invoke(cli, ["diff", str(runs.big_few), str(runs.small_many)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    sa, sb = (json.loads((p / "summary.json").read_text()) for p in (runs.big_few, runs.small_many))
    faster = sb["diagnosis"]["steps"]["p50_us"] < sa["diagnosis"]["steps"]["p50_us"]
    assert lines[0].startswith("B is ") and ("faster" if faster else "slower") in lines[0] and "per step" in lines[0]
    assert lines[1].startswith("self device time per recorded step ")
    assert lines[2].startswith("compared per step: ") and "steps recorded" in lines[2]
    why = lines.index(next(line for line in lines if line.startswith("Why:")))
    assert "per recorded step" in lines[why] and "per recorded step" in lines[why + 1]
    parts = [line for line in lines[why + 2 :] if line.startswith("  ") and " ms" in line and "steps:" not in line]
    assert parts and all(" ms/step " in line for line in parts)
    assert any("recorded), p50" in line for line in lines[why:])  # timed and recorded step counts


def test_the_gate_compares_per_recorded_step(runner, runs):
    # raw totals grew (B recorded many more steps), per step they fell: the gate passes, and says why
    ok = runner.invoke(cli, ["diff", str(runs.big_few), str(runs.small_many), "--fail-if-slower", "5"])
    assert ok.exit_code == 0, ok.stderr
    assert "OK: total device time within 5% of A (compared per step:" in ok.stderr
    # the other way round it is a slowdown per step, though the raw totals fell
    code, data = _diff_json(runner, runs.small_many, runs.big_few, "--fail-if-slower", "5", "--op", "aten::mm")
    assert code == 1 and data["gate"]["basis"] == "per_step" and not data["gate"]["passed"]
    assert data["normalised"]["raw_total_device_time_us"]["delta"] < 0
    regs = {r["name"]: r for r in data["gate"]["regressions"]}
    steps = {p: sum(r["steps"] for r in _read(p)[2]) for p in (runs.big_few, runs.small_many)}
    mm = {p: next(r for r in _read(p)[0]["rows"] if r["name"] == "aten::mm")["self_device_time_us"] for p in steps}
    assert regs["aten::mm"]["basis"] == "per_step"
    assert regs["aten::mm"]["a_us"] == pytest.approx(mm[runs.small_many] / steps[runs.small_many], abs=1e-3)
    assert regs["aten::mm"]["b_us"] == pytest.approx(mm[runs.big_few] / steps[runs.big_few], abs=1e-3)
    text = runner.invoke(cli, ["diff", str(runs.small_many), str(runs.big_few), "--fail-if-slower", "5"])
    assert text.exit_code == 1 and "FAIL: total device time per step: " in text.stderr and "(compared per step:" in text.stderr


def test_the_html_report_compares_the_same_way(runs):
    html = render_html(runs.big_few, runs.small_many)
    assert 'id="diff-headline" data-basis="per_step">B is ' in html and 'id="diff-basis"' in html
    assert "self device time per recorded step" in html and "ms/step</td>" in html


def test_plain_runs_of_equal_coverage_and_steps_keep_the_totals(runner, runs):
    sa, ma, wa = _read(runs.plain6)
    sb, mb, wb = _read(runs.plain6_again)
    assert not wa and not wb and "coverage" not in ma and "coverage" not in mb  # everything recorded
    _, data = _diff_json(runner, runs.plain6, runs.plain6_again)
    n = data["normalised"]
    assert n["basis"] == "total" and n["a"]["divisor"] == n["b"]["divisor"] == 1 and n["reason"] == ""
    assert n["a"]["steps_recorded"] == n["b"]["steps_recorded"] == 6 and n["a"]["coverage_pct"] == 100.0
    assert not any(v["differ"] for v in n["why"].values())
    assert data["total_device_time_us"]["a"] == pytest.approx(sa["total_device_time_us"], abs=1e-3)
    assert data["total_device_time_us"]["b"] == pytest.approx(sb["total_device_time_us"], abs=1e-3)
    mm = next(o for o in data["ops"] if o["name"] == "aten::mm")
    assert mm["calls"] == {"a": 24, "b": 24, "delta": 0, "pct": 0.0}  # counts stay counts
    text = runner.invoke(cli, ["diff", str(runs.plain6), str(runs.plain6_again)], env={"COLUMNS": "160"}).stdout
    assert "\nself device time " in text and "per recorded" not in text and "compared per" not in text


def test_plain_runs_of_different_step_counts_compare_per_step(runner, runs):
    s6, s12 = (json.loads((p / "summary.json").read_text()) for p in (runs.plain6, runs.plain12))
    _, data = _diff_json(runner, runs.plain6, runs.plain12)
    n = data["normalised"]
    assert n["basis"] == "per_step" and (n["a"]["divisor"], n["b"]["divisor"]) == (6, 12)
    assert n["why"]["coverage_pct"]["differ"] is False and n["why"]["steps_recorded"]["differ"] is True
    assert data["total_device_time_us"]["a"] == pytest.approx(s6["total_device_time_us"] / 6, abs=1e-3)
    assert data["total_device_time_us"]["b"] == pytest.approx(s12["total_device_time_us"] / 12, abs=1e-3)
    mm = next(o for o in data["ops"] if o["name"] == "aten::mm")
    assert mm["calls"]["a"] == mm["calls"]["b"] == 4  # four GEMMs per step on both sides


def test_runs_without_steps_of_different_coverage_compare_per_recorded_second(runner, tmp_path):
    x = torch.randn(256, 256)

    def loop(name: str, **limits) -> Path:
        with ns.profile_neuron(name=name, output_dir=tmp_path, device="cpu", **limits) as run:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                torch.tanh(x @ x)
        assert run.wait(60) and run.path is not None, run
        return run.path

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        full, cut = loop("full"), loop("cut", max_seconds=0.25)  # all of it; about a quarter of it
    finally:
        torch.set_num_threads(threads)
    sf, mf, _ = _read(full)
    sc, mc, _ = _read(cut)
    assert sf["diagnosis"]["steps"] is None and sc["diagnosis"]["steps"] is None
    assert mc["coverage"]["stopped"] == "duration" and "coverage" not in mf
    _, data = _diff_json(runner, full, cut)
    n = data["normalised"]
    assert n["basis"] == "per_recorded_second" and n["why"]["coverage_pct"]["differ"] is True
    full_s = (sf["diagnosis"]["window_end_ns"] - sf["diagnosis"]["window_start_ns"]) / 1e9  # recorded it all
    cut_s = mc["coverage"]["recorded_ns"] / 1e9
    assert n["a"]["divisor"] == pytest.approx(full_s, rel=1e-5) and n["b"]["divisor"] == pytest.approx(cut_s, rel=1e-5)
    raw = {p: {r["name"]: r["self_device_time_us"] for r in s["rows"]} for p, s in (("a", sf), ("b", sc))}
    mm = next(o for o in data["ops"] if o["name"] == "aten::mm")
    assert mm["self_device_time_us"]["a"] == pytest.approx(raw["a"]["aten::mm"] / full_s, rel=1e-4)
    assert mm["self_device_time_us"]["b"] == pytest.approx(raw["b"]["aten::mm"] / cut_s, rel=1e-4)
    assert data["headline"].startswith("self device time per recorded s ")
    assert data["explanation"]["contributions"] and "per recorded s" in runner.invoke(cli, ["diff", str(full), str(cut)]).stdout


@pytest.mark.parametrize(
    ("a", "b", "basis"),
    [
        (RunExtent(1e6, 1.02e6, 1, 50), RunExtent(1e6, 1.0e6, 1, 50), "total"),  # coverage 98% vs 100%: alike
        (RunExtent(0.74e6, 1e6, 4, 50), RunExtent(0.57e6, 1e6, 4, 50), "per_step"),  # 74% vs 57%, same steps
        (RunExtent(0.5e6, 1e6, 2), RunExtent(0.5e6, 1e6, 3), "per_recorded_second"),  # windows differ, no steps
        (RunExtent(1e6, 1e6, 1, 20), RunExtent(0.4e6, 1e6, 1), "per_recorded_second"),  # steps on one side only
        (RunExtent(1e6, 1e6, 1, 20), None, "total"),  # a bare summary: nothing known to divide by
    ],
)
def test_choose_basis(a, b, basis):
    assert choose_basis(a, b).basis == basis
