"""A small torchrun job for the multi-rank tests: gloo, an all_reduce per step, one rank slower.

    python -m torch.distributed.run --nproc-per-node 4 --master-addr 127.0.0.1 --master-port P \\
        tests/multirank/torchrun_job.py --steps 6 --slow-rank 2 --sleep-ms 40

Each step is one profiled call (``@ns.profile_neuron``): a little compute, the slow rank's
sleep, then an all_reduce that every rank waits in. Run directories go to
``$NEURONSCOPE_OUTPUT_DIR/<job id>/rank<N>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import neuronscope as ns


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--size", type=int, default=192)
    p.add_argument("--mode", choices=("decorator", "with"), default="decorator")
    p.add_argument("--ranks", default="all", help="'all' or comma-separated ranks that profile")
    p.add_argument("--sync", action="store_true", help="after each step: wait for its processing, then a barrier")
    p.add_argument("--report", default=None, help="write what this rank saw (run paths, otel ids) as JSON here")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ranks = "all" if args.ranks == "all" else [int(r) for r in args.ranks.split(",")]
    x = torch.randn(args.size, args.size)
    sleep_s = args.sleep_ms / 1e3 if rank == args.slow_rank else 0.0
    runs = []

    def work() -> torch.Tensor:
        y = x
        for _ in range(4):
            y = torch.tanh(y @ x) * 0.5
        if sleep_s:
            time.sleep(sleep_s)  # the known extra time of the slow rank
        dist.all_reduce(y)
        return y

    def settle() -> None:
        # On a small shared machine the background processing of step n would otherwise run
        # during step n+1 on every rank, and its CPU contention, not the sleep, would dominate.
        if args.sync:
            ns.flush(60)
            dist.barrier()

    if args.mode == "decorator":
        step = ns.profile_neuron(name="train_step", ranks=ranks)(work)
        work()  # warm-up: gloo's first collective sets up its connections
        for _ in range(args.steps):
            step()
            runs.append(ns.last_run())
            settle()
    else:
        work()
        for _ in range(args.steps):
            with ns.profile_neuron(name="train_step", ranks=ranks) as run:
                work()
            runs.append(run)
            settle()
    assert ns.flush(60)
    if args.report:
        out = [
            {"path": str(r.path) if r and r.path else None, "status": r.status if r else None,
             "otel": (r.manifest or {}).get("otel") if r else None, "skip_reason": r.skip_reason if r else None}
            for r in runs
        ]
        with open(os.path.join(args.report, f"rank{rank}.json"), "w", encoding="utf-8") as f:
            json.dump({"rank": rank, "runs": out}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
