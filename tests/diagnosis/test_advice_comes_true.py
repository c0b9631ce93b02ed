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


def _median_us(fn, rounds: int = 5) -> float:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out)


def _interleaved(cause, fix, rounds: int = 5) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        a.append(_median_us(cause, 1))
        b.append(_median_us(fix, 1))
    return statistics.median(a), statistics.median(b)


def _claim_and_saving(rule: str, cause, fix, rounds: int = 5, **options) -> tuple[float, float, float, dict]:
    """(median claim, median saving, median run with the cause, the last finding's evidence):
    each round profiles the cause and times both arms unprofiled, so that a machine whose
    speed drifts (a loaded 2-core VM) drifts under the claim and the timings alike."""
    claims, slow, fast = [], [], []
    evidence: dict = {}
    cause(), fix()  # warm up both
    for k in range(rounds):
        with ns.profile_neuron(name=f"{rule}-{k}", **options) as run:
            cause()
        ns.flush()  # post-processing runs in the background: not during the timings
        f = run.diagnosis.finding(rule) if run.diagnosis is not None else None
        claims.append(f.us_at_stake if f is not None else 0.0)
        evidence = dict(f.evidence) if f is not None else {}
        cause(), fix()  # the profile left the caches cold: one untimed call of each first
        arms = [(cause, slow), (fix, fast)]
        for arm, out in arms if k % 2 == 0 else arms[::-1]:
            out.append(_median_us(arm, 1))
    return statistics.median(claims), statistics.median(slow) - statistics.median(fast), statistics.median(slow), evidence


class _SlowItems(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.004)  # decoding a sample
        return torch.randn(32)


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


def test_no_claim_where_the_fix_saves_nothing_on_a_cpu():
    """foreach=True on a CPU: torch's foreach ops loop over the tensors themselves, and a value
    read drains no queue — neither gets advice worth more than 2 % of the run."""
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    x = torch.randn(32, 64)
    with ns.profile_neuron(name="single_tensor_sgd") as run:
        for _ in range(10):
            v = model(x).sum()
            v.backward()
            opt.step()
            opt.zero_grad()
            float(v)  # .item() every step
            ns.step()
    d = run.diagnosis
    window = d.window_us
    for rule in ("optimizer_single_tensor", "sync_in_loop"):
        f = d.finding(rule)
        assert f is None or f.us_at_stake <= 0.02 * window, (rule, f)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _llc_bytes() -> int:
    from neuronscope.analysis.hardware import cpu_last_level_cache_bytes

    return cpu_last_level_cache_bytes()


def test_fusing_a_chain_that_streams_through_memory_saves_what_is_claimed():
    """RMSNorm over tensors larger than the last-level cache: compiled, it reads the input
    twice and writes once instead of seven full passes. With the shapes recorded, the claim
    is that traffic's share of the chain's time."""
    rows = max(4096, 2 * _llc_bytes() // (4 * 2048))  # each tensor twice the last-level cache
    x, w = torch.randn(rows, 2048), torch.randn(2048)
    compiled = torch.compile(_rmsnorm)
    compiled(x, w)

    def cause() -> None:
        _rmsnorm(x, w)

    def fix() -> None:
        compiled(x, w)

    claim, saving, slow, evidence = _claim_and_saving("elementwise_chain", cause, fix, rounds=3, record_shapes=True)
    assert evidence["at_stake_is_lower_bound"] is False
    assert saving > 0.2 * slow  # the premise: fusion pays off at this size
    assert saving / 2 <= claim <= saving * 2, (claim, saving)


def test_without_shapes_a_chain_claims_only_the_dispatch_and_says_so():
    x, w = torch.randn(256, 512), torch.randn(512)

    def cause() -> None:
        for _ in range(20):
            _rmsnorm(x, w)

    cause()
    with ns.profile_neuron(name="rmsnorm_small") as run:
        cause()
    ns.flush()
    d = run.diagnosis
    f = d.finding("elementwise_chain")
    assert f is not None and f.evidence["at_stake_is_lower_bound"] is True
    assert "record_shapes=True" in f.message
    # five dispatches removed per call, each at most a few microseconds: far below the chain
    per_call = f.us_at_stake / 20
    assert 0 < per_call <= 5 * 5.0
    assert f.us_at_stake < 0.5 * f.evidence["chain_device_time_us"]


def test_vectorising_a_row_loop_saves_what_is_claimed():
    t = torch.randn(400, 32)

    def cause() -> None:
        torch.stack([t[i] * 2.0 + 1.0 for i in range(t.shape[0])])

    def fix() -> None:
        t * 2.0 + 1.0

    claim, saving, slow, _ = _claim_and_saving("forloop_indexing", cause, fix, rounds=7)
    assert saving > 0.5 * slow
    assert saving / 2 <= claim <= saving * 2, (claim, saving)
