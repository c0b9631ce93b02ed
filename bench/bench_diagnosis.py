"""The diagnosis' cost, side by side with the post-processing it follows.

One stopped profile of N naive-RMSNorm steps (20,000 ≈ 400k events): time the
post-processing (Kineto events -> trace model -> summary) and the diagnosis on that trace
(timeline, gap classes, steps, every rule), best of 3 each, alternating.
Targets (issue 11): diagnosis <= 25 % of the post-processing; 2x the events <= 2.2x the time.

    python bench/bench_diagnosis.py [--steps 20000]
"""

from __future__ import annotations

import argparse
import gc
import sys

from _common import started_profile, timed, workload

from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.summary import summarize
from neuronscope.trace.kineto import trace_from_kineto


def measure(steps: int, repeat: int = 3) -> tuple[int, float, float]:
    prof = started_profile()
    workload(steps)
    prof.stop()
    results = prof.profiler.kineto_results
    best_post = best_diag = float("inf")
    trace = summary = None
    for _ in range(repeat):
        gc.collect()
        t, (trace, summary) = timed(lambda: (lambda tr: (tr, summarize(tr)))(trace_from_kineto(results)))
        best_post = min(best_post, t)
        gc.collect()
        t, _ = timed(lambda: diagnose_trace(trace, summary=summary))
        best_diag = min(best_diag, t)
    return len(trace), best_post, best_diag


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    n = args.steps
    events, post, diag = measure(n)
    ratio = diag / post
    print(f"{n} steps, {events} events: post-processing {post:.3f} s, diagnosis {diag:.3f} s "
          f"= {100 * ratio:.1f}% of it (target <= 25%)")
    half_events, _, half_diag = measure(n // 2)
    growth = diag / half_diag
    print(f"linearity: {half_events} events {half_diag:.3f} s -> {events} events {diag:.3f} s: {growth:.2f}x (target <= 2.2x)")
    ok = ratio <= 0.25 and growth <= 2.2
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
