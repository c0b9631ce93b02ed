"""Sampling rules: warmup, every, sample (seeded), sampler, max_per_minute; bad values fail early."""

from __future__ import annotations

import time

import pytest
import torch

import neuronscope as ns
from neuronscope.capture.sampling import SamplingPolicy


def _decisions(policy: SamplingPolicy, n: int) -> list[bool]:
    return [policy.should_profile() for _ in range(n)]


def test_warmup_then_every_nth():
    d = _decisions(SamplingPolicy(warmup=3, every=4), 12)
    assert [i for i, yes in enumerate(d) if yes] == [3, 7, 11]


def test_seeded_sampling_is_repeatable_and_near_its_rate():
    a = _decisions(SamplingPolicy(sample=0.1, seed=42), 5000)
    b = _decisions(SamplingPolicy(sample=0.1, seed=42), 5000)
    assert a == b and 400 < sum(a) < 600


def test_custom_sampler_and_rate_limit():
    calls = iter([True, False, True, True, True])
    assert _decisions(SamplingPolicy(sampler=lambda: next(calls)), 5) == [True, False, True, True, True]
    assert sum(_decisions(SamplingPolicy(max_per_minute=3), 50)) == 3


def test_stats_count_unsampled_and_warmup(xw):
    @ns.profile_neuron(warmup=2, every=3)
    def infer(a):
        return a.sum()

    for _ in range(11):
        infer(xw[0])
    ns.flush(30)
    s = ns.stats()
    assert s["warmup"] == 2 and s["profiled"] == 3 and s["unsampled"] == 8  # profiled: calls 2, 5, 8


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sample": 1.5}, "sample"),
        ({"sample": -0.1}, "sample"),
        ({"sample": "10%"}, "sample"),
        ({"every": 0}, "every"),
        ({"max_per_minute": 0}, "max_per_minute"),
        ({"warmup": -1}, "warmup"),
        ({"sampler": 3}, "sampler"),
        ({"sample": 0.1, "sampler": lambda: True}, "not both"),
    ],
)
def test_bad_sampling_values_fail_at_decoration(kwargs, match):
    with pytest.raises(ns.ConfigurationError, match=match):

        @ns.profile_neuron(**kwargs)
        def infer():
            pass


def test_inline_with_in_a_loop_shares_one_policy_per_line(xw):
    runs = []
    for _ in range(9):
        with ns.profile_neuron(every=3, warmup=1) as run:
            xw[0].sum()
        runs.append(run)
    profiled = [i for i, r in enumerate(runs) if r.status != ns.RunStatus.SKIPPED]
    assert profiled == [1, 4, 7]


def test_counts_survive_garbage_collection_and_reset(xw):
    import gc

    from neuronscope import _stats

    def make_and_call():
        @ns.profile_neuron(sample=0.0)
        def f(a):
            return a

        for _ in range(5):
            f(1)

    make_and_call()
    gc.collect()
    assert ns.stats()["unsampled"] == 5
    _stats.reset()
    make_and_call()
    gc.collect()
    assert ns.stats()["unsampled"] == 5


def test_bad_retention_variable_does_not_hang_runs(xw, monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_MAX_RUNS", "abc")
    with ns.profile_neuron(name="bad-env") as run:
        xw[0].sum()
    assert run.wait(30) and run.status == ns.RunStatus.COMPLETE
    assert run.summary["aten::sum"].calls == 1 and run.path is not None


def test_every_10_after_5_warmup_over_105_fast_calls_profiles_exactly_10_and_drops_none(xw):
    x, w = xw

    @ns.profile_neuron(every=10, warmup=5)
    def infer(a):
        return a.sum()

    for _ in range(105):
        infer(x)
    assert ns.flush(60)
    s = ns.stats()
    assert s["profiled"] == 10
    assert s["unsampled"] == 95
    # every call is accounted for, once: nothing sampled went missing between capture and write
    assert s["profiled"] + s["unsampled"] + s["skipped"] + s["skipped_backpressure"] + s["joined"] == 105
    assert s["skipped_backpressure"] == 0 and s["errors"] == 0


def test_a_flood_of_samples_beyond_the_memory_budget_is_skipped_before_profiling_and_counted(xw, caplog):
    """Every call is accounted for; the backlog never holds much more than the budget."""
    from neuronscope import _worker

    x, w = xw
    budget = 2 * 1024**2
    ns.configure(max_pending_bytes=budget)
    try:

        @ns.profile_neuron(name="flood", every=1)  # a sampled service call, even at every=1
        def infer(a):
            for _ in range(40):
                a = a * 1.0001
            return a

        _worker.backlog.reset_measurements()  # as in a fresh process: earlier tests taught it other rates
        calls = 300
        for _ in range(calls):
            infer(x)
        assert ns.flush(120)
        s = ns.stats()
        assert s["profiled"] + s["skipped_backpressure"] == calls
        assert s["skipped_backpressure"] > 0 and s["profiled"] > 0
        assert s["errors"] == 0 and s["backpressure_waits"] == 0
        # admitted only while under budget: the backlog stays near it, whatever the number of
        # calls (a few captures can be estimated low before the worker has counted them)
        largest = _worker.backlog.largest_bytes
        assert 0 < largest < budget / 4  # (so the bounds below mean something)
        assert _worker.backlog.peak_bytes <= budget + 8 * largest
        assert _worker.backlog.peak_bytes < 0.2 * calls * largest  # far below "everything pending"
        assert _worker.backlog.total_bytes == 0  # everything written out and released
        warnings = [r for r in caplog.records if "skipped_backpressure" in r.getMessage()]
        assert len(warnings) <= 1  # warned once
    finally:
        ns.configure(max_pending_bytes=None)


def test_a_flood_of_profiles_without_sampling_options_waits_for_the_backlog_and_loses_none(xw, caplog, monkeypatch):
    """What the user asked for by name is never skipped for memory: the caller waits for the
    workers instead, and the backlog stays near the budget all the same."""
    from neuronscope import _worker
    from neuronscope.capture import lifecycle

    monkeypatch.setattr(lifecycle, "_backpressure_wait_warned", False)  # warned once per process

    x, w = xw
    budget = 2 * 1024**2
    ns.configure(max_pending_bytes=budget)
    try:

        @ns.profile_neuron(name="every-call")
        def infer(a):
            for _ in range(40):
                a = a * 1.0001
            return a

        _worker.backlog.reset_measurements()
        calls = 120
        results = [infer(x) for _ in range(calls)]
        assert ns.flush(120)
        s = ns.stats()
        assert s["profiled"] == calls and s["skipped_backpressure"] == 0
        assert s["backpressure_waits"] > 0  # (so the flood did reach the budget)
        largest = _worker.backlog.largest_bytes
        assert 0 < largest < budget / 4
        assert _worker.backlog.peak_bytes <= budget + 8 * largest
        assert _worker.backlog.total_bytes == 0
        assert all(torch.equal(r, results[0]) for r in results)  # the user's results, all there
        waits = [r for r in caplog.records if "backpressure_waits" in r.getMessage()]
        assert len(waits) == 1 and "waited" in waits[0].getMessage()
    finally:
        ns.configure(max_pending_bytes=None)


def test_a_with_block_right_after_a_profile_bigger_than_the_budget_waits_and_is_profiled(xw):
    x, w = xw
    ns.configure(max_pending_bytes=1024**2)  # 1 MiB: one "big" profile alone is over it

    def big_profile() -> ns.Run:
        nonlocal x
        with ns.profile_neuron(name="big") as run:
            for _ in range(2000):
                x = x * 1.0001
        return run

    try:
        big_profile()
        assert ns.flush(60)  # measured: the next "big" is estimated from it, not from RSS
        big = big_profile()
        waits_before = ns.stats()["backpressure_waits"]
        with ns.profile_neuron(name="next") as after:
            x.sum()
        assert after.status is not ns.RunStatus.SKIPPED, after.skip_reason
        assert ns.stats()["backpressure_waits"] == waits_before + 1
        assert after.summary["aten::sum"].calls == 1 and big.summary["aten::mul"].calls == 2000
        assert ns.stats()["skipped_backpressure"] == 0
    finally:
        ns.configure(max_pending_bytes=None)


def test_a_long_first_call_with_few_events_does_not_make_the_next_profile_skip(xw):
    """A new name's size is guessed from its duration and the event rate seen so far, but a call
    that spent its time waiting (compiling, sleeping, I/O) made few events: the process's RSS
    growth caps the guess, so the profile right after it is not skipped as overload."""
    from neuronscope import _worker

    x, w = xw
    budget = 32 * 1024**2
    ns.configure(max_pending_bytes=budget)
    try:
        with ns.profile_neuron(name="busy"):  # teaches the backlog this process's event rate
            for _ in range(300):
                x = x * 1.0001
        assert ns.flush(60)
        bytes_per_second = _worker.backlog.events_per_second * (
            _worker.KINETO_BYTES_PER_EVENT + _worker.MODEL_BYTES_PER_EVENT
        )
        seconds_to_fill_the_budget = budget / bytes_per_second
        with ns.profile_neuron(name="waits") as waits:
            time.sleep(2 * seconds_to_fill_the_budget)  # duration x rate alone: twice the budget
            x.sum()
        with ns.profile_neuron(name="right-after") as after:
            x.sum()
        assert after.status is not ns.RunStatus.SKIPPED, after.skip_reason
        assert waits.wait(30) and after.wait(30)
        assert after.summary["aten::sum"].calls == 1
        assert ns.stats()["skipped_backpressure"] == 0
    finally:
        ns.configure(max_pending_bytes=None)
