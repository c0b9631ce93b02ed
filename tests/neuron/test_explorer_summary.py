"""Neuron Explorer summaries: reading the documented summary-json, the 2.34 renames, and
Explorer's published insight rules at each threshold (tools/neuron-explorer/overview-summary-page.rst).

Fixtures: tests/data/neuron/README.md says which documented fields each one is built from.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from neuronscope.analysis.diagnosis import Finding
from neuronscope.capture.devices.neuron_artifacts import find_artifacts
from neuronscope.capture.devices.neuron_explorer import collect_explorer
from neuronscope.capture.devices.neuron_explorer_summary import (
    aggregate,
    explorer_findings,
    findings_for_profiles,
    metrics_of,
    parse_summary,
    read_summary_file,
)

DATA = Path(__file__).parents[1] / "data" / "neuron"


def base(**fields: float) -> dict:
    """The documented 2.33 fixture's one device profile, with some fields replaced."""
    doc = json.loads((DATA / "summary-json.2.33.json").read_text())
    (name, f), = doc.items()
    return metrics_of({**f, **fields}, name)


def rules(metrics: dict) -> list[str]:
    return sorted(f.rule for f in explorer_findings(metrics))


# --------------------------------------------------------------------------- reading


def test_summary_json_fields_become_metrics():
    (m,) = read_summary_file(DATA / "summary-json.2.33.json")
    assert m["name"] == "profile_nc_0_session_0"
    assert m["total_time_s"] == 0.0125
    assert (m["mfu_percent"], m["hfu_percent"], m["mbu_percent"]) == (18.0, 31.0, 42.5)
    assert m["engine_active_percent"] == {"tensor": 45.0, "vector": 28.0, "scalar": 12.0, "gpsimd": 3.0, "sync": 8.0}
    assert m["dma_active_time_s"] == pytest.approx(0.00775) and m["cc_active_percent"] == 0.0
    assert m["spill_reload_bytes"] == 1_825_361_100 and m["hbm_read_bytes"] == 5_368_709_120
    assert m["fields_used"]["mbu_percent"] == "mbu_estimated_percent"
    assert "nki_coverage_percent" not in m  # not in the documented fields, so not invented


def test_neuron_2_34_renamed_fields_give_the_same_metrics():
    (old,) = read_summary_file(DATA / "summary-json.2.33.json")
    (new,) = read_summary_file(DATA / "summary-json.2.34.json")
    assert new["mbu_percent"] == old["mbu_percent"]
    assert new["fields_used"]["mbu_percent"] == "hbm_mbu_estimated_percent"
    assert new["dma_mbu_percent"] == 51.0
    assert new["hbm_read_bytes"] == old["hbm_read_bytes"]
    assert new["fields_used"]["hbm_read_bytes"] == "packet_hbm_read_bytes"  # the more accurate successor
    assert {k: v for k, v in new.items() if k not in ("fields_used", "dma_mbu_percent")} == {
        k: v for k, v in old.items() if k != "fields_used"
    }


def test_log_lines_before_the_json_are_skipped(tmp_path):
    out = tmp_path / "stdout.txt"
    out.write_text("INFO[0000] Processing profile ...\nWARN[0001] DMA results may not be accurate\n"
                   + (DATA / "summary-json.2.33.json").read_text())
    assert read_summary_file(out)[0]["total_time_s"] == 0.0125


def test_a_flat_object_and_a_list_of_rows_are_summaries_too():
    f = json.loads((DATA / "summary-json.2.33.json").read_text())["profile_nc_0_session_0"]
    assert parse_summary(f)[0]["mfu_percent"] == 18.0
    assert [p["name"] for p in parse_summary([f, f])] == ["profile_0", "profile_1"]
    assert parse_summary({"not": {"a": "summary"}}) == []


def test_throttle_summary_rows_nested_in_a_profile_are_read():
    m = metrics_of({"total_time": 1.0, "ThrottleSummary": [
        {"nc_idx": 0, "throttle_type": "activity_0", "throttle_active_time_percent": 1.0},
        {"nc_idx": 0, "throttle_type": "all", "throttle_active_time_percent": 4.0, "max_achievable_util_with_throttling_percent": 60.0},
    ]})
    assert m["throttle_active_percent"] == 4.0 and m["throttle_max_util_percent"] == 60.0


def test_parquet_summary_is_read_when_pyarrow_is_installed(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    f = json.loads((DATA / "summary-json.2.33.json").read_text())["profile_nc_0_session_0"]
    pq.write_table(pa.Table.from_pylist([f]), tmp_path / "Summary.parquet")
    assert read_summary_file(tmp_path / "Summary.parquet")[0]["mbu_percent"] == 42.5


# --------------------------------------------------------------------------- rules


def test_the_documented_fixture_fires_the_rules_its_numbers_call_for():
    m = base()
    found = {f.rule: f for f in explorer_findings(m)}
    assert set(found) == {"neuron_mfu_low", "neuron_spill_reload_high"}  # transpose is 6% (< 10%): no finding
    mfu = found["neuron_mfu_low"]
    assert isinstance(mfu, Finding)
    assert mfu.evidence["model_to_active"] == pytest.approx(0.4) and mfu.evidence["threshold"] == 0.5
    # us at stake: tensor-engine time not spent on model FLOPs = 12.5 ms x 45% x (1 - 0.4)
    assert mfu.us_at_stake == pytest.approx(12_500 * 0.45 * 0.6)
    assert mfu.severity == "high" and "pipeline" in mfu.message  # 27% of the on-device time
    spill = found["neuron_spill_reload_high"]
    # DMA time moving spill reloads: dma_active_time x reload / (HBM reads + writes)
    assert spill.us_at_stake == pytest.approx(7_750 * 1_825_361_100 / (5_368_709_120 + 1_073_741_824))
    assert spill.evidence["spill_reload_share"] == pytest.approx(0.34, abs=1e-3)
    # ordered by time at stake, JSON-able for the manifest
    assert [f.rule for f in explorer_findings(m)] == ["neuron_mfu_low", "neuron_spill_reload_high"]
    json.dumps([f.to_dict() for f in explorer_findings(m)])


@pytest.mark.parametrize(
    "fields, fires",
    [
        # Model FLOPs / active FLOPs = MFU / tensor-engine active %, < 0.50 fires
        ({"mfu_estimated_percent": 25.0, "tensor_engine_active_time_percent": 50.0}, False),  # 0.50
        ({"mfu_estimated_percent": 24.5, "tensor_engine_active_time_percent": 50.0}, True),  # 0.49
    ],
)
def test_model_to_active_flops_boundary(fields, fires):
    assert ("neuron_mfu_low" in rules(base(**fields))) is fires


@pytest.mark.parametrize("reload, fires", [(250, False), (251, True)])  # 25.0% -> none, 25.1% -> finding
def test_spill_reload_boundary(reload, fires):
    assert ("neuron_spill_reload_high" in rules(base(spill_reload_bytes=reload, hbm_read_bytes=1000))) is fires


@pytest.mark.parametrize("transpose, fires", [(100, False), (101, True)])  # 10.0% -> none, 10.1% -> finding
def test_transpose_boundary(transpose, fires):
    assert ("neuron_transpose_high" in rules(base(transpose_flops=transpose, hardware_flops=1000))) is fires


@pytest.mark.parametrize("nki, fires", [(500, False), (490, True)])  # 50% -> none, 49% -> finding
def test_nki_coverage_boundary(nki, fires):
    m = base(tensor_engine_instruction_count=1000, tensor_engine_nki_instruction_count=nki)
    found = [f for f in explorer_findings(m) if f.rule == "neuron_nki_coverage_low"]
    assert bool(found) is fires
    if fires:
        assert found[0].evidence["engine"] == "tensor" and found[0].evidence["nki_coverage_percent"] == 49.0


@pytest.mark.parametrize("throttled, fires", [(0.0, False), (0.1, True)])
def test_throttling_boundary(throttled, fires):
    assert ("neuron_throttling" in rules(base(throttle_active_time_percent=throttled))) is fires


def test_throttling_cost_uses_the_achievable_utilisation_when_known():
    assumed = next(f for f in explorer_findings(base(throttle_active_time_percent=10.0)) if f.rule == "neuron_throttling")
    known = next(f for f in explorer_findings(base(throttle_active_time_percent=10.0, max_achievable_util_with_throttling_percent=80.0))
                 if f.rule == "neuron_throttling")
    assert assumed.us_at_stake == pytest.approx(12_500 * 0.10 * 0.5) and assumed.evidence["assumed_utilisation"] is True
    assert known.us_at_stake == pytest.approx(12_500 * 0.10 * 0.2)


def test_missing_inputs_skip_a_rule_instead_of_guessing():
    assert explorer_findings({"name": "p", "total_time_s": 1.0}) == []
    assert explorer_findings(metrics_of({"total_time": 1.0, "mfu_estimated_percent": 1.0})) == []  # no tensor active %


def test_several_device_profiles_aggregate_and_merge_findings():
    a = base(total_time=0.01, dma_active_time=0.005, mfu_estimated_percent=10.0, tensor_engine_active_time_percent=50.0)
    b = base(total_time=0.03, dma_active_time=0.015, mfu_estimated_percent=40.0, tensor_engine_active_time_percent=50.0)
    b["name"] = "other"
    agg = aggregate([a, b])
    assert agg["profiles"] == 2 and agg["total_time_s"] == pytest.approx(0.04)
    assert agg["mfu_percent"] == pytest.approx((10 * 0.01 + 40 * 0.03) / 0.04)  # weighted by total_time
    merged = {f.rule: f for f in findings_for_profiles([a, b])}
    # only `a` is below 0.5 on model/active FLOPs; both spill
    assert merged["neuron_mfu_low"].evidence["profile"] == a["name"]
    spill = merged["neuron_spill_reload_high"]
    assert spill.us_at_stake == pytest.approx(sum(f.us_at_stake for p in (a, b) for f in explorer_findings(p) if f.rule == spill.rule))
    assert spill.evidence["profiles"] == ["other", a["name"]]  # worst first


# --------------------------------------------------------------------------- finding / running


def _profile_dir(root: Path, *, dropped: int = 0) -> Path:
    """A session-layout profile root as the emulated runtime writes it (fake Explorer input)."""
    session = root / "neuron" / "i-0abc_pid_7" / "20260101_000000_000001"
    session.mkdir(parents=True)
    (session / "neff_111_vnc_0.neff").write_text("NEFF placeholder\nop=aten::mul\n")
    (session / "profile_nc_0_session_0.ntff").write_text("NTFF placeholder\nnc=0\nneff_111 1000 400\nneff_111 2000 600\n")
    (session / "trace_info.pb").write_text("trace_info placeholder\n")
    (session / "ntrace.pb").write_text(
        "ntrace placeholder\nevent nrta_execute_schedule 900 50 7 0 neff_111\nevent nc_exec_running 1000 400 0 0 neff_111\n"
        f"capture stored=2 total={2 + dropped} dropped={dropped} max_events_per_nc=2\n"
    )
    return root


def _on_path(monkeypatch, bin_dir: Path) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_collect_reads_explorer_output_already_in_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no neuron-explorer anywhere
    run = _profile_dir(tmp_path / "run")
    (run / "explorer").mkdir()
    (run / "explorer" / "summary.json").write_text((DATA / "summary-json.2.34.json").read_text())
    (run / "explorer" / "system_profile.json").write_text((DATA / "system_profile.json").read_text())
    result = collect_explorer(run, find_artifacts(run / "neuron"), mode="off")
    manifest = result.to_manifest()
    assert manifest["status"] == "ok" and "commands" not in manifest
    assert manifest["metrics"]["mbu_percent"] == 42.5
    assert {f["rule"] for f in manifest["findings"]} == {"neuron_mfu_low", "neuron_spill_reload_high"}
    assert manifest["system_profile"].endswith("explorer/system_profile.json")
    assert result.summary_line().startswith("Neuron Explorer: device time 12.500 ms · MFU 18.0% · HFU 31.0% · MBU 42.5%")
    json.dumps(manifest)


def test_collect_runs_neuron_explorer_when_installed(tmp_path, monkeypatch):
    from neuronscope.testing import install_fake_neuron_explorer

    _on_path(monkeypatch, install_fake_neuron_explorer(tmp_path / "bin").parent)
    monkeypatch.setenv("NEURONSCOPE_FAKE_EXPLORER_SUMMARY", json.dumps({"transpose_flops": 30, "hardware_flops": 100}))
    run = _profile_dir(tmp_path / "run", dropped=5)
    result = collect_explorer(run, find_artifacts(run / "neuron"))
    assert result.status == "ok", result.errors
    assert result.commands[0].endswith(f"view -d {run / 'neuron'} --output-format summary-json --output-file {run / 'explorer' / 'summary.json'}")
    assert "--ignore-device-profile" in result.commands[1]
    # 2 executions in the NTFF: [1000, 1400] and [2000, 2600] ns
    assert result.metrics["total_time_s"] == pytest.approx(1600e-9)
    assert [f.rule for f in result.findings] == ["neuron_transpose_high"]
    assert result.system_profile == str(run / "explorer" / "system_profile.json")
    # Explorer's documented warning when it processes a capture that dropped events
    assert result.dropped is not None and (result.dropped.dropped, result.dropped.stored, result.dropped.total) == (5, 2, 7)


def test_a_hanging_or_failing_explorer_costs_a_note_not_the_run(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "neuron-explorer"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\nif '--fail' in open(__file__).read(): pass\ntime.sleep(30)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    _on_path(monkeypatch, bin_dir)
    run = _profile_dir(tmp_path / "run")
    result = collect_explorer(run, find_artifacts(run / "neuron"), timeout_s=1)
    assert result.status != "ok" and any("timed out after 1 s" in e for e in result.errors)
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint('ERRO[0000] No metadata found for system profile: x', file=sys.stderr)\nsys.exit(3)\n")
    result = collect_explorer(run, find_artifacts(run / "neuron"), timeout_s=10)
    assert any("exited 3" in e and "No metadata found" in e for e in result.errors)


def test_explorer_absent_or_profile_too_big(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr("neuronscope.capture.devices.neuron_explorer._DEFAULT_DIR", str(tmp_path / "none"))
    run = _profile_dir(tmp_path / "run")
    absent = collect_explorer(run, find_artifacts(run / "neuron"))
    assert absent.status == "not_installed" and any("aws-neuronx-tools" in n for n in absent.notes)
    from neuronscope.testing import install_fake_neuron_explorer

    _on_path(monkeypatch, install_fake_neuron_explorer(tmp_path / "bin").parent)
    big = collect_explorer(run, find_artifacts(run / "neuron"), max_ntff_bytes=10)
    assert big.status == "skipped" and any("explorer_max_ntff_bytes" in n for n in big.notes)
    # the device summary is skipped; the system profile (no NTFF processing) is still made
    assert not (run / "explorer" / "summary.json").exists() and big.system_profile == str(run / "explorer" / "system_profile.json")
    assert len(big.commands) == 1 and "--ignore-device-profile" in big.commands[0]
    forced = collect_explorer(run, find_artifacts(run / "neuron"), mode="on", max_ntff_bytes=10)
    assert forced.status == "ok" and len(forced.commands) == 1  # the system profile was already there


def test_a_runtime_only_capture_still_gets_its_system_profile(tmp_path, monkeypatch):
    from neuronscope.testing import install_fake_neuron_explorer

    _on_path(monkeypatch, install_fake_neuron_explorer(tmp_path / "bin").parent)
    run = _profile_dir(tmp_path / "run")
    for ntff in (run / "neuron").rglob("*.ntff"):
        ntff.unlink()
    for neff in (run / "neuron").rglob("*.neff"):
        neff.unlink()
    result = collect_explorer(run, find_artifacts(run / "neuron", device_mode=False))
    assert result.profiles == [] and result.system_profile is not None and result.errors == []
