"""Advice that comes true: a finding's time at stake is what applying its fix saves. Each case
profiles the workload with the cause, then times it and the same workload with the fix applied,
unprofiled and interleaved (medians): the claim must be within a factor of 2 of a significant
saving, and no finding may claim more than 2 % of the run where the fix saves nothing.
bench/bench_advice.py runs every rule this way; these are the cases whose effect is large
enough to judge on a loaded 2-core machine."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

import neuronscope as ns


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as bench/bench_advice.py runs: the arms do not fight over the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _median_us(fn, rounds: int = 5, clock=time.perf_counter) -> float:
    out = []
    for _ in range(rounds):
        t0 = clock()
        fn()
        out.append((clock() - t0) * 1e6)
    return statistics.median(out)


def _interleaved(cause, fix, rounds: int = 5) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        a.append(_median_us(cause, 1))
        b.append(_median_us(fix, 1))
    return statistics.median(a), statistics.median(b)


def _claim_and_saving(
    rule: str, cause, fix, rounds: int = 5, samples: int = 1, claim_key: str = "", **options
) -> tuple[float, float, float, dict]:
    """(median claim, median saving, median run with the cause, the last finding's evidence):
    each round profiles the cause and times both arms unprofiled, so that a machine whose
    speed drifts (a loaded 2-core VM) drifts under the claim and the timings alike.

    The arms are CPU work on this thread: they are timed by the thread's CPU time. A claim
    about CPU work leaves out the time the thread waited for a core (a contended profile's
    claim is scaled back to it): wall time on a loaded machine would add that waiting to the
    measured side only (the row loop's claim read 0.49x of a wall-clock saving that way).

    With ``samples`` > 1 each arm is timed that many times a round, alternating, and a round
    keeps each arm's fastest: the steady state the claim is about (each op at its fastest),
    where a single call's time is noise that only adds (a cache shared with other VMs).

    Where the rounds' own spread says the timings are noisy (:func:`_noisy`), more rounds are
    taken, up to three times as many: beside two busy processes the foreach saving once read
    1.3 ms where quiet rounds read 8.8-9.7 ms."""
    claims, slow, fast = [], [], []
    evidence: dict = {}
    cause(), fix()  # warm up both
    k = -1
    while (k := k + 1) < rounds or (k < 3 * rounds and _noisy(slow, fast)):
        # the last round's post-processing freed its memory back to the system: without a call
        # first, the profiled one pays the page faults of re-allocating its tensors (4 MiB ones:
        # 2-10x the op time), which the timed arms, warmed up, do not
        cause()
        with ns.profile_neuron(name=f"{rule}-{k}", **options) as run:
            cause()
        ns.flush()  # post-processing runs in the background: not during the timings
        f = run.diagnosis.finding(rule) if run.diagnosis is not None else None
        claims.append(0.0 if f is None else float(f.evidence[claim_key]) if claim_key else f.us_at_stake)
        evidence = dict(f.evidence) if f is not None else {}
        cause(), fix()  # the profile left the caches cold: one untimed call of each first
        arms = [(cause, []), (fix, [])]
        for _ in range(samples):
            for arm, times in arms if k % 2 == 0 else arms[::-1]:
                times.append(_median_us(arm, 1, clock=time.thread_time))
        slow.append(min(arms[0][1]))
        fast.append(min(arms[1][1]))
    return statistics.median(claims), statistics.median(slow) - statistics.median(fast), statistics.median(slow), evidence


def _noisy(slow: list[float], fast: list[float]) -> bool:
    """Whether an arm's rounds spread (interquartile range) by over a quarter of what is being
    measured: the saving, or 5 % of the run where it is smaller (the bar's own resolution)."""
    saving = statistics.median(slow) - statistics.median(fast)
    spread = max(_iqr(slow), _iqr(fast))
    return spread > 0.25 * max(abs(saving), 0.05 * statistics.median(slow))


def _iqr(values: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


def _comes_true(claim: float, saving: float, run: float) -> None:
    """The issue-37 bar: within 0.5-2x of a saving over 5 % of the run; at most 2 % of the run
    where the fix saves nothing."""
    if saving > 0.05 * run:
        assert saving / 2 <= claim <= saving * 2, (claim, saving, run)
    elif saving <= 0.02 * run:
        assert claim <= 0.02 * run, (claim, saving, run)


class _SlowItems(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.004)  # decoding a sample
        return torch.randn(32)


@pytest.mark.timing
def test_num_workers_saves_what_the_data_finding_claims():
    lin = torch.nn.Linear(32, 32)

    def loop(workers: int):
        dl = torch.utils.data.DataLoader(_SlowItems(), batch_size=4, num_workers=workers, persistent_workers=workers > 0)

        def run() -> None:
            for b in dl:
                lin(b).sum()
                time.sleep(0.008)  # the step's own work, which workers overlap with loading

        return run

    cause, fix = loop(0), loop(2)
    with ns.profile_neuron(name="loader") as run:
        cause()
    d = run.diagnosis
    assert d.bound_by == "data" and d.findings[0].rule == "sync_dataloader"  # the verdict's cause leads
    claim = d.findings[0].us_at_stake
    fix()  # start the workers once
    slow, fast = _interleaved(cause, fix)
    saving = slow - fast
    assert saving > 0.02 * slow
    assert saving / 2 <= claim <= saving * 2, (claim, saving)


@pytest.mark.timing  # a preempted read once carried a whole time slice
def test_no_claim_where_the_fix_saves_nothing_on_a_cpu():
    """A value read on a CPU drains no queue: no advice worth more than 2 % of the run."""
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 64)
    with ns.profile_neuron(name="item_on_cpu") as run:
        for _ in range(10):
            v = model(x).sum()
            v.backward()
            opt.step()
            opt.zero_grad()
            float(v)  # .item() every step
            ns.step()
    f = run.diagnosis.finding("sync_in_loop")
    assert f is None or f.us_at_stake <= 0.02 * run.diagnosis.window_us, f


def _training(optimizer, layers, width: int, batch: int = 8, steps: int = 5, **options):
    """A training loop whose optimizer is built with ``options`` (the same seed: the same model)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*layers())
    opt = optimizer(model.parameters(), **options)
    x = torch.randn(batch, width)

    def run() -> None:
        for _ in range(steps):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()

    return run


_MLP = lambda: [torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),  # noqa: E731
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)]
_MANY_SMALL = lambda: [torch.nn.Linear(32, 32) for _ in range(100)]  # noqa: E731


@pytest.mark.timing
@pytest.mark.parametrize(
    "optimizer, layers, width",
    [(torch.optim.Adam, _MANY_SMALL, 32), (torch.optim.AdamW, _MLP, 256), (torch.optim.SGD, _MANY_SMALL, 32)],
    ids=["adam-100xLinear32", "adamw-mlp", "sgd-100xLinear32"],
)
def test_a_single_tensor_optimizer_is_told_what_fused_saves(optimizer, layers, width):
    """Issue 37: Adam over 200 tensors, foreach=False, saved 20 % with foreach and got no
    finding; an AdamW MLP's step was 28-35 % of the run. The finding proposes what it claims
    (fused=True on a CPU) and says what foreach alone would save."""
    extra = {"lr": 0.01, "momentum": 0.9} if optimizer is torch.optim.SGD else {}
    cause = _training(optimizer, layers, width, foreach=False, **extra)
    fused = _training(optimizer, layers, width, fused=True, **extra)
    claim, saving, slow, evidence = _claim_and_saving("optimizer_single_tensor", cause, fused, rounds=5)
    assert evidence["fix"] == "fused" and evidence["at_stake_model"].startswith("fused")
    assert saving > 0.05 * slow  # the premise: the fix pays off on these workloads
    _comes_true(claim, saving, slow)


@pytest.mark.timing
def test_foreach_saves_what_the_optimizer_finding_says_it_would():
    """The finding proposes fused=True on a CPU and says what foreach alone would save
    (``foreach_saves_us``): that claim, against foreach measured. Each arm is the fastest of 5 a
    round (a single timing of each once read a saving of half the usual, in a CI-like run)."""
    cause = _training(torch.optim.Adam, _MANY_SMALL, 32, foreach=False)
    foreach = _training(torch.optim.Adam, _MANY_SMALL, 32, foreach=True)
    claim, saving, run_us, _ = _claim_and_saving("optimizer_single_tensor", cause, foreach, rounds=5, samples=5, claim_key="foreach_saves_us")
    assert saving > 0.05 * run_us
    _comes_true(claim, saving, run_us)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _llc_bytes() -> int:
    from neuronscope.analysis.hardware import cpu_last_level_cache_bytes

    return cpu_last_level_cache_bytes()


@pytest.mark.timing
def test_fusing_a_chain_that_streams_through_memory_saves_what_is_claimed():
    """RMSNorm over tensors larger than the last-level cache: compiled, it reads the input
    twice and writes once instead of seven full passes. With the shapes recorded, the claim
    counts those passes at the rate of the chain's best op."""
    rows = max(4096, 2 * _llc_bytes() // (4 * 2048))  # each tensor twice the last-level cache
    x, w = torch.randn(rows, 2048), torch.randn(2048)
    compiled = torch.compile(_rmsnorm, dynamic=False)  # this shape's kernel, whatever ran before
    compiled(x, w)

    def cause() -> None:
        _rmsnorm(x, w)

    def fix() -> None:
        compiled(x, w)

    claim, saving, slow, evidence = _claim_and_saving("elementwise_chain", cause, fix, rounds=3, record_shapes=True)
    assert evidence["passes_from"] == "shapes" and evidence["at_stake_model"].startswith("fusion")
    assert saving > 0.2 * slow  # the premise: fusion pays off at this size
    _comes_true(claim, saving, slow)


def _in_cache_chain_case() -> tuple[float, float, float, dict]:
    """The in-cache RMSNorm case, measured in this process (the child of the test below)."""
    torch.set_num_threads(1)
    x, w = torch.randn(8, 128, 1024), torch.randn(1024)
    compiled = torch.compile(_rmsnorm, dynamic=False)  # this shape's kernel, whatever ran before
    compiled(x, w)

    def cause() -> None:
        for _ in range(4):
            _rmsnorm(x, w)

    def fix() -> None:
        for _ in range(4):
            compiled(x, w)

    return _claim_and_saving("elementwise_chain", cause, fix, rounds=5, samples=5, record_shapes=True)


#: glibc keeps freed memory (tensors up to 32 MiB from the heap, never trimmed back to the system)
_STEADY_ALLOCATOR = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"}


@pytest.mark.timing
def test_fusing_a_chain_in_cache_saves_what_is_claimed():
    """Issue 37: an RMSNorm of (8, 128, 1024) fp32 -- 4 MiB, in the last-level cache -- 4 a
    step against torch.compile: the claim counted only dispatches (0.02x of the saving).

    The claim is about the steady state: each op at its fastest in the profile, where the
    profiler's own allocations make the allocator fault 4 MiB tensors back in. Unprofiled, whether
    the eager chain faults depends on the heap's history, not on fusion: 0.38 ms a call in one
    process, 3.4 ms in another (measured, glibc 2.36), so the saving swung 0.35-2.1x of the claim
    from one pytest process to the next. The case runs in a child whose allocator keeps its memory
    (glibc tunables): neither arm pays faults, and the saving is fusion's.
    (Without record_shapes the passes are told from the op times -- not asserted.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import test_advice_comes_true as t; "
        "print('RESULT', json.dumps(t._in_cache_chain_case(), default=str))"
    )
    env = {**os.environ, **_STEADY_ALLOCATOR}
    done = subprocess.run([sys.executable, "-c", code, str(here)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    claim, saving, slow, evidence = json.loads(line.removeprefix("RESULT "))
    assert evidence["passes_from"] == "shapes"
    assert saving > 0.05 * slow
    _comes_true(claim, saving, slow)


@pytest.mark.timing
def test_vectorising_a_row_loop_saves_what_is_claimed():
    """Issue 37: ``torch.stack([x[i] * 2 for i in rows])`` over 512 rows against ``x * 2``."""
    x = torch.randn(512, 64)

    def cause() -> None:
        torch.stack([x[i] * 2 for i in range(x.shape[0])])

    def fix() -> None:
        x * 2

    claim, saving, slow, evidence = _claim_and_saving("forloop_indexing", cause, fix, rounds=7)
    assert evidence["at_stake_model"].startswith("vectorise")
    assert saving > 0.5 * slow
    _comes_true(claim, saving, slow)
