"""ns.stats() partitions calls exactly (issue 27.5): every call of a profiled function or
block ends in one outcome, so the outcomes add up to the calls."""

from __future__ import annotations

import threading

import torch

import neuronscope as ns
from neuronscope import _stats
from neuronscope.capture import processing


def _outcomes_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in ("calls", *_stats.OUTCOMES)}


def test_outcomes_add_up_to_the_calls_with_sampling_triggers_skips_and_failures(monkeypatch):
    ns.flush(30)
    before = ns.stats()
    lin = torch.nn.Linear(32, 32)

    @ns.profile_neuron(name="every3", every=3)
    def every3(x):
        return lin(x)

    @ns.profile_neuron(name="served", trigger=ns.SlowCalls(min_calls=20, quantile=0.9, capture=1))
    def served(x):
        return lin(x)

    for i in range(30):
        every3(torch.randn(4, 32))
        served(torch.randn(4 if i % 11 else 512, 32))
    with ns.profile_neuron(name="block"):
        lin(torch.randn(4, 32))
    # a profile on another thread while this one records: skipped, not lost
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ns.profile_neuron(name="holder"):
            inside.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(30)
    with ns.profile_neuron(name="contended") as contended:
        lin(torch.randn(4, 32))
    release.set()
    t.join(30)
    # a profile whose processing fails: counted as failed, the call unaffected (the others
    # are processed first, so that only this one meets the broken stage)
    ns.flush(30)
    monkeypatch.setattr(processing, "analyse_segments", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with ns.profile_neuron(name="broken") as broken:
        lin(torch.randn(4, 32))
    ns.flush(30)
    d = _outcomes_delta(before, ns.stats())
    assert contended.status == "skipped" and broken.status == "failed"
    assert d["skipped"] >= 1 and d["failed"] == 1 and d["unsampled"] >= 20 and d["profiled"] >= 12
    assert d["calls"] == 30 + 30 + 4  # every3, served, and the four with-blocks
    assert d["calls"] == sum(d[k] for k in _stats.OUTCOMES), d
