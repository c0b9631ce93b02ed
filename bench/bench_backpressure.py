"""Back-pressure: what the memory budget (``max_pending_bytes``) holds a flood of profiles to.

A loop calls a profiled function back to back. On this machine the two workers keep up with
eager profiles made back to back (about three pending at any time), so a slow output stage
-- a sink taking ``--slow-sink-ms`` per run, standing in for a slow disk or exporter --
makes the backlog grow as it would in production. Three arms, each in its own process, side by side:

* ``unlimited`` — ``max_pending_bytes=0``: every profile is kept until written; the baseline;
* ``sampled``   — the budget, a sampled decorator (``every=1``): over budget, calls are
  skipped before profiling (``skipped_backpressure``);
* ``waits``     — the budget, no sampling options: over budget, the caller waits for the
  workers instead (``backpressure_waits``), and every call is profiled.

Prints, per arm: calls profiled / skipped / waits, the peak of the backlog (bytes counted),
the peak RSS growth, the wall time of the loop; and the ratios of peak RSS growth to the
unlimited arm's.

    python bench/bench_backpressure.py [--calls 150] [--steps 400] [--budget-mib 64] [--slow-sink-ms 500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def arm(name: str, calls: int, steps: int, budget: int, slow_sink_ms: int) -> dict:
    from _common import PeakRss, rmsnorm_naive

    import torch

    import neuronscope as ns
    from neuronscope import _worker

    from neuronscope.capture.processing import add_sink

    ns.configure(max_pending_bytes=0 if name == "unlimited" else budget)
    if slow_sink_ms:
        add_sink(lambda run: time.sleep(slow_sink_ms / 1000))
    sampling = {"every": 1} if name == "sampled" else {}

    @ns.profile_neuron(name="flood", save_trace=True, **sampling)
    def infer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(steps):
            x = rmsnorm_naive(x, w)
        return x

    x, w = torch.randn(8, 64), torch.randn(64)
    infer(x, w)  # warm-up: torch's first profiler start, and the backlog learns the event rate
    assert ns.flush(120)
    _worker.backlog.peak_bytes = 0
    before = ns.stats()
    with PeakRss() as mem:
        t0 = time.perf_counter()
        for _ in range(calls):
            infer(x, w)
        loop_s = time.perf_counter() - t0
        assert ns.flush(600)
    after = ns.stats()
    delta = {k: after[k] - before[k] for k in ("profiled", "skipped_backpressure", "backpressure_waits")}
    return {
        **delta,
        "peak_backlog_bytes": _worker.backlog.peak_bytes,
        "largest_profile_bytes": _worker.backlog.largest_bytes,
        "peak_rss_growth": mem.growth,
        "loop_s": loop_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--steps", type=int, default=400, help="RMSNorm steps per call (~7 events each)")
    parser.add_argument("--budget-mib", type=int, default=64)
    parser.add_argument("--slow-sink-ms", type=int, default=500)
    parser.add_argument("--arm", choices=("unlimited", "sampled", "waits"))
    args = parser.parse_args()
    budget = args.budget_mib * 2**20
    if args.arm:
        print("RESULT " + json.dumps(arm(args.arm, args.calls, args.steps, budget, args.slow_sink_ms)))
        return 0
    results = {}
    for name in ("unlimited", "sampled", "waits"):
        proc = subprocess.run(
            [sys.executable, __file__, "--arm", name, "--calls", str(args.calls), "--steps", str(args.steps),
             "--budget-mib", str(args.budget_mib), "--slow-sink-ms", str(args.slow_sink_ms)],
            capture_output=True, text=True, cwd=HERE, check=True,
        )
        results[name] = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    base = results["unlimited"]["peak_rss_growth"]
    mib = 2**20
    print(f"{args.calls} calls x {args.steps} RMSNorm steps, max_pending_bytes {args.budget_mib} MiB, "
          f"a sink taking {args.slow_sink_ms} ms per run")
    print(f"{'arm':<10} {'profiled':>8} {'skipped':>8} {'waits':>6} {'peak backlog':>13} {'largest':>8} "
          f"{'peak RSS +':>11} {'x unlimited':>11} {'loop':>7}")
    for name, r in results.items():
        print(f"{name:<10} {r['profiled']:>8} {r['skipped_backpressure']:>8} {r['backpressure_waits']:>6} "
              f"{r['peak_backlog_bytes'] / mib:>9.1f} MiB {r['largest_profile_bytes'] / mib:>4.1f} MiB "
              f"{r['peak_rss_growth'] / mib:>7.0f} MiB {r['peak_rss_growth'] / base:>11.2f} {r['loop_s']:>6.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
