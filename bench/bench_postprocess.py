"""Post-processing speed and memory: neuronscope vs torch's own key_averages(), side by side.

Workload: N naive-RMSNorm steps inside a record_function on CPU (20,000 steps ≈ 400k events).
Prints the figures recorded in docs/performance.md. Targets (issue 2):
  * Kineto events -> summary: <= 1/15 of prof.events() + key_averages(); RSS growth <= 1/5;
  * stop + post-processing: <= 1/5 of torch's stop + key_averages();
  * 2x the events -> <= 2.2x the time.

    python bench/bench_postprocess.py [--steps 20000]
"""

from __future__ import annotations

import argparse
import gc
import sys

from _common import PeakRss, mb, started_profile, timed, workload

from neuronscope.analysis.summary import summarize
from neuronscope.trace.kineto import trace_from_kineto


def ours(prof) -> object:
    return summarize(trace_from_kineto(prof.profiler.kineto_results))


def theirs(prof) -> object:
    return prof.events().key_averages()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    n = args.steps
    ok = True

    # 1. Post-processing of one and the same stopped profile.
    prof = started_profile()
    workload(n)
    prof.stop()
    events = len(prof.profiler.kineto_results.events())
    gc.collect()
    with PeakRss() as mem_ours:
        t_ours, summary = timed(lambda: ours(prof))
    del summary
    gc.collect()
    with PeakRss() as mem_torch:
        t_torch, _ = timed(lambda: theirs(prof))
    ratio_t = t_torch / t_ours
    ratio_m = mem_torch.growth / max(mem_ours.growth, 1)
    print(f"profile: {n} steps, {events} Kineto events")
    print(f"[post-processing] neuronscope {t_ours:.2f} s, +{mb(mem_ours.growth)} | "
          f"torch events()+key_averages() {t_torch:.2f} s, +{mb(mem_torch.growth)}")
    print(f"  time ratio {ratio_t:.1f}x (target >= 15x)   memory ratio {ratio_m:.1f}x (target >= 5x)")
    ok &= ratio_t >= 15 and ratio_m >= 5
    del prof
    gc.collect()

    # 2. Stop + post-processing, two identical profiles.
    prof_a = started_profile()
    workload(n)
    t_stop_a, _ = timed(prof_a.stop)
    t_proc_a, _ = timed(lambda: ours(prof_a))
    del prof_a
    gc.collect()
    prof_b = started_profile()
    workload(n)
    t_stop_b, _ = timed(prof_b.stop)
    t_proc_b, _ = timed(prof_b.key_averages)
    del prof_b
    gc.collect()
    ours_total, torch_total = t_stop_a + t_proc_a, t_stop_b + t_proc_b
    print(f"[stop + post-processing] neuronscope {t_stop_a:.2f}+{t_proc_a:.2f} s | "
          f"torch {t_stop_b:.2f}+{t_proc_b:.2f} s   ratio {torch_total / ours_total:.1f}x (target >= 5x)")
    ok &= torch_total / ours_total >= 5

    # 3. Linearity: half the steps vs all of them, measured alternately, best of 3 each.
    profs = {}
    for steps in (n // 2, n):
        profs[steps] = started_profile()
        workload(steps)
        profs[steps].stop()
    times = {steps: float("inf") for steps in profs}
    for _ in range(3):
        for steps, p in profs.items():
            times[steps] = min(times[steps], timed(lambda: ours(p))[0])
            gc.collect()
    del profs
    growth = times[n] / times[n // 2]
    print(f"[linearity] {n // 2} steps {times[n // 2]:.2f} s, {n} steps {times[n]:.2f} s: "
          f"{growth:.2f}x for 2x the events (target <= 2.2x)")
    ok &= growth <= 2.2
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
