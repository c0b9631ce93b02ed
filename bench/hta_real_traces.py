"""Compute HolisticTraceAnalysis' temporal breakdown for each trace of the real-trace corpus,
once, and store the figures beside the corpus's README (tests/data/real/hta_figures.json).

The tests (tests/real_traces/) compare neuronscope's device busy % with these figures without
needing HTA installed. Run with the bench extra (``pip install -e '.[bench]'``):

    python bench/hta_real_traces.py [CORPUS_DIR]

CORPUS_DIR defaults to $NEURONSCOPE_REAL_TRACES, else ../shared/real-traces beside the checkout.

HTA's window is the span of the GPU events (first start to last end of every event on a
stream: kernels, copies, memsets; without the last profiler iteration, which HTA drops while
reading); busy = 100 - idle_time_pctg over that window. The window is stored as the file's own
``ts`` (microseconds), so a test can measure neuronscope's busy % over the same window.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "real" / "hta_figures.json"


def corpus_dir(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1])
    return Path(os.environ.get("NEURONSCOPE_REAL_TRACES") or ROOT.parent / "shared" / "real-traces")


def hta_busy(trace: Path) -> dict:
    from hta.trace_analysis import TraceAnalysis  # the bench extra

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(trace, Path(tmp) / trace.name)
        analyzer = TraceAnalysis(trace_dir=tmp)
        df = analyzer.get_temporal_breakdown(visualize=False)
        # HTA's window: first start to last end of the events on a stream, without the last
        # profiler iteration (HTA drops it while reading); its ts are the file's, in us
        frame = next(iter(analyzer.t.traces.values()))
        on_stream = frame[frame["stream"].ne(-1)]
        shift = float(analyzer.t.min_ts)  # HTA moves ts to start at the trace's first event
        start_us = float(on_stream["ts"].min()) + shift
        end_us = float((on_stream["ts"] + on_stream["dur"]).max()) + shift
    row = df.iloc[0]
    return {
        "busy_pct": round(100.0 - float(row["idle_time_pctg"]), 2),
        "idle_us": float(row["idle_time(us)"]),
        "window_us": float(row["kernel_time(us)"]),
        "window_start_us": start_us,
        "window_end_us": end_us,
    }


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)  # HTA logs every parse step
    corpus = corpus_dir(argv)
    figures: dict[str, dict] = {}
    for trace in sorted(corpus.glob("*.json*")):
        try:
            figures[trace.name] = hta_busy(trace)
        except Exception as exc:  # noqa: BLE001 - HTA cannot read every format: record why
            figures[trace.name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(f"{trace.name[:70]:70s} {figures[trace.name]}")
    import hta

    doc = {"hta_version": getattr(hta, "__version__", "unknown"), "figures": figures}
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
