"""Profiling a training loop in windows with torch.profiler's schedule.

wait=1, warmup=1, active=3, repeat=2: steps 0 and 5 are skipped, 1 and 6 warm up, and
steps 2-4 and 7-9 are recorded: two windows, two runs, each with its own run directory.

    python examples/training_step.py [--steps 12]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import schedule

import neuronscope as ns


def main(argv: list[str] | None = None) -> list[ns.Run]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    with ns.profile_neuron(
        name="train", schedule=schedule(wait=1, warmup=1, active=3, repeat=2), output_dir=args.output_dir
    ) as run:
        for _ in range(args.steps):
            with ns.region("forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with ns.region("backward"):
                opt.zero_grad()
                loss.backward()
            with ns.region("optimizer"):
                opt.step()
            run.step()

    for i, window in enumerate(run.windows):
        window.wait()
        top = window.summary.top(1)[0]
        print(f"window {i}: {window.path}  top op {top.name} ({top.device_pct:.1f}% of device time)")
        print("  regions:", ", ".join(f"{p} x{s.region_stats.occurrences}" for p, s in window.summary.regions.items()))
    return run.windows


if __name__ == "__main__":
    main()
