"""What a dead OTLP endpoint (nothing listening) costs: ``neuronscope export RUN`` until it
fails, a script's exit with a profile still pending, and ``ns.flush(30)`` after a profile
(its time and what it returns). Target (issue 35): a refused connection fails within 2 s, and
the exit keeps NEURONSCOPE_EXIT_FLUSH_TIMEOUT; ``ns.flush()`` is False.

Each measurement is a fresh process; ``--src`` runs several source trees side by side
(interleaved rounds, medians), e.g. the tree before a change and this one:

    python bench/bench_dead_endpoint.py [--rounds 3] [--src /tmp/old/src --src src]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, sys, time
import torch
import neuronscope as ns
with ns.profile_neuron(name="dead-endpoint") as run:
    torch.relu(torch.randn(32, 32) @ torch.randn(32, 32))
if sys.argv[1] != "none":
    t0 = time.monotonic()
    ok = ns.flush(float(sys.argv[1]))
    print(json.dumps({"flush_ok": ok, "flush_s": time.monotonic() - t0}), flush=True)
print("END", flush=True)
"""


def _dead_endpoint() -> tuple[str, socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listened on: connections are refused
    return f"http://127.0.0.1:{s.getsockname()[1]}", s


def _script_exit(script: Path, flush: str, env: dict[str, str]) -> tuple[float, dict | None]:
    """Seconds from the script's last line to its exit, and what its flush said."""
    proc = subprocess.Popen([sys.executable, str(script), flush], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    ended, flushed = None, None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            flushed = json.loads(line)
        if line.strip() == "END":
            ended = time.monotonic()
    proc.wait(300)
    assert ended is not None, "the script did not finish"
    return time.monotonic() - ended, flushed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", action="append", help="a source tree to run (repeatable; default: this one)")
    args = parser.parse_args()
    trees = args.src or [str(ROOT / "src")]
    url, held = _dead_endpoint()
    work = Path(tempfile.mkdtemp(prefix="ns-dead-endpoint-"))
    script = work / "script.py"
    script.write_text(SCRIPT)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base_env["NEURONSCOPE_OUTPUT_DIR"] = str(work / "runs")
    # a saved run to replay: written with no endpoint
    subprocess.run([sys.executable, str(script), "none"], env={**base_env, "PYTHONPATH": trees[-1]}, check=True, capture_output=True)
    run = next(p for p in (work / "runs").iterdir() if (p / "manifest.json").is_file())
    times: dict[str, list[float]] = {}
    flushes: dict[str, list[tuple[bool, float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            env = {**base_env, "PYTHONPATH": tree}
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "neuronscope", "export", str(run), "--otlp-endpoint", url], env=env, capture_output=True)
            times.setdefault(f"{tree}: export RUN", []).append(time.monotonic() - t0)
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
            exit_s, _ = _script_exit(script, "none", env)
            times.setdefault(f"{tree}: exit, a profile pending", []).append(exit_s)
            _, flushed = _script_exit(script, "30", env)
            assert flushed is not None
            flushes[tree].append((flushed["flush_ok"], round(flushed["flush_s"], 2)))
    held.close()
    ok = True
    for name, ts in times.items():
        print(f"{name:<60} median {statistics.median(ts):6.2f} s  (min {min(ts):.2f}, max {max(ts):.2f})")
        if name.endswith("export RUN"):
            ok &= statistics.median(ts) <= 2.0
    for tree, results in flushes.items():
        print(f"{tree}: ns.flush(30) -> {results}")
        ok &= not any(r[0] for r in results)
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
