"""Long runs under ``neuronscope run`` with its defaults (issues 27 and 36).

``length`` (the default): peak RSS and post-processing time should be flat in the length of the
run, not linear (issue 27). ``mlp``: what the default windows record of a training script and
what they cost it — coverage (steps and wall time recorded) and the slowdown against the same
script unprofiled, interleaved, median of 3 (issue 36.4). ``soak``: 10,000 one-step windows on
a small model — the cost of a window and the process's RSS at windows 100, 1,000 and 10,000
must stay flat (issue 36.3).

The script is the one a new user tried: a ``Linear(64, 64)`` called in a loop for S seconds
(~330,000 events/s recorded here). Each arm is its own process, run as a user would run it:

    neuronscope run -q --output-dir DIR long.py S

and measured from outside: peak RSS (``wait4``'s ``ru_maxrss``), and post-processing = the
process's exit minus the moment the script printed that its loop ended. The baseline arm is
the same script for 2 s as one unbounded window (``--no-windows --max-events 0``): what every
run used to be.

    python bench/bench_long_runs.py [length] [--seconds 30 120 600] [--baseline-seconds 2]
    python bench/bench_long_runs.py mlp [--steps 400] [--rounds 3] [--worker-nice 0 5]
    python bench/bench_long_runs.py soak [--windows 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import deque
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


MLP = textwrap.dedent(
    """
    import sys, time, torch
    from torch.utils.data import DataLoader, TensorDataset

    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for x, y in DataLoader(data, batch_size=64):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    print("loop", time.perf_counter() - t0, flush=True)
    """
)


def mlp_arm(steps: int, profiled: bool, extra: list[str], nice: int | None = None) -> dict:
    """One run of the MLP script: its training loop's own wall time, and what was recorded.
    ``nice``: NEURONSCOPE_WORKER_NICE for the run (None: the default)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "mlp.py"
        script.write_text(MLP)
        out = Path(tmp) / "runs"
        prefix = (
            [sys.executable, "-m", "neuronscope", "run", "-q", "--output-dir", str(out), *extra] if profiled else [sys.executable]
        )
        env = {k: v for k, v in os.environ.items() if k != "NEURONSCOPE_WORKER_NICE"}
        if nice is not None:
            env["NEURONSCOPE_WORKER_NICE"] = str(nice)
        t0 = time.perf_counter()
        text = subprocess.run([*prefix, str(script), str(steps)], capture_output=True, text=True, env=env).stdout
        command_s = time.perf_counter() - t0
        loop = float(next(ln for ln in text.splitlines() if ln.startswith("loop")).split()[1])
        cov: dict = {}
        runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
        if runs:
            cov = json.loads((runs[0] / "manifest.json").read_text()).get("coverage") or {}
        return {"loop_s": loop, "command_s": command_s, "coverage": cov}


def mlp(args: argparse.Namespace) -> None:
    """Coverage and slowdown of the default windows on a training script (issue 36.4): the
    script unprofiled and under ``neuronscope run`` (once per ``--worker-nice`` given), the arms
    interleaved, the order rotating each round, medians of ``--rounds``."""
    import statistics

    nices: list[int | None] = list(args.worker_nice) if args.worker_nice else [None]
    arms: list[tuple[str, bool, int | None]] = [("unprofiled", False, None)]
    arms += [("neuronscope run" + ("" if n is None else f", worker nice {n}"), True, n) for n in nices]
    results: dict[str, list[dict]] = {name: [] for name, _, _ in arms}
    for k in range(args.rounds):
        for name, profiled, nice in arms[k % len(arms) :] + arms[: k % len(arms)]:
            results[name].append(mlp_arm(args.steps, profiled, args.extra, nice))
    loop_plain = statistics.median(r["loop_s"] for r in results["unprofiled"])
    command_plain = statistics.median(r["command_s"] for r in results["unprofiled"])
    print(f"MLP script, {args.steps} steps, neuronscope run {' '.join(args.extra) or '(defaults)'}; median of {args.rounds}")
    print(f"  unprofiled: training loop {loop_plain:.2f} s, the whole command {command_plain:.2f} s")
    for name, profiled, _ in arms:
        if not profiled:
            continue
        loop_prof = statistics.median(r["loop_s"] for r in results[name])
        covs = [r["coverage"] for r in results[name]]
        wall_pct = statistics.median(float(c.get("recorded_pct", 100.0)) for c in covs)
        steps_pct = statistics.median(100.0 * c.get("recorded_steps", 0) / max(c.get("steps", 0), 1) for c in covs)
        windows = statistics.median(int(c.get("windows", 1)) for c in covs)
        ended = [c.get("ended_by", {}) for c in covs]
        said = [100.0 * c.get("overhead_ns", 0) / max(c.get("wall_ns", 1), 1) for c in covs]
        bases = sorted({str(c.get("overhead_basis", "")) for c in covs})
        command = statistics.median(r["command_s"] for r in results[name])
        # the loop's timer ends before the last window's stop and analysis: the command's does not
        print(
            f"  {name}: training loop {loop_prof:.2f} s (x{loop_prof / loop_plain:.2f}), "
            f"the whole command {command:.2f} s (x{command / command_plain:.2f})"
        )
        print(
            f"    recorded {wall_pct:.0f}% of the wall time, {steps_pct:.0f}% of the steps, in {windows:.0f} windows; ended by: {ended}"
        )
        print(f"    the run said neuronscope added {statistics.median(said):.0f}% of its wall time (basis: {', '.join(bases)})")


def soak(args: argparse.Namespace) -> None:
    """10,000 one-step windows in one process: per-window cost and RSS stay flat (issue 36.3)."""
    import resource

    import torch

    import neuronscope as ns

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    marks = sorted(m for m in {100, 1000, args.windows} if m <= args.windows)
    # the last 200 steps' times only: a list of every step grew the process ~32 B a step (at
    # nice 5 the program runs ~900,000 steps in 10,000 windows: ~29 MB of the bench's own)
    times: deque[float] = deque(maxlen=200)
    window_ends: list[float] = []  # when each window was seen ended (perf_counter)
    # and the process's CPU time then (every thread: the program, recording, analysis, writing):
    # the wall cycle swings +-30 % between runs with the windows' analysis below the program's
    # priority (the scheduler's share), the CPU a window costs does not
    cpu_ends: list[float] = []
    at: dict[int, tuple[float, float, float, float]] = {}
    tmp = tempfile.mkdtemp(prefix="soak-")
    with ns.profile_neuron(name="soak", output_dir=tmp, windows=ns.Windows(steps=1, keep=1)) as run:
        t_last = time.perf_counter()
        while True:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            ns.step()
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            windows = _windows_done(run)
            if len(window_ends) < windows:
                cpu_now = time.process_time()
                while len(window_ends) < windows:
                    window_ends.append(now)
                    cpu_ends.append(cpu_now)
            for m in marks:
                if m not in at and windows >= m:
                    block = list(times)
                    # a window's cycle: recorded, stopped, analysed, folded, written, the next started
                    ends, cpus = window_ends[max(0, m - 100) : m], cpu_ends[max(0, m - 100) : m]
                    cycle = (ends[-1] - ends[0]) / max(len(ends) - 1, 1) * 1e3
                    cpu = (cpus[-1] - cpus[0]) / max(len(cpus) - 1, 1) * 1e3
                    at[m] = (cycle, sum(block) / len(block) * 1e3, rss_mb(), cpu)
                    print(
                        f"  window {m}: {cycle:.2f} ms a window ({cpu:.2f} ms of CPU), {at[m][1]:.3f} ms a step, RSS {at[m][2]:.0f} MB",
                        flush=True,
                    )
            if windows >= args.windows:
                break
    ns.flush(600)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"soak: {args.windows} one-step windows; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    lo, hi = at[marks[0]], at[marks[-1]]
    print(
        f"  at {marks[-1]} vs {marks[0]}: x{hi[0] / lo[0]:.2f} a window (x{hi[3] / lo[3]:.2f} its CPU), "
        f"x{hi[1] / lo[1]:.2f} a step; RSS growth {hi[2] - lo[2]:+.0f} MB"
    )


def _windows_done(run: object) -> int:
    """Windows the running profile has ended so far (the recording's window number, less the open one)."""
    from neuronscope.capture import session

    for capture in session.open_captures():
        rec = getattr(getattr(capture, "bounds", None), "recording", None)  # capture/bounds.py
        if rec is not None:
            return rec.window_index - (1 if rec.recording else 0)
    return 0


def length(args: argparse.Namespace) -> None:
    rows = [dict(arm(args.baseline_seconds, ["--no-windows", "--max-events", "0"]), arm="one unbounded window")]
    for s in args.seconds:
        rows.append(dict(arm(s, []), arm="defaults"))
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(
        f"{'arm':22} {'script s':>8} {'peak RSS MB':>11} {'post s':>7} {'windows':>7} {'recorded':>8} {'events':>10} {'disk MB':>8} status"
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what")
    p_len = sub.add_parser("length", help="RSS and post-processing against the run's length (issue 27)")
    p_len.add_argument("--seconds", type=float, nargs="+", default=[30, 120, 600])
    p_len.add_argument("--baseline-seconds", type=float, default=2.0)
    p_mlp = sub.add_parser("mlp", help="coverage and slowdown of the default windows on a training script")
    p_mlp.add_argument("--steps", type=int, default=400)
    p_mlp.add_argument("--rounds", type=int, default=3)
    p_mlp.add_argument(
        "--worker-nice",
        type=int,
        nargs="+",
        help="one profiled arm per value of NEURONSCOPE_WORKER_NICE (default: one, the default)",
    )
    p_mlp.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more neuronscope run options")
    p_soak = sub.add_parser("soak", help="10,000 one-step windows: per-window cost and RSS")
    p_soak.add_argument("--windows", type=int, default=10_000)
    args = parser.parse_args()
    if args.what is None:
        args = parser.parse_args(["length", *sys.argv[1:]])
    {"length": length, "mlp": mlp, "soak": soak}[args.what](args)


if __name__ == "__main__":
    main()
