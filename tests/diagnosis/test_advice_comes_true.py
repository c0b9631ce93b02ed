"""Advice that comes true: a finding's time at stake is what applying its fix saves. Each case
profiles the workload with the cause, then times it and the same workload with the fix applied,
unprofiled and interleaved (medians): the claim must be within a factor of 2 of a significant
saving, and no finding may claim more than 2 % of the run where the fix saves nothing.
bench/bench_advice.py runs every rule this way; these are the cases whose effect is large
enough to judge on a loaded 2-core machine."""

from __future__ import annotations

import statistics
import time

import torch

import neuronscope as ns


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
