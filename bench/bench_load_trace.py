"""Loading a big saved trace and printing its summary: neuronscope vs HolisticTraceAnalysis.

Makes a ~420k-event Kineto trace.json (20,000 naive-RMSNorm steps, ~105 MB), then times,
side by side in this process: ``neuronscope.load_trace`` + ``summarize`` + printing the
table, against HTA's ``TraceAnalysis(trace_dir=...)`` load (``pip install
holistictraceanalysis``). Target (issue 6): <= 1/4 of HTA's time. Peak RSS growth of each
is printed too.

    python bench/bench_load_trace.py [--steps 20000]
"""

from __future__ import annotations

import argparse
import gc
import io
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

from _common import PeakRss, mb, started_profile, timed, workload

import neuronscope as ns


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ns-bench-"))
    trace_dir = work / "trace"
    trace_dir.mkdir()
    prof = started_profile()
    workload(args.steps)
    prof.stop()
    path = trace_dir / "rank0.trace.json"  # HTA wants a directory of per-rank traces
    prof.export_chrome_trace(str(path))
    del prof
    gc.collect()
    print(f"trace: {path.stat().st_size / 1e6:.0f} MB")

    def ours():
        summary = ns.summarize(ns.load_trace(path))
        print(summary.table(limit=10), file=io.StringIO())
        return summary

    with PeakRss() as mem_ours:
        t_ours, summary = timed(ours)
    events = sum(r.calls for r in summary.rows)
    del summary
    gc.collect()
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        print("HolisticTraceAnalysis missing: pip install holistictraceanalysis")
        return 2
    with PeakRss() as mem_hta, redirect_stdout(io.StringIO()):
        t_hta, _ = timed(lambda: TraceAnalysis(trace_dir=str(trace_dir)))
    print(f"neuronscope load_trace + summarize + table: {t_ours:.2f} s, +{mb(mem_ours.growth)} ({events} op calls)")
    print(f"HolisticTraceAnalysis TraceAnalysis(trace_dir): {t_hta:.2f} s, +{mb(mem_hta.growth)}")
    ratio = t_hta / t_ours
    print(f"ratio {ratio:.1f}x (target >= 4x)")
    ok = ratio >= 4
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
