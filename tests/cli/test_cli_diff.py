"""``neuronscope diff``: tables, --json, and the --fail-if-slower CI gate (exit 0/1/2)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import neuronscope as ns
from cli._profiles import COMMITTED_TRACE, PYTHON
from neuronscope.cli import cli


def test_diff_table(runner, profiles):
    result = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big), "--by-region"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "self device time" in out and "A = small" in out and "B = big" in out
    assert "aten::pow" in out and "Regions" in out and "forward/norm" in out
    first = next(line for line in out.splitlines() if line.startswith("aten::"))
    assert "+" in first  # the biggest change is a slowdown (B does 15x the steps on 256x the data)


def test_diff_new_and_gone_ops(runner, profiles):
    fused, small = ns.load_run(profiles.fused).summary, ns.load_run(profiles.small).summary
    gone = {r.name for r in fused.rows} - {r.name for r in small.rows}
    new = {r.name for r in small.rows} - {r.name for r in fused.rows}
    assert gone and new
    result = runner.invoke(cli, ["diff", str(profiles.fused), str(profiles.small), "--top", "0"], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("aten::")}
    assert all("gone" in rows[name] for name in gone)
    assert all("new" in rows[name] for name in new)


def test_diff_json_schema(runner, profiles):
    result = runner.invoke(cli, ["diff", str(profiles.fused), str(profiles.small), "--json", "--top", "0"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["gate"] is None
    assert {"a", "b", "device_a", "device_b", "total_device_time_us", "op_count", "top", "ops", "regions", "only_in_a", "only_in_b", "gate"} <= set(data)
    assert data["a"]["label"] == "fused" and data["b"]["label"] == "small"
    fused, small = ns.load_run(profiles.fused).summary, ns.load_run(profiles.small).summary
    total = data["total_device_time_us"]
    assert total["a"] == pytest.approx(fused.total_device_time_us, abs=1e-3)
    assert total["b"] == pytest.approx(small.total_device_time_us, abs=1e-3)
    assert total["delta"] == pytest.approx(total["b"] - total["a"], abs=2e-3)
    only_b = sorted({r.name for r in small.rows} - {r.name for r in fused.rows})
    assert data["only_in_b"] and sorted(data["only_in_b"]) == only_b
    assert sorted(data["only_in_a"]) == sorted({r.name for r in fused.rows} - {r.name for r in small.rows})
    names = {o["name"] for o in data["ops"]}
    assert names == {r.name for r in fused.rows} | {r.name for r in small.rows} and data["op_count"] == len(names)
    new = next(o for o in data["ops"] if o["name"] == only_b[0])
    assert new["presence"] == "only_b" and new["self_device_time_us"]["a"] == 0.0 and new["self_device_time_us"]["pct"] is None
    calls = small[only_b[0]].calls
    assert new["calls"] == {"a": 0, "b": calls, "delta": calls, "pct": None}
    deltas = [abs(o["self_device_time_us"]["delta"]) for o in data["ops"]]
    assert deltas == sorted(deltas, reverse=True)
    assert [r["path"] for r in data["regions"]] == ["forward", "forward/norm"]
    assert data["regions"][1]["occurrences"] == {"a": 2, "b": 2, "delta": 0, "pct": 0.0}


def test_gate_fails_on_a_slowdown(runner, profiles):
    result = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big), "--fail-if-slower", "5"])
    assert result.exit_code == 1
    assert "FAIL: total device time" in result.stderr and "more than 5% slower" in result.stderr


def test_gate_passes_on_a_speedup_and_on_no_change(runner, profiles):
    faster = runner.invoke(cli, ["diff", str(profiles.big), str(profiles.small), "--fail-if-slower", "5"])
    assert faster.exit_code == 0, faster.stderr
    assert "OK: total device time within 5% of A" in faster.stderr
    same = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.small), "--fail-if-slower", "0", "--op", "aten::pow"])
    assert same.exit_code == 0, same.stderr
    assert "OK: total device time and aten::pow within 0% of A" in same.stderr


def test_gate_on_a_listed_op(runner, profiles):
    # Total allowed to grow a lot, but an op that only B (naive RMSNorm) has counts as slower.
    fused, small = ns.load_run(profiles.fused).summary, ns.load_run(profiles.small).summary
    new = next(r.name for r in small.rows if r.name not in fused)
    args = ["diff", str(profiles.fused), str(profiles.small), "--fail-if-slower", "1000000"]
    assert runner.invoke(cli, args).exit_code == 0
    result = runner.invoke(cli, [*args, "--op", new])
    assert result.exit_code == 1
    assert f"FAIL: {new}" in result.stderr and "new in B" in result.stderr
    # An op that only A has got faster (it vanished): not a regression.
    gone = next(r.name for r in fused.rows if r.name not in small)
    assert runner.invoke(cli, [*args, "--op", gone]).exit_code == 0


def test_gate_json_reports_the_regressions(runner, profiles):
    result = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big), "--json", "--fail-if-slower", "5", "--op", "aten::mul"])
    assert result.exit_code == 1
    gate = json.loads(result.stdout)["gate"]
    assert gate["passed"] is False and gate["fail_if_slower_pct"] == 5 and gate["ops"] == ["aten::mul"]
    assert [(r["what"], r["name"]) for r in gate["regressions"]] == [("total", "total device time"), ("op", "aten::mul")]
    assert all(r["pct"] > 5 for r in gate["regressions"])


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--fail-if-slower", "-1"], "--fail-if-slower"),
        (["--fail-if-slower", "lots"], "--fail-if-slower"),
        (["--op", "aten::pow"], "--op"),  # --op without --fail-if-slower
        (["--fail-if-slower", "5", "--op", "aten::typo"], "aten::typo"),
    ],
)
def test_diff_usage_errors(runner, profiles, extra, needle):
    result = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big), *extra])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    err = result.stderr
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_diff_missing_b_exits_1(runner, profiles, tmp_path):
    result = runner.invoke(cli, ["diff", str(profiles.small), str(tmp_path / "gone")])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and str(tmp_path / "gone") in result.stderr


def test_diff_gate_in_a_real_process(profiles):
    """What CI sees: the exit status of `python -m neuronscope diff ... --fail-if-slower`."""

    def gate(a, b) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PYTHON, "-m", "neuronscope", "diff", str(a), str(b), "--fail-if-slower", "5"],
            capture_output=True, text=True, timeout=120, env=dict(os.environ),
        )  # fmt: skip

    slower = gate(profiles.small, profiles.big)
    assert slower.returncode == 1 and "FAIL" in slower.stderr and "Traceback" not in slower.stderr
    same = gate(COMMITTED_TRACE, COMMITTED_TRACE)
    assert same.returncode == 0 and "OK" in same.stderr


def test_diff_explains_the_change_in_wall_time(runner, profiles):
    import json as _json

    result = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big), "--json"])
    assert result.exit_code == 0, result.stderr
    ex = _json.loads(result.stdout)["explanation"]
    parts = ex["contributions"]
    assert abs(sum(c["delta_us"] for c in parts) - ex["delta_us"]) < 0.01 * len(parts) + 0.01
    assert ex["delta_us"] > 0  # big is slower
    assert abs(parts[0]["delta_us"]) == max(abs(c["delta_us"]) for c in parts)  # largest first
    text = runner.invoke(cli, ["diff", str(profiles.small), str(profiles.big)], env={"COLUMNS": "150"}).stdout
    assert "Why:" in text and "B is " in text and "slower than A" in text
