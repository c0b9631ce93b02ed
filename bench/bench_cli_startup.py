"""CLI start-up: ``neuronscope --help`` and ``neuronscope show RUN`` vs ``python -c "import json"``.

The saved run is the main example's (examples/rmsnorm.py). Each command runs ``--repeat``
times, alternately, as a fresh process; the medians are compared.
Target (issue 10): both <= 10x ``python -c "import json"``.

    python bench/bench_cli_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="ns-cli-bench-"))
    try:
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "rmsnorm.py"), "--steps", "3", "--no-compile", "--output-dir", str(out)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        run = next(p for p in sorted(out.iterdir()) if (p / "manifest.json").is_file())
        cli = shutil.which("neuronscope") or "neuronscope"
        commands = {
            "python -c 'import json'": [sys.executable, "-c", "import json"],
            "neuronscope --help": [cli, "--help"],
            "neuronscope show RUN": [cli, "show", str(run)],
            "neuronscope show RUN --json": [cli, "show", str(run), "--json"],
        }
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                times[name].append(_time(cmd))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    base = statistics.median(times["python -c 'import json'"])
    ok = True
    for name, ts in times.items():
        m = statistics.median(ts)
        ratio = m / base
        target = "" if name.startswith("python") else f"  (target <= 10x)"
        print(f"{name:<30} median {m * 1e3:7.1f} ms  {ratio:5.1f}x{target}")
        if name in ("neuronscope --help", "neuronscope show RUN"):
            ok &= ratio <= 10
    print("RESULT:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
