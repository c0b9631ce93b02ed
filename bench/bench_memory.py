"""The memory stage's cost, side by side with the post-processing it follows (issue 19, item 7).

One stopped profile of N naive-RMSNorm steps recorded with ``profile_memory=True`` (10,000
steps ≈ 400k events: 200k ops + 200k allocator records). Timed, best of 3, alternating:

* post-processing: Kineto events -> trace model -> summary (what every run pays);
* the memory stage: allocator records (Kineto's JSON file, read in chunks by one vectorised
  pass) -> pairing by address, attribution (on the summary's nesting, shared), steps, findings. The JSON write itself is not counted:
  a run writes it anyway for trace.json.gz, and the output stage then gzips the same file;
  it is printed on its own line (it is an extra cost only with save_trace=False);
* for comparison: reading the addresses from torch's event tree instead.

With memory off nothing of this runs (the stage is skipped; ``profile_memory`` stays off).
Targets: memory stage <= 25 % of the post-processing; 2x the events <= 2.2x the time.

    python bench/bench_memory.py [--steps 10000]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile

import numpy as np
from _common import started_profile, timed, workload

from neuronscope.analysis.memory import analyse_memory
from neuronscope.analysis.summary import summarize
from neuronscope.trace.kineto import trace_from_kineto
from neuronscope.trace.memory import MEMORY_EVENT, OOM_EVENT, records_from_event_tree, records_from_kineto_json


def measure(steps: int, repeat: int = 3, tree: bool = False) -> dict[str, float]:
    prof = started_profile(profile_memory=True)
    workload(steps)
    prof.stop()
    results = prof.profiler.kineto_results
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    t_save, _ = timed(lambda: results.save(path))
    best = {"post": float("inf"), "memory": float("inf"), "tree": float("inf"), "read": float("inf")}
    trace = None
    for _ in range(repeat):
        gc.collect()
        t, (trace, _s) = timed(lambda: (lambda tr: (tr, summarize(tr)))(trace_from_kineto(results)))
        best["post"] = min(best["post"], t)
        gc.collect()

        def stage():
            # as the pipeline does (capture/memory.py): the file read in chunks, then the analysis
            rows = np.flatnonzero(trace.name_id == trace.names.index(MEMORY_EVENT))
            ooms = trace.names.count(OOM_EVENT)  # no OOM event: read from the file's end (segment_records)
            t_read, records = timed(
                lambda: records_from_kineto_json(path, trace.start_ns[rows], trace.thread[rows], oom_events=ooms)
            )
            return t_read, analyse_memory(trace, records)

        t, (t_read, (report, _f)) = timed(stage)
        if t < best["memory"]:
            best["memory"], best["read"] = t, t_read
    if tree:
        gc.collect()
        best["tree"], _ = timed(lambda: records_from_event_tree(results))
    os.unlink(path)
    best["save"] = t_save
    best["events"] = len(trace)
    best["records"] = report.allocations + report.frees
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    args = parser.parse_args()
    n = args.steps
    full = measure(n, tree=True)
    ratio = full["memory"] / full["post"]
    print(f"{n} steps, {full['events']} events ({full['records']} allocator records)")
    print(f"  post-processing (Kineto -> trace model -> summary) {full['post']:.3f} s")
    print(f"  memory stage (JSON records -> report + findings)    {full['memory']:.3f} s = {100 * ratio:.1f}% (target <= 25%)")
    print(f"    of which reading the records {full['read']:.3f} s, the analysis {full['memory'] - full['read']:.3f} s")
    print(f"  [not counted] Kineto's JSON write, done anyway for trace.json.gz: {full['save']:.3f} s")
    print(f"  [comparison] addresses from torch's event tree instead: {full['tree']:.3f} s = "
          f"{100 * full['tree'] / full['post']:.0f}% of the post-processing")
    half = measure(n // 2)
    growth = full["memory"] / half["memory"]
    print(f"linearity: {half['events']} events {half['memory']:.3f} s -> {full['events']} events {full['memory']:.3f} s: "
          f"{growth:.2f}x (target <= 2.2x)")
    ok = ratio <= 0.25 and growth <= 2.2
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
