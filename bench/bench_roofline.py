"""The roofline stage's cost (issue 28), measured side by side in one run.

1. Post-processing (Kineto -> trace model -> summary) of the 400k-event naive-RMSNorm profile
   recorded with ``record_shapes=True``: this tree (work per op, roofline) against the tree of
   ``--base`` (default: the commit before the stage), each arm a fresh process, alternating,
   median of ``--rounds``. Target: <= +15 %; and 2x the events -> <= 2.2x the stage's time.
2. What ``record_shapes=True`` itself costs the profiled code: a loop of small ops, profiled
   without and with shapes, alternating; the difference per op recorded.

    python bench/bench_roofline.py [--steps 20000] [--rounds 3] [--base 31fa172]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, {bench!r})
from _common import started_profile, workload
from neuronscope.analysis.summary import summarize
from neuronscope.trace.kineto import trace_from_kineto

steps = {steps}
prof = started_profile(record_shapes=True)
workload(steps)
prof.stop()
events = len(prof.profiler.kineto_results.events())
gc.collect()
best = float("inf")
for _ in range(2):
    t = time.perf_counter()
    summary = summarize(trace_from_kineto(prof.profiler.kineto_results))
    best = min(best, time.perf_counter() - t)
    del summary
    gc.collect()
print(json.dumps({{"events": events, "post_s": best}}))
"""


def _post(src: Path, steps: int) -> dict:
    code = CHILD.format(bench=str(ROOT / "bench"), steps=steps)
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def stage_cost(base: str, steps: int, rounds: int) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), base], check=True, capture_output=True)
        try:
            times: dict[tuple[str, int], list[float]] = {}
            events: dict[int, int] = {}
            for r in range(rounds):
                for n in (steps // 2, steps):
                    arms = [("base", tree / "src"), ("roofline", ROOT / "src")]
                    for label, src in arms if r % 2 == 0 else arms[::-1]:
                        res = _post(src, n)
                        times.setdefault((label, n), []).append(res["post_s"])
                        events[n] = res["events"]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False, capture_output=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ok = True
    for n in (steps // 2, steps):
        b, o = med[("base", n)], med[("roofline", n)]
        print(f"[post-processing, record_shapes=True] {events[n]:,} events: base {b:.3f} s, with the roofline {o:.3f} s: +{100 * (o / b - 1):.1f} %")
    extra_half = med[("roofline", steps // 2)] - med[("base", steps // 2)]
    extra_full = med[("roofline", steps)] - med[("base", steps)]
    ratio = med[("roofline", steps)] / med[("roofline", steps // 2)]
    print(f"  the stage's own time: {extra_half * 1e3:.0f} ms -> {extra_full * 1e3:.0f} ms for 2x the events; "
          f"post-processing {ratio:.2f}x for 2x the events (target <= 2.2x)")
    ok &= med[("roofline", steps)] <= 1.15 * med[("base", steps)] and ratio <= 2.2
    return ok


def shapes_cost(ops: int, rounds: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x, w = torch.randn(8, 64), torch.randn(64)

    def loop() -> None:
        for _ in range(ops // 5):  # 5 ops a step: pow, mean, add, rsqrt, mul (+ mul)
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def profiled(shapes: bool) -> float:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes):
            t = time.perf_counter()
            loop()
            return time.perf_counter() - t

    def bare() -> float:
        t = time.perf_counter()
        loop()
        return time.perf_counter() - t

    for _ in range(2):
        bare(), profiled(False), profiled(True)
    res: dict[str, list[float]] = {"bare": [], "profiled": [], "profiled+shapes": []}
    for _ in range(rounds):
        res["bare"].append(bare())
        res["profiled"].append(profiled(False))
        res["profiled+shapes"].append(profiled(True))
    med = {k: statistics.median(v) for k, v in res.items()}
    per_op = (med["profiled+shapes"] - med["profiled"]) / ops * 1e6
    print(f"[record_shapes cost] {ops:,} small ops: unprofiled {med['bare']:.3f} s, profiled {med['profiled']:.3f} s, "
          f"profiled with shapes {med['profiled+shapes']:.3f} s: +{per_op:.2f} us per op recorded "
          f"(+{100 * (med['profiled+shapes'] / med['profiled'] - 1):.0f} % of the profiled loop)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="31fa172", help="the commit before the roofline stage")
    args = parser.parse_args()
    ok = stage_cost(args.base, args.steps, args.rounds)
    shapes_cost(120_000, 5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
