"""What a user reads from the default `neuronscope run`: the same training script, run several
times, quiet and beside two CPU-burning processes (issue 34).

The script is a 4-layer MLP trained with AdamW from a DataLoader (num_workers=0), 200 steps by
default. Each run goes through the CLI with its defaults plus ``--record-shapes`` (windows of
10 s, and ``--window-seconds`` to make a short run windowed); the table prints, per run: whether
the CPU was contended (the profiled thread's run-queue wait), the verdict, the top finding
(rule and subject) and its time at stake per recorded step, and the coverage.

    python bench/bench_default_run.py [--runs 3] [--steps 200] [--window-seconds 1]
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

TRAIN = textwrap.dedent(
    """
    import sys, torch
    from torch.utils.data import DataLoader, TensorDataset

    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
    loss_fn = torch.nn.CrossEntropyLoss()
    for x, y in DataLoader(data, batch_size=64, shuffle=True):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    """
)


def _one(script: Path, out: Path, steps: int, options: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "run", "-q", "--record-shapes", "--output-dir", str(out), *options, str(script), str(steps)],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    run_dir = max((p for p in out.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    d = json.loads((run_dir / "summary.json").read_text())["diagnosis"]
    cov = json.loads((run_dir / "manifest.json").read_text()).get("coverage") or {}
    top = d["findings"][0] if d["findings"] else {}
    return {
        "wall_s": wall,
        "contended": (d.get("contention") or {}).get("contended"),
        "wait_pct": (d.get("contention") or {}).get("wait_pct"),
        "bound_by": d["bound_by"],
        "top": f"{top.get('rule')} {top.get('subject') or ''}".strip(),
        "us_per_step": top.get("us_per_step"),
        "us_to_limit": top.get("us_to_limit"),
        "recorded_pct": cov.get("recorded_pct", 100.0),
        "windows": cov.get("windows", 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--window-seconds", type=float, default=None, help="windows shorter than the default 10 s")
    args = ap.parse_args()
    options = ["--window-seconds", str(args.window_seconds)] if args.window_seconds else []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN)
        rows = []
        for setting in ("quiet", "beside 2 CPU burners"):
            burners = []
            if setting != "quiet":
                burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
                time.sleep(0.5)
            try:
                for k in range(args.runs):
                    rows.append((setting, k + 1, _one(script, Path(tmp) / f"runs-{len(rows)}", args.steps, options)))
            finally:
                for p in burners:
                    p.kill()
                    p.wait()
    print(f"torch threads: {os.cpu_count()} cores; {args.steps} steps; options: --record-shapes {' '.join(options)}")
    print(f"{'setting':<22} {'run':>3} {'wall':>7} {'CPU wait':>9} {'verdict':>8} {'recorded':>9}  top finding: per step at stake (gap to the roof)")
    for setting, k, r in rows:
        if "error" in r:
            print(f"{setting:<22} {k:>3} error: {r['error']}")
            continue
        wait = f"{r['wait_pct']:.0f}%" if r["wait_pct"] is not None else "-"
        per = f"{r['us_per_step'] / 1e3:.3f} ms" if r["us_per_step"] is not None else "-"
        gap = f" ({r['us_to_limit'] / 1e3:.1f} ms above the roof, run total)" if r["us_to_limit"] else ""
        print(
            f"{setting:<22} {k:>3} {r['wall_s']:>6.1f}s {wait:>9} {r['bound_by']:>8} {r['recorded_pct']:>8.0f}%  "
            f"{r['top']}: {per}{gap}"
        )


if __name__ == "__main__":
    main()
