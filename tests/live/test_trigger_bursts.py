"""A tail trigger sees slow calls in a tight loop (issue 27.5): calls that overlap
neuronscope's own background work are timed by their own thread's CPU time and compared with
calls that overlapped it too — so the trigger neither goes blind while a profile is processed
(before: in a loop of ~12 us calls, 0 firings in 5 of 5 runs, 129-354 of 700 calls timed) nor
fires on its own footprint. The same holds beside two CPU-burning processes (issue 35: before,
the first calls' wall times and intra-op threads spinning for a preempted peer put the p99 at
1-25 ms for 12 us calls, and the 0.6 ms slow calls fired in 0 of 6 runs)."""

from __future__ import annotations

import pytest

import math
import re
import threading
import time

import torch

import neuronscope as ns

W = torch.randn(64, 64) / 8


class Burst:
    """Back-to-back calls of ~12 us, short (8 rows) and long (16 rows) inputs alternating; from
    ``run(..., regress_at=N)`` on, long inputs take 120 more matrix multiplications (~30x)."""

    def __init__(self, max_per_hour: int = 6) -> None:
        self.slow_long = False
        trigger = ns.SlowCalls(key=self.key, capture=2, max_per_hour=max_per_hour)
        self.fn = ns.profile_neuron(name="burst", trigger=trigger)(self.serve)

    @staticmethod
    def key(x: torch.Tensor) -> str:
        return "long" if x.shape[0] > 8 else "short"

    def serve(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ W
        if self.slow_long and x.shape[0] > 8:
            for _ in range(120):
                y = y @ W
        return y.relu()

    def run(self, calls: int, regress_at: int | None = None, gap_s: float = 0.0) -> None:
        for i in range(calls):
            if i == regress_at:
                self.slow_long = True
            self.fn(torch.ones(16 if i % 2 == 0 else 8, 64))
            if gap_s:
                time.sleep(gap_s)


def _thresholds(state) -> dict:
    """What the trigger knew at the end: said when a firing is missing."""
    return {
        "calls timed": (state.total, state.busy_total),
        "thresholds_us": (state.threshold[0] / 1e3, state.busy_threshold[0] / 1e3),
    }


#: normal calls before the slowdown: enough for min_calls (200) timed ones even where a loaded
#: machine leaves half of them unmeasurable (a thread of ours lost its core meanwhile)
BEFORE = 1000


def _call_number(run) -> int:
    return int(re.match(r"call (\d+) ", run.trigger.reason).group(1))


@pytest.mark.timing
@pytest.mark.usefixtures("one_intra_op_thread")  # its 12 us calls spun for a pool thread's time slice: conftest
def test_a_tight_loop_fires_on_the_slow_class_while_the_worker_is_busy(_isolated_runs):
    burst = Burst(max_per_hour=50)  # a p99 hiccup of a short call (~1 %) must not use up the firings
    burst.run(BEFORE + 300, regress_at=BEFORE)
    assert ns.flush(60)
    stats = ns.stats()
    state = burst.fn._self_neuronscope_trigger
    assert state.baseline is not None
    assert stats["triggers_fired"] >= 1, (stats, _thresholds(state))
    runs = [ns.load_run(p) for p in sorted(_isolated_runs.iterdir())]
    slow = [r for r in runs if r.trigger is not None and r.trigger.kind == "slow"]
    # calls are numbered from 1: call BEFORE + 1 is the first slow one
    long = [r for r in slow if r.trigger.key == "long" and _call_number(r) > BEFORE]
    assert long, ([r.trigger.reason for r in slow], _thresholds(state))
    assert all(r.summary["aten::mm"].calls == 121 for r in long)  # the slow class, profiled
    # the other firings are what a p99 gives -- ~1 % of normal calls, as in the test below (<= 10
    # in 700) -- not the trigger's own footprint, which would add one or more per profile taken.
    # Once the long calls take 120 matmuls the short ones run 5-15 % slower (the core's state
    # after 300 us of other work): over a quiet machine's tight p99, they once fired 39 times
    # here; MIN_EXCESS_NS over the median is what keeps such calls from firing (issue 35)
    others = {r.trigger.reason for r in slow} - {r.trigger.reason for r in long}
    assert len(others) <= 10 * (BEFORE + 300) / 700, sorted(others)


@pytest.mark.usefixtures("one_intra_op_thread")
def test_a_tight_loop_without_a_slowdown_is_watched_and_fires_about_as_a_p99_does(_isolated_runs):
    burst = Burst(max_per_hour=50)
    burst.run(700)
    assert ns.flush(60)
    state = burst.fn._self_neuronscope_trigger
    # not blind: the calls overlapped by neuronscope's work are timed, so the threshold exists
    assert state.total + state.busy_total >= 200 and min(state.threshold[0], state.busy_threshold[0]) < math.inf
    # p99 by definition: ~1 % of normal calls are over it, spaced or not (measured here: 1-4
    # firings in 700 tight calls, 0-5 in 700 spaced ones); its own footprint would add dozens
    assert ns.stats()["triggers_fired"] <= 10



def test_a_call_that_waited_for_a_core_as_long_as_it_ran_slow_is_not_judged_by_its_wall_time(monkeypatch):
    """Before a call timed by its wall time fires, the thread's run-queue wait since contention
    was last read (schedstat, faked here) is checked: beside two busy processes, 24 of 1,300
    ~12 us calls fired on the other processes' time slices while a stale reading said the
    machine was quiet. Such a call does not fire, and the calls are timed by CPU time after it."""
    from neuronscope import _system

    fn = ns.profile_neuron(name="held", trigger=ns.SlowCalls())(lambda x: x + 1)
    calls = fn._self_neuronscope_calls
    tid = threading.get_native_id()
    wait_now = [0]
    monkeypatch.setattr(_system, "read_schedstat", lambda t: (0, wait_now[0]) if t == tid else None)
    threshold, dt = 20_000.0, 5_100_000  # a 5.1 ms call over a 20 us p99

    calls._sched[tid], calls.contended[0] = (time.monotonic_ns(), 1_000_000), 0
    wait_now[0] = 1_000_000 + 6_000_000  # held off its core for 6 ms meanwhile
    assert calls.waited_for_a_core(dt, threshold)
    assert calls.contended[0] == 1 and calls._sched[tid][1] == wait_now[0]  # read again from here

    calls._sched[tid], calls.contended[0] = (time.monotonic_ns(), 7_000_000), 0
    wait_now[0] = 7_000_000 + 1_000_000  # 1 ms of waiting explains 1 ms, not 5
    assert not calls.waited_for_a_core(dt, threshold)
    assert calls.contended[0] == 0


def test_the_calls_right_after_the_workers_finish_are_not_timed():
    """The first calls after neuronscope's workers go idle run in caches the analysis just used:
    beside two busy processes such calls (6-8 us over a 5.6 us p99) made most of the stray
    firings of the test above. They are not timed; the one after them is."""
    from neuronscope import _worker
    from neuronscope.capture.timed import AFTER_WORKERS_CALLS

    fn = ns.profile_neuron(name="after-workers", trigger=ns.SlowCalls())(lambda x: x + 1)
    state = fn._self_neuronscope_trigger

    def timed() -> int:  # into either histogram: a loaded machine times some as overlapped
        return sum(state.counts) + sum(state.busy_counts)

    for _ in range(5):  # the settling of its decoration, if any, is spent
        fn(1)
    before = timed()
    _worker.get_worker().submit(lambda: None)
    assert ns.flush(30)
    for _ in range(AFTER_WORKERS_CALLS):
        fn(1)
    assert timed() == before
    fn(1)
    assert timed() == before + 1
