"""Sampling rules: warmup, every, sample (seeded), sampler, max_per_minute; bad values fail early."""

from __future__ import annotations

import pytest

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
