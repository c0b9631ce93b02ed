"""ns.arm(): the next N calls of decorated functions are profiled, whatever their sampling says."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import torch

import neuronscope as ns
from neuronscope.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _nothing_armed():
    ns.disarm()
    yield
    ns.disarm()
    ns.configure(enabled=True)


def _work(x: torch.Tensor) -> torch.Tensor:
    return (x @ x).relu()


def test_arm_profiles_exactly_the_next_n_calls_then_sampling_again(xw):
    x = torch.randn(16, 16)
    infer = ns.profile_neuron(name="armed-infer", sample=0.0)(_work)
    infer(x)
    req = ns.arm(3)
    assert isinstance(req, ns.ArmRequest) and not req.done and req.state == "pending"
    for _ in range(10):
        infer(x)
    runs = req.wait(60)
    assert req.state == "filled" and req.done
    assert len(runs) == 3 == req.profiled
    assert ns.flush(30)
    stats = ns.stats()
    assert stats["armed"] == 3 and stats["profiled"] == 3 and stats["triggered"] == 0
    assert stats["unsampled"] == 8  # 11 calls, 3 armed
    for i, run in enumerate(runs, 1):
        assert run.status == "complete" and run.path is not None
        assert run.trigger.kind == "arm" and f"call {i} of 3" in run.trigger.reason
        assert run.summary is not None and any(r.name == "aten::mm" for r in run.summary.rows)
        manifest = json.loads((run.path / "manifest.json").read_text())
        assert manifest["trigger"]["kind"] == "arm"
        loaded = ns.load_run(run.path)
        assert loaded.trigger == run.trigger
        assert loaded.baseline is None and loaded.explanation is None


def test_arm_overrides_warmup_and_every(xw):
    x = torch.randn(8, 8)
    infer = ns.profile_neuron(name="warm", warmup=1000, every=1000)(_work)
    req = ns.arm(2)
    for _ in range(2):
        infer(x)
    assert [r.trigger.kind for r in req.wait(60)] == ["arm", "arm"]


def test_name_filter_only_counts_calls_of_that_profile():
    x = torch.randn(8, 8)
    a = ns.profile_neuron(name="profile-a", sample=0.0)(_work)
    b = ns.profile_neuron(name="profile-b", sample=0.0)(_work)
    req = ns.arm(2, name="profile-b")
    for _ in range(5):
        a(x)
    assert req.state == "pending" and req.runs == []
    b(x)
    a(x)
    b(x)
    runs = req.wait(60)
    assert [r.name for r in runs] == ["profile-b", "profile-b"]
    assert "of 'profile-b'" in runs[0].trigger.reason


def test_a_request_not_filled_in_time_expires_and_is_counted():
    x = torch.randn(8, 8)
    infer = ns.profile_neuron(name="expiring", sample=0.0)(_work)
    req = ns.arm(2, name="never-called", timeout_s=0.2)
    t0 = time.monotonic()
    assert req.wait(30) == []
    assert time.monotonic() - t0 < 10
    assert req.state == "expired" and req.done
    infer(x)  # not armed any more
    assert ns.flush(30)
    assert ns.stats()["arm_expired"] == 1 and ns.stats()["profiled"] == 0


def test_wait_timeout_returns_what_there_is():
    req = ns.arm(1, name="nobody", timeout_s=60)
    t0 = time.monotonic()
    assert req.wait(timeout=0.2) == []
    assert time.monotonic() - t0 < 5 and req.state == "pending"


def test_disarm_cancels_what_is_pending():
    x = torch.randn(8, 8)
    infer = ns.profile_neuron(name="disarmed", sample=0.0)(_work)
    first, second = ns.arm(5), ns.arm(1, name="disarmed")
    assert ns.disarm() == 2
    assert first.state == "cancelled" and second.state == "cancelled"
    for _ in range(3):
        infer(x)
    assert ns.flush(30)
    assert ns.stats()["armed"] == 0 and first.wait(1) == [] and first.done


def test_the_kill_switch_wins(monkeypatch):
    x = torch.randn(8, 8)
    infer = ns.profile_neuron(name="killed", sample=0.0)(_work)
    ns.configure(enabled=False)
    req = ns.arm(2, timeout_s=30)
    for _ in range(3):
        infer(x)
    assert req.runs == [] and req.state == "pending"
    ns.configure(enabled=True)
    infer(x)
    assert len(req.wait(0.0)) == 1 or req.runs  # the request goes on once enabled again
    ns.disarm()
    monkeypatch.setenv("NEURONSCOPE_DISABLED", "1")
    plain = ns.profile_neuron(name="off")(_work)
    assert plain is _work  # not even a wrapper: nothing to arm


def test_an_async_function_can_be_armed():
    x = torch.randn(8, 8)

    @ns.profile_neuron(name="async-infer", sample=0.0)
    async def infer(a):
        await asyncio.sleep(0)
        return _work(a)

    async def main():
        req = ns.arm(2)
        calls = [infer(x) for _ in range(4)]  # decided when called, before any runs
        for call in calls:
            await call
        return req

    req = asyncio.run(main())
    runs = req.wait(60)
    assert len(runs) == 2 and all(r.status == "complete" for r in runs)
    assert ns.stats()["armed"] == 2


def test_arm_validates_its_arguments():
    for bad in (dict(calls=0), dict(calls=True), dict(calls=1.5), dict(name=""), dict(name="a\nb"), dict(name=3),
                dict(timeout_s=0), dict(timeout_s=float("nan")), dict(timeout_s="1")):
        with pytest.raises(ConfigurationError):
            ns.arm(**{"calls": 1, **bad})
    assert ns.disarm() == 0
