"""One row per real-trace corpus file: how much device time neuronscope places on a different op
than the reference attribution (correlation -> runtime call -> innermost enclosing op, computed
from the raw file by tests/real_traces/reference.py), the verdict, and the communication figures.

    python bench/real_trace_table.py [CORPUS_DIR]

CORPUS_DIR defaults to $NEURONSCOPE_REAL_TRACES, else ../shared/real-traces beside the checkout.
Prints a Markdown table (the closing note of issue 24 and docs/diagnosis.md quote it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "real_traces"))

from reference import placed_differently, raw_events, reference_attribution

import neuronscope as ns
from neuronscope.analysis.summary import summarize


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else Path(os.environ.get("NEURONSCOPE_REAL_TRACES") or ROOT.parent / "shared" / "real-traces")
    print("| trace | device | placed differently | verdict | collectives | exposed | overlap | kinds |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(corpus.glob("*.json*")):
        trace = ns.load_trace(path)
        ref, total = reference_attribution(raw_events(path))
        ours = {r.name: r.self_device_time_us for r in summarize(trace).rows if r.self_device_time_us}
        moved = "n/a (CPU)" if trace.device == "cpu" else f"{100 * placed_differently(ours, ref, total):.2f}%"
        d = ns.diagnose(path)
        c = d.communication
        comm = ("-", "-", "-", "-") if c is None else (
            f"{c.collective_us / 1e3:.1f} ms ({c.backend})",
            f"{c.exposed_us / 1e3:.1f} ms ({c.exposed_pct_of_window:.0f}%)",
            f"{c.overlap_pct:.0f}%",
            ", ".join(f"{k.kind} ×{k.calls}" for k in c.by_kind[:3]),
        )
        name = path.name.replace(".json.gz", "").replace(".pt.trace", "")
        print(f"| {name[:58]} | {trace.device} | {moved} | {d.bound_by} ({d.device_busy_pct:.0f}% busy) | " + " | ".join(comm) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
