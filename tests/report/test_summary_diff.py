"""``diff_summaries``: deltas, presence, regions, regressions and JSON, on real profiles."""

from __future__ import annotations

import json
import math

import pytest

import neuronscope as ns
from neuronscope.analysis.diff import Delta, diff_summaries


@pytest.fixture(scope="module")
def summaries(report_profiles):
    return {name: ns.load_run(getattr(report_profiles, name)).summary for name in ("small", "big", "fused")}


def test_identical_summaries_have_no_change(summaries):
    s = summaries["small"]
    d = diff_summaries(s, s)
    assert d.total.delta == 0 and d.total.pct == 0.0
    assert all(o.presence == "both" and o.self_device_time_us.delta == 0 and o.calls.delta == 0 for o in d.ops)
    assert {o.name for o in d.ops} == {r.name for r in s.rows}
    assert d.only_in_a == [] and d.only_in_b == []
    assert d.regressions(0.0, [r.name for r in s.rows]) == []
    assert [r.path for r in d.regions] == ["forward", "forward/norm"]
    assert all(r.occurrences.delta == 0 and r.device_time_us.pct == 0.0 for r in d.regions)


def test_deltas_match_the_two_summaries(summaries):
    a, b = summaries["small"], summaries["big"]
    d = diff_summaries(a, b)
    assert d.total.a == a.total_device_time_us and d.total.b == b.total_device_time_us
    assert d.total.pct == pytest.approx(100 * (b.total_device_time_us - a.total_device_time_us) / a.total_device_time_us)
    for o in d.ops:
        ra, rb = a[o.name], b[o.name]
        assert o.calls.a == ra.calls and o.calls.b == rb.calls and isinstance(o.calls.b, int)
        assert o.self_device_time_us.delta == pytest.approx(rb.self_device_time_us - ra.self_device_time_us)
        assert o.device_time_us.b == rb.device_time_us and o.self_cpu_time_us.a == ra.self_cpu_time_us
    deltas = [abs(o.self_device_time_us.delta) for o in d.ops]
    assert deltas == sorted(deltas, reverse=True)
    norm = next(r for r in d.regions if r.path == "forward/norm")
    assert norm.occurrences.a == 2 and norm.occurrences.b == 20
    assert norm.device_time_us.b == pytest.approx(b.regions["forward/norm"].total_device_time_us)


def test_ops_only_on_one_side(summaries):
    a, b = summaries["fused"], summaries["small"]
    d = diff_summaries(a, b)
    names_a, names_b = {r.name for r in a.rows}, {r.name for r in b.rows}
    assert set(d.only_in_a) == names_a - names_b and d.only_in_a, (names_a, names_b)
    assert set(d.only_in_b) == names_b - names_a and d.only_in_b, (names_a, names_b)
    new = d.op(d.only_in_b[0])
    assert new.presence == "only_b" and new.self_device_time_us.a == 0 and new.self_device_time_us.pct is None
    gone = d.op(d.only_in_a[0])
    assert gone.presence == "only_a" and gone.self_device_time_us.b == 0 and gone.self_device_time_us.pct == -100.0
    # A new op is a regression whatever the threshold; a vanished one never is.
    regs = d.regressions(1e9, [new.name, gone.name], total=False)
    assert [(r.what, r.name, r.pct) for r in regs] == [("op", new.name, None)], (new, gone)
    assert "new in B" in regs[0].describe()


def test_regression_thresholds(summaries):
    d = diff_summaries(summaries["small"], summaries["big"])
    pct = d.total.pct
    assert pct > 100
    (total,) = d.regressions(pct - 1)
    assert total.what == "total" and total.pct == pytest.approx(pct)
    assert d.regressions(pct + 1) == []  # "more than pct": at the threshold it passes
    assert d.regressions(pct) == []
    assert d.regressions(0, total=False) == []
    reverse = diff_summaries(summaries["big"], summaries["small"])
    assert reverse.total.pct < 0 and reverse.regressions(0.0, [o.name for o in reverse.ops]) == []


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", True])
def test_regressions_rejects_a_bad_threshold(summaries, bad):
    d = diff_summaries(summaries["small"], summaries["small"])
    with pytest.raises(ValueError, match="pct"):
        d.regressions(bad)


def test_regressions_rejects_an_unknown_op(summaries):
    d = diff_summaries(summaries["small"], summaries["big"])
    with pytest.raises(KeyError, match="aten::nothing"):
        d.regressions(5, ["aten::nothing"])


def test_to_dict_is_json(summaries):
    d = diff_summaries(summaries["fused"], summaries["small"])
    data = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert data["schema_version"] == 1 and data["device_a"] == data["device_b"] == "cpu"
    assert len(data["ops"]) == len(d.ops) and data["only_in_b"] == d.only_in_b
    first = data["ops"][0]
    assert set(first) == {"name", "presence", "calls", "self_device_time_us", "device_time_us", "self_cpu_time_us"}
    assert set(first["self_device_time_us"]) == {"a", "b", "delta", "pct"}
    assert set(data["regions"][0]) == {"path", "presence", "occurrences", "wall_time_us", "device_time_us"}


def test_delta_arithmetic():
    assert Delta(0.0, 0.0).pct == 0.0 and not Delta(0.0, 0.0).regressed(0)
    assert Delta(0.0, 1.0).pct is None and Delta(0.0, 1.0).regressed(1e12)
    assert Delta(2.0, 3.0).pct == 50.0 and Delta(2.0, 3.0).regressed(49.9) and not Delta(2.0, 3.0).regressed(50)
    assert Delta(2.0, 0.0).pct == -100.0 and not Delta(2.0, 0.0).regressed(0)
    assert Delta(1.0000004, 2.0).to_dict() == {"a": 1.0, "b": 2.0, "delta": 1.0, "pct": pytest.approx(99.99996, abs=1e-4)}
    assert not math.isnan(Delta(3, 3).pct)


def test_diff_across_devices_and_empty():
    empty = ns.Summary(rows=(), device="neuron")
    d = diff_summaries(empty, ns.Summary(rows=(), device="cpu"))
    assert d.device_a == "neuron" and d.device_b == "cpu" and d.ops == () and d.total.pct == 0.0
