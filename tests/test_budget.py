"""The recording limits' parts (issue 27.1): validation, the default budget, the coverage record,
and when the wake signal may act on the main thread."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

import neuronscope as ns
from neuronscope.capture import budget, session, watchdog
from neuronscope.capture import signals as wake
from neuronscope.result import Coverage


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(max_events=-1), "max_events=-1"),
        (dict(max_events=1.5), "max_events=1.5"),
        (dict(max_seconds=0), "max_seconds=0"),
        (dict(max_steps=0), "max_steps=0"),
        (dict(windows="10s"), "windows='10s'"),
        (dict(windows=ns.Windows(steps=5), schedule=lambda step: None), "use one"),
    ],
)
def test_bad_limits_fail_at_creation_naming_the_argument(kwargs, words):
    with pytest.raises(ns.ConfigurationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ns.profile_neuron(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(), dict(steps=0), dict(seconds=-1), dict(steps=5, keep=-1)])
def test_bad_windows_fail(kwargs):
    with pytest.raises(ns.ConfigurationError, match="Windows"):
        ns.Windows(**kwargs)


def test_a_step_count_is_windows_of_that_many_steps():
    assert ns.profile_neuron(windows=25).windows == ns.Windows(steps=25)


def test_the_default_budget_is_what_a_quarter_of_the_memory_available_holds():
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    budget_now, seen = budget.memory_events()
    assert seen == pytest.approx(available, rel=0.05)  # read again: memory moves a little
    assert budget_now == pytest.approx(available / 4 / (1700 + 120), rel=0.05)  # a stopped event: Kineto + our model
    assert "GiB available" in budget.describe_default(seen)
    # a profile in windows gets at most 250,000 events a window
    rec = budget.Recording(type("C", (), {"name": "x"})(), budget.Limits(), ns.Windows(seconds=1))
    assert rec.max_events == min(250_000, budget_now) and not rec.dynamic
    assert budget.Recording(type("C", (), {"name": "x"})(), budget.Limits(), None).dynamic
    assert budget.Recording(type("C", (), {"name": "x"})(), budget.Limits(max_events=0), None).max_events is None


def test_coverage_says_what_was_recorded_and_reads_back():
    cov = Coverage(wall_ns=30_000_000_000, recorded_ns=7_500_000_000, events=2_000_000, windows=9, stopped="budget",
                   max_events=250_000, budget_source="max_events", window_spec="10 s", kept=(1, 4),
                   ended_by={"budget": 7, "window_seconds": 1, "end": 1}, recorded_steps=40, steps=200, lost=1)
    assert cov.pct == 25.0
    line = cov.line()
    # what ended the windows, not "windows of 10 s" when the budget ended most of them
    assert line.startswith("recorded 7.5 s of 30.0 s (25%), 2,000,000 events, 40 of 200 steps, in 9 windows (at most 10 s each")
    assert "ended by: the event budget 7, its time 1, the end of the run 1" in line
    assert "1 window lost (windows.json says why)" in line
    assert "event budget of 250,000 events (max_events)" in line and line.endswith("raw traces kept: window 1, 4")
    assert Coverage.from_dict(cov.to_dict()) == cov
    # what neuronscope added to the run, and how it was measured
    timed = replace(cov, overhead_ns=3_000_000_000, overhead_basis="steps")
    assert "neuronscope added 3.0 s (10% of the wall time, from step times)" in timed.line()
    assert "neuronscope added" not in cov.line() and Coverage.from_dict(timed.to_dict()) == timed


def test_the_wake_signal_acts_in_user_code_only():
    assert watchdog._safe_to_act(sys._getframe())  # this test's own frame: user code
    with session._lock:  # as inside session.enter/leave: an RLock it would re-enter
        assert not watchdog._safe_to_act(sys._getframe())
    # code running in a neuronscope module (it may hold our locks): not safe
    ours: dict = {"__name__": "neuronscope.capture.somewhere", "sys": sys}
    exec("def working():\n    return sys._getframe()\n\ndef wrapper(user):\n    return user()\n", ours)
    assert not watchdog._safe_to_act(ours["working"]())
    # the user's code below a decorated function's wrapper (which only calls through): safe
    assert watchdog._safe_to_act(ours["wrapper"](lambda: sys._getframe()))


def test_an_action_a_step_takes_lets_the_next_one_signal_again(monkeypatch):
    """The watchdog signals the main thread once per action; when ``ns.step()`` takes that action
    before the signal lands, the next action (a later window's stop) is signalled too. Before, the
    flag stayed set: every later action waited for a step, and a script past its last step
    never stopped its window."""
    acted: list[str] = []
    signals: list[int] = []
    rec = SimpleNamespace(
        thread=threading.main_thread().ident, steps_seen=False, pending=None, signalled=False, step=lambda now: None
    )
    capture = SimpleNamespace(recording=rec, all_threads=False, limit_action=acted.append)
    monkeypatch.setattr(wake, "wake_main_thread", lambda: signals.append(1))
    monkeypatch.setattr(watchdog, "_watched", [capture])
    watchdog._dispatch(capture, "budget")  # the watchdog: a window's budget is spent
    assert rec.pending == "budget" and rec.signalled and signals == [1]
    watchdog.on_step()  # the step came first: it acts
    assert acted == ["budget"] and rec.pending is None
    watchdog._dispatch(capture, "budget")  # a later window's budget
    assert signals == [1, 1], "the later action was never signalled"


def test_a_session_of_every_thread_starts_only_at_a_safe_point():
    """A compiled region's ``_RecordFunctionFast`` makes its RecordFunction only if a profile runs
    as it enters, and fails as it exits if one runs then: a session of every thread (global in
    torch) that the watchdog started while the capture's thread was inside one failed the user's
    call (the compiled-loop reliability test, beside two busy processes). The start waits, as a
    stop does, for the thread to leave torch's code."""
    import torch

    with pytest.raises(RuntimeError, match="no guard is set"):  # torch's premise, as it is
        with torch._C._profiler._RecordFunctionFast("graph"):
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.start()
    prof.stop()

    inside, leave = threading.Event(), threading.Event()
    compiled: dict = {"__name__": "torch._inductor.output_code", "inside": inside, "leave": leave}
    exec("def graph_call():\n    inside.set()\n    leave.wait(60)\n", compiled)
    thread = threading.Thread(target=compiled["graph_call"])
    thread.start()
    inside.wait(60)
    acted: list[str] = []
    rec = SimpleNamespace(thread=thread.ident, deferred=None, pending=None, signalled=False)
    capture = SimpleNamespace(recording=rec, all_threads=True, limit_action=acted.append)
    try:
        watchdog._dispatch(capture, "resume")  # the watchdog: the pause between windows is over
        assert acted == [] and rec.deferred == "resume"  # not inside the compiled region
    finally:
        leave.set()
        thread.join()
    watchdog._dispatch(capture, rec.deferred)  # the next poll: the thread left it
    assert acted == ["resume"]


def test_step_times_stay_bounded_with_an_exact_count_and_slowest_step():
    steps = budget.StepTimes()
    n = 3 * budget.StepTimes.CAP + 17
    for i in range(n):
        steps.add(1000.0 + (i % 101), overlapped=i % 7 == 0)  # odd periods: no aliasing with the stride
    steps.add(9e6, overlapped=True)  # one slow step, late
    assert steps.count == n + 1
    assert len(steps.us) < budget.StepTimes.CAP and steps.stride == 4
    timed = steps.timed()
    assert (timed.slowest_index, timed.slowest_us, timed.slowest_overlapped) == (n, 9e6, True)
    # every stride-th step: a uniform sample
    sample = [us for us in timed.sample_us if us < 9e6]
    assert sum(sample) / len(sample) == pytest.approx(1050.0, abs=1)
    assert sum(timed.sample_overlapped) / len(timed.sample_overlapped) == pytest.approx(1 / 7, abs=0.005)


def test_the_first_window_estimate_leaves_out_barrier_spins_and_keeps_the_memory_floor(monkeypatch):
    """Beside two busy processes a matmul loop's process burned 48 ms of CPU in 50 ms while
    recording 25 events: the intra-op peer waited for a core and the recording thread spun at its
    barrier. The estimate leaves that out, but never falls under the RSS growth past set-up."""
    ms = 1_000_000
    rec = budget.Recording(type("C", (), {"name": "spin", "all_threads": True})(), budget.Limits(max_events=3000), None)
    start_cpu = rec.session_cpu_started
    pool = {4242: (0, 0)}  # (CPU ns, ns waiting for a core) of a thread Python did not start
    rss = {"now": 100 * 2**20}
    monkeypatch.setattr(budget._system, "pool_threads_schedstat", lambda: dict(pool))
    monkeypatch.setattr(session, "recording_since", lambda: ("owner", 0, 100 * 2**20))
    monkeypatch.setattr(session, "process_rss", lambda: rss["now"])
    monkeypatch.setattr(rec, "event_cpu_ns", lambda: start_cpu + 48 * ms)
    rec.session_pool_started = {}
    rec.session_started = 0
    now = 50 * ms
    rss["now"] += 4 * 2**20  # set-up: per-thread queues, the pool's threads
    # a quiet pool: the process's CPU less the pool's own is the events' (47 ms: 23,500 at the
    # first-window rate), capped by the RSS growth as before (4 MiB: 17,476)
    pool[4242] = (1 * ms, 0)
    quiet = rec.session_events(now)
    assert quiet == int(4 * 2**20 / budget.RECORDING_BYTES_PER_EVENT) < int(budget.FIRST_EVENT_RATE * 0.047)
    pool[4242] = (30 * ms, 0)
    assert rec.session_events(now) == int(budget.FIRST_EVENT_RATE * 0.018)
    # the peer waited 40 ms for a core and spun 5 ms: what is left is ~3 ms of work
    pool[4242] = (5 * ms, 40 * ms)
    spun = rec.session_events(now)
    assert spun == int(budget.FIRST_EVENT_RATE * 0.003) < 3000 < quiet
    # memory really held past set-up is a floor, whatever the CPU says
    rss["now"] += 3000 * budget.RECORDING_BYTES_PER_EVENT
    assert rec.session_events(now) >= 3000


def test_each_pause_of_a_bounded_run_holds_its_own_baseline_steps(monkeypatch):
    """Windows(overhead=...) takes its baseline in every pause: QUIET_NEEDED untouched steps
    after each window, not once in the run. Counted once, a slow spell of 5 untouched steps (64 ms
    each, beside two busy processes) made the baseline, the windows then cost "0", and the bound
    stopped pausing: 84 of 120 steps recorded, as many as without it."""
    monkeypatch.setattr(budget._worker.backlog, "over_budget", lambda: False)
    rec = budget.Recording(type("C", (), {"name": "paused"})(), budget.Limits(), ns.Windows(steps=3, overhead=0.5))
    ms = 1_000_000
    now = 0

    def steps(n: int, each_ms: int) -> None:
        nonlocal now
        for _ in range(n):
            now += each_ms * ms
            rec.step(now)

    steps(3, 2)  # the first window: recording
    rec.session_ended(now, "window")
    steps(1, 2)  # the step it stopped in: touched
    steps(5, 64)  # a slow spell of untouched steps: the baseline, the windows "cost nothing"
    assert rec.overhead.measured() == (0, "steps") and rec.ready_for_next(now)
    rec.session_started_now(now)  # the second window
    steps(3, 2)
    rec.session_ended(now, "window")
    steps(1, 2)
    for _ in range(budget.Overhead.QUIET_NEEDED):  # within the bound, but this pause has no baseline yet
        assert not rec.ready_for_next(now)
        steps(1, 2)
    assert rec.ready_for_next(now)
