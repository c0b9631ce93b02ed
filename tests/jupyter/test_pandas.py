"""``Summary.to_pandas()`` and ``Diagnosis.to_pandas(what)`` against the objects they come from,
read here another way (the JSON form, the workload's known op counts, the roofline's own formula)."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import pytest

import neuronscope as ns
from neuronscope.analysis.diagnosis.model import GAP_CLASSES
from neuronscope.analysis.roofline import AT_LIMIT_PCT

from ._workload import STEPS

pd = pytest.importorskip("pandas")

SCALARS = (
    "name",
    "calls",
    "device_time_us",
    "self_device_time_us",
    "device_pct",
    "cpu_time_us",
    "self_cpu_time_us",
    "first_start_ns",
    "last_end_ns",
    "compile_time_us",
    "compile",
)


def _same(a, b) -> bool:
    """``a`` (from the object) is ``b`` (from the frame); a missing value may read back as NaN."""
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12))


def test_summary_frame_is_the_rows_of_the_json_form(runs):
    summary = runs.shaped.summary
    df = summary.to_pandas()
    saved = summary.to_dict()["rows"]  # the serialised form: another path from the same rows
    assert len(df) == len(saved) == len(summary.rows) > 0
    assert list(df.columns[: len(SCALARS)]) == list(SCALARS) and "label" in df.columns
    for i, row in enumerate(saved):
        for col in SCALARS:
            assert _same(row[col], df[col].iloc[i]), (row["name"], col)
        work, roof = row["work"], row["roofline"]
        if work is not None:
            for key in ("calls", "flops", "bytes", "time_us", "family", "not_counted", "reason"):
                assert _same(work[key], df[f"work_{key}"].iloc[i]), (row["name"], key)
        if roof is None:
            assert pd.isna(df["roofline_pct_of_roof"].iloc[i])
            continue
        for key, value in roof.items():
            assert _same(value, df[f"roofline_{key}"].iloc[i]), (row["name"], key)
        # the derived columns, from the roofline's definitions
        assert df["roofline_at_limit"].iloc[i] == (roof["pct_of_roof"] >= AT_LIMIT_PCT)
        assert math.isclose(
            df["roofline_time_at_stake_us"].iloc[i], max(roof["time_us"] - roof["time_at_roof_us"], 0.0), abs_tol=1e-9
        )
        assert math.isclose(df["roofline_pct_of_roof"].iloc[i], 100 * roof["time_at_roof_us"] / roof["time_us"], rel_tol=1e-9)


def test_summary_frame_counts_what_the_workload_ran(runs):
    df = runs.shaped.summary.to_pandas().set_index("name")
    assert df.loc["aten::mm", "calls"] == STEPS and df.loc["aten::relu", "calls"] == STEPS
    assert df.loc["aten::mm", "roofline_bound"] in ("compute", "memory")
    assert df.loc["aten::mm", "work_flops"] == STEPS * 2 * 64 * 64 * 64  # 64x64 @ 64x64, once a step
    not_compile = df[~df["compile"]]
    assert math.isclose(not_compile["device_pct"].sum(), 100.0, abs_tol=0.01)
    assert math.isclose(df["self_device_time_us"].sum(), runs.shaped.summary.total_device_time_us, rel_tol=1e-9)


def test_a_summary_without_shapes_has_no_work_or_roofline_columns(runs):
    df = runs.plain.summary.to_pandas()
    assert not [c for c in df.columns if c.startswith(("work_", "roofline_"))]
    assert list(df["name"]) == [r.name for r in runs.plain.summary.rows]
    assert ns.Summary(rows=()).to_pandas().empty


def test_diagnosis_findings_frame():
    findings = tuple(
        ns.Finding(rule=f"r{i}", message=f"m{i}", us_at_stake=10.0 - i, severity="low", us_per_step=None if i else 2.5)
        for i in range(3)
    )
    d = _bare_diagnosis(findings)
    df = d.to_pandas()  # findings by default
    assert list(df.columns) == ["rule", "severity", "message", "us_at_stake", "us_per_step", "evidence"]
    assert list(df["rule"]) == ["r0", "r1", "r2"] and list(df["us_at_stake"]) == [10.0, 9.0, 8.0]
    assert df["us_per_step"].iloc[0] == 2.5 and pd.isna(df["us_per_step"].iloc[1])
    assert d.to_pandas("findings").equals(df)
    assert _bare_diagnosis(()).to_pandas().empty


def test_diagnosis_steps_frame(runs):
    d = runs.shaped.diagnosis
    df = d.to_pandas("steps")
    assert list(df.columns) == ["index", "start_ns", "duration_us", "device_busy_pct", "bound_by"]
    assert len(df) == STEPS == d.steps.count
    assert list(df["index"]) == list(range(STEPS))
    assert list(df["duration_us"]) == [s.duration_us for s in d.steps.per_step]
    assert df["start_ns"].is_monotonic_increasing
    assert d.steps.max_us == df["duration_us"].max()
    assert _bare_diagnosis(()).to_pandas("steps").empty


def test_diagnosis_gaps_frame(runs):
    d = runs.plain.diagnosis
    df = d.to_pandas("gaps")
    assert list(df.columns) == [
        "start_ns",
        "offset_us",
        "duration_us",
        "cls",
        "step",
        "before",
        "after",
        "host",
        "source",
        "wait",
    ]
    assert d.timeline_data is not None
    assert len(df) == len(d.timeline_data.gaps) == min(d.gaps.count, 2000)
    assert df["start_ns"].is_monotonic_increasing
    assert (df["duration_us"] >= d.gaps.threshold_us - 1e-3).all()
    assert df["duration_us"].sum() <= d.device_idle_us + 1.0
    assert set(df["cls"]) <= set(GAP_CLASSES)
    assert ((df["start_ns"] - d.window_start_ns) / 1e3 == df["offset_us"]).all()
    # the longest gaps carry their detail
    for g in d.gaps.top:
        row = df[df["start_ns"] == g.start_ns].iloc[0]
        assert row["duration_us"] == g.duration_us and row["cls"] == g.cls and _same(g.after, row["after"])
    # a diagnosis without its timeline (an old save): the longest gaps alone
    old = replace(d, timeline_data=None).to_pandas("gaps")
    assert list(old["start_ns"]) == sorted(g.start_ns for g in d.gaps.top)


def test_a_bad_table_name_is_a_configuration_error(runs):
    with pytest.raises(ns.ConfigurationError, match="findings, steps, gaps"):
        runs.plain.diagnosis.to_pandas("kernels")


def test_without_pandas_the_error_says_what_to_install(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    for call in (runs.plain.summary.to_pandas, runs.plain.diagnosis.to_pandas):
        with pytest.raises(ImportError, match=r'pip install "neuronscope\[notebook\]"'):
            call()
    assert "nsnb-ops" in runs.plain.summary._repr_html_()  # the HTML needs no pandas


def _bare_diagnosis(findings) -> ns.Diagnosis:
    from neuronscope.analysis.diagnosis.model import Gaps

    return ns.Diagnosis(
        device="cpu",
        timeline="cpu_main_thread",
        window_start_ns=0,
        window_end_ns=1000,
        device_busy_us=1.0,
        device_idle_us=0.0,
        device_busy_pct=100.0,
        idle_us_by_class={},
        gaps=Gaps(threshold_us=50.0, count=0, total_us=0.0, us_by_class={}, count_by_class={}),
        steps=None,
        bound_by="device",
        evidence={},
        findings=findings,
    )
