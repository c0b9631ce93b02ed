"""Do the findings' promises come true? For each rule that proposes a code change: a workload
with the cause and the same workload with the fix applied. The first is profiled (defaults) and
its finding's ``us_at_stake`` read; then both are timed unprofiled — a profile and both timings
each round — and the median saving compared with the median claim.

    python bench/bench_advice.py [--rounds N]

Prints a Markdown table (docs/performance.md, "Advice that comes true"). A claim passes when it
is within a factor of 2 of the measured saving where that saving is significant (> 2 % of the
run), and claims at most 2 % of the run where the fix saves nothing. Runs with one intra-op
thread (``torch.set_num_threads(1)``) so that the two arms do not fight over the two cores.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import neuronscope as ns

SIGNIFICANT = 0.02  # a saving below 2 % of the run is "saves nothing" on this machine


@dataclass
class Case:
    rule: str
    what: str
    cause: Callable[[], None]
    fix: Callable[[], None]
    options: dict = field(default_factory=dict)  #: profile_neuron options for the claim


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def cases() -> list[Case]:
    torch.manual_seed(0)
    out: list[Case] = []

    # sync_in_loop: .item() every step, then Python work that uses the value (CPU: no queue)
    model = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)

    def detok(v: float) -> int:
        return sum(int(v * k) % 7 for k in range(200))

    @torch.no_grad()  # a decoding loop: no autograd (and no requires_grad warning on each read)
    def item_cause() -> None:
        for _ in range(50):
            detok(model(x).sum().item())

    @torch.no_grad()
    def item_fix() -> None:
        # the same steps and the same Python work, the values read once at the end
        vals = []
        for _ in range(50):
            vals.append(model(x).sum())
            detok(1.0)
        torch.stack(vals).tolist()

    out.append(Case("sync_in_loop", ".item() every step vs one read at the end (CPU)", item_cause, item_fix))

    # elementwise_chain: the naive RMSNorm vs torch.compile'd
    xs, ws = torch.randn(512, 1024), torch.randn(1024)
    compiled = torch.compile(_rmsnorm)
    compiled(xs, ws)  # compile once, outside the timing

    def ew_cause() -> None:
        for _ in range(20):
            _rmsnorm(xs, ws)

    def ew_fix() -> None:
        for _ in range(20):
            compiled(xs, ws)

    out.append(Case("elementwise_chain", "naive RMSNorm vs torch.compile (512x1024 fp32, 20 calls; in cache)", ew_cause, ew_fix))

    # the same beyond the last-level cache, shapes recorded: fusion removes memory traffic
    xb, wb = torch.randn(8192, 2048), torch.randn(2048)
    compiled(xb, wb)
    out.append(
        Case(
            "elementwise_chain",
            "the same, 8192x2048 fp32 (64 MiB, beyond the cache), record_shapes=True, 1 call",
            lambda: _rmsnorm(xb, wb),
            lambda: compiled(xb, wb),
            {"record_shapes": True},
        )
    )

    # optimizer_single_tensor: SGD foreach=False vs True (CPU: torch's foreach loops per tensor)
    def sgd(foreach: bool) -> Callable[[], None]:
        m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, foreach=foreach)
        inp = torch.randn(32, 64)

        def run() -> None:
            for _ in range(10):
                m(inp).sum().backward()
                opt.step()
                opt.zero_grad()

        return run

    out.append(Case("optimizer_single_tensor", "SGD foreach=False vs True (6 Linear, 10 steps)", sgd(False), sgd(True)))

    # grad_not_set_to_none: zero_grad(set_to_none=False) vs True
    def zero(to_none: bool) -> Callable[[], None]:
        m = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        inp = torch.randn(8, 512)

        def run() -> None:
            for _ in range(10):
                opt.zero_grad(set_to_none=to_none)
                m(inp).sum().backward()
                opt.step()

        return run

    out.append(Case("grad_not_set_to_none", "zero_grad(set_to_none=False) vs True (8 Linear 512, 10 steps)", zero(False), zero(True)))

    # forloop_indexing: a Python loop over rows vs one vectorised op
    t = torch.randn(400, 32)

    def loop_cause() -> None:
        torch.stack([t[i] * 2.0 + 1.0 for i in range(t.shape[0])])

    def loop_fix() -> None:
        t * 2.0 + 1.0

    out.append(Case("forloop_indexing", "per-row loop (400 rows) vs one op", loop_cause, loop_fix))

    # sync_dataloader / data_wait: a slow dataset with num_workers=0 vs 2
    class Slow(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(0.004)
            return torch.randn(64)

    lin = torch.nn.Linear(64, 64)

    def loader(workers: int) -> Callable[[], None]:
        dl = torch.utils.data.DataLoader(Slow(), batch_size=4, num_workers=workers, persistent_workers=workers > 0)

        def run() -> None:
            for b in dl:
                lin(b).sum()
                time.sleep(0.010)  # the step's own work, which workers can overlap with loading

        return run

    out.append(Case("sync_dataloader", "slow dataset, num_workers=0 vs 2 (8 batches)", loader(0), loader(2)))
    return out


def claimed_us(case: Case, k: int) -> float:
    with ns.profile_neuron(name=f"{case.rule}-{k}", **case.options) as run:
        case.cause()
    ns.flush()  # post-processing runs in the background: let it finish before timing anything
    f = run.diagnosis.finding(case.rule) if run.diagnosis is not None else None
    return f.us_at_stake if f is not None else 0.0


def measure(case: Case, rounds: int) -> tuple[float, float, float]:
    """(median claim, median run with the cause, median run with the fix): each round profiles
    the cause and times both arms, so that the machine's drift affects all three alike."""
    case.cause(), case.fix()  # warm up both
    claims: list[float] = []
    a: list[float] = []
    b: list[float] = []
    for k in range(rounds):
        claims.append(claimed_us(case, k))
        # the profile and its post-processing leave the caches cold and freed memory to fault
        # back in: one untimed call of each arm first, then the two in alternating order
        case.cause(), case.fix()
        arms = [(case.cause, a), (case.fix, b)]
        for arm, out in arms if k % 2 == 0 else arms[::-1]:
            t0 = time.perf_counter()
            arm()
            out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(claims), statistics.median(a), statistics.median(b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| rule | workload | claimed | measured saving | run (with the cause) | verdict |")
    print("|---|---|---|---|---|---|")
    failures = 0
    for case in cases():
        claim, cause_us, fix_us = measure(case, args.rounds)
        saving = cause_us - fix_us
        significant = saving > SIGNIFICANT * cause_us
        if significant:
            ok = saving / 2 <= claim <= saving * 2
        else:
            ok = claim <= SIGNIFICANT * cause_us
        failures += not ok
        ratio = f" ({claim / saving:.2f}x)" if significant and saving > 0 else ""
        print(
            f"| `{case.rule}` | {case.what} | {claim / 1e3:.3f} ms{ratio} | {saving / 1e3:.3f} ms | {cause_us / 1e3:.3f} ms | "
            f"{'ok' if ok else 'MISSED'}{'' if significant else ' (fix saves nothing)'} |"
        )
    ns.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
