"""Do ns.compare's speed-ups hold? The RMSNorm variants of examples/rmsnorm.py compared by
``ns.compare``, and the same variants timed separately, unprofiled, with torch.utils.benchmark
(``Timer.blocked_autorange`` per variant, the variants interleaved round by round for as long as
compare's timing took); then each speed-up over the naive variant from both, side by side.

    python bench/bench_compare.py [--repeats 3] [--max-time 10] [--threads 1] [--no-compile]

Each repeat runs both arms, in alternating order (the machine's speed drifts: neither arm always
goes first). Prints a Markdown table (docs/compare.md, "Do the speed-ups hold?"): per variant the
median over repeats of each arm's speed-up and their ratio; the goal is agreement within 15 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import neuronscope as ns  # noqa: E402
from rmsnorm import rmsnorm_fused, rmsnorm_naive  # noqa: E402

GOAL = 0.15  # the speed-ups must agree within 15 %


def separately(variants: dict[str, Callable[..., Any]], x: torch.Tensor, w: torch.Tensor, seconds: float) -> dict[str, float]:
    """Each variant's median time per call from rounds of torch.utils.benchmark, interleaved."""
    timers = {
        name: Timer("fn(x, w)", globals={"fn": fn, "x": x, "w": w}, num_threads=torch.get_num_threads())
        for name, fn in variants.items()
    }
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    started = time.perf_counter()
    rounds = 0
    while rounds < 5 or time.perf_counter() - started < seconds:
        for name in names[rounds % len(names) :] + names[: rounds % len(names)]:
            per_round[name].append(timers[name].blocked_autorange(min_run_time=0.05).median)
        rounds += 1
    return {name: statistics.median(times) for name, times in per_round.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-time", type=float, default=10.0, help="ns.compare's max_time_s")
    # one intra-op thread by default, as bench_advice.py: on a shared 2-core machine two threads
    # wait for each other's core, and both arms' times then vary tenfold from minute to minute
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads first (0: torch's default)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, w = torch.randn(args.batch, args.seq, args.hidden), torch.randn(args.hidden)
    variants: dict[str, Callable[..., Any]] = {"naive": rmsnorm_naive, "torch.rms_norm": rmsnorm_fused}
    if not args.no_compile:
        variants["torch.compile(naive)"] = torch.compile(rmsnorm_naive)
    for fn in variants.values():  # compile before either arm
        fn(x, w)
    print(f"x={tuple(x.shape)} fp32, {torch.get_num_threads()} threads, {args.repeats} repeats, max_time_s={args.max_time:g}")
    ours: dict[str, list[float]] = {name: [] for name in variants}
    theirs: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as runs:
        for repeat in range(args.repeats):
            for arm in ("compare", "separate") if repeat % 2 == 0 else ("separate", "compare"):
                if arm == "compare":
                    c = ns.compare(variants, x, w, steps=5, max_time_s=args.max_time, output_dir=runs)
                    for name in variants:
                        ours[name].append(c[name].speedup[0] if c[name].speedup else 1.0)
                    timing_s = c.timing_s
                    print(
                        f"repeat {repeat + 1}: ns.compare, {c.rounds} rounds in {timing_s:.1f}s: "
                        + ", ".join(f"{v.name} {v.step.median * 1e3:.3f}ms ({v.verdict})" for v in c if v.step is not None)
                    )
                else:
                    medians = separately(variants, x, w, args.max_time)
                    for name in variants:
                        theirs[name].append(medians["naive"] / medians[name])
                    print(
                        f"repeat {repeat + 1}: torch.utils.benchmark: "
                        + ", ".join(f"{n} {m * 1e3:.3f}ms" for n, m in medians.items())
                    )
    print("\n| variant | ns.compare speed-up | separately timed | ratio | per repeat (ns.compare / separately) | within 15 % |")
    print("|---|---|---|---|---|---|")
    failed = 0
    for name in variants:
        a, b = statistics.median(ours[name]), statistics.median(theirs[name])
        pairs = ", ".join(f"{p:.2f}/{q:.2f}" for p, q in zip(ours[name], theirs[name]))
        ok = abs(a / b - 1) <= GOAL
        failed += not ok
        print(f"| {name} | {a:.2f}x | {b:.2f}x | {a / b:.3f} | {pairs} | {'yes' if ok else 'NO'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
