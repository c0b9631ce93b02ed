"""Long runs under ``neuronscope run`` with its defaults: peak RSS and post-processing time
should be flat in the length of the run, not linear (issue 27).

The script is the one a new user tried: a ``Linear(64, 64)`` called in a loop for S seconds
(~330,000 events/s recorded here). Each arm is its own process, run as a user would run it:

    neuronscope run -q --output-dir DIR long.py S

and measured from outside: peak RSS (``wait4``'s ``ru_maxrss``), and post-processing = the
process's exit minus the moment the script printed that its loop ended. The baseline arm is
the same script for 2 s as one unbounded window (``--no-windows --max-events 0``): what every
run used to be.

    python bench/bench_long_runs.py [--seconds 30 120 600] [--baseline-seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    m = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    t0 = time.time()
    n = 0
    while time.time() - t0 < float(sys.argv[1]):
        m(x)
        n += 1
    print("loop-end", time.time(), n, flush=True)
    """
)


def arm(seconds: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "long.py"
        script.write_text(SCRIPT)
        out = Path(tmp) / "runs"
        cmd = [sys.executable, "-m", "neuronscope", "run", "-q", "--output-dir", str(out), *extra, str(script), str(seconds)]
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        t_exit = time.time()
        text = proc.stdout.read() if proc.stdout else ""
        line = next((ln for ln in text.splitlines() if ln.startswith("loop-end")), None)
        loop_end = float(line.split()[1]) if line else t_exit
        calls = int(line.split()[2]) if line else 0
        manifest: dict = {}
        runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
        if runs:
            manifest = json.loads((runs[0] / "manifest.json").read_text())
        disk = sum(f.stat().st_size for r in runs for f in r.rglob("*") if f.is_file())
        cov = manifest.get("coverage") or {}
        return {
            "seconds": seconds,
            "exit": os.waitstatus_to_exitcode(status),
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "post_s": t_exit - loop_end,
            "wall_s": t_exit - t0,
            "calls": calls,
            "windows": cov.get("windows", 1),
            "recorded_pct": cov.get("recorded_pct", 100.0),
            "events": manifest.get("events", 0),
            "disk_mb": disk / 2**20,
            "status": manifest.get("status"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, nargs="+", default=[30, 120, 600])
    parser.add_argument("--baseline-seconds", type=float, default=2.0)
    args = parser.parse_args()
    rows = [dict(arm(args.baseline_seconds, ["--no-windows", "--max-events", "0"]), arm="one unbounded window")]
    for s in args.seconds:
        rows.append(dict(arm(s, []), arm="defaults"))
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(f"{'arm':22} {'script s':>8} {'peak RSS MB':>11} {'post s':>7} {'windows':>7} {'recorded':>8} {'events':>10} {'disk MB':>8} status")
    for r in rows:
        print(
            f"{r['arm']:22} {r['seconds']:8.0f} {r['peak_rss_mb']:11.0f} {r['post_s']:7.1f} {r['windows']:7d} "
            f"{r['recorded_pct']:7.0f}% {r['events']:10,d} {r['disk_mb']:8.1f} {r['status']}"
        )
    base = rows[1]
    for r in rows[2:]:
        print(
            f"{r['seconds']:.0f} s vs {base['seconds']:.0f} s: x{r['seconds'] / base['seconds']:.0f} the length, "
            f"peak RSS x{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}, post-processing x{r['post_s'] / max(base['post_s'], 1e-3):.2f}"
        )


if __name__ == "__main__":
    main()
