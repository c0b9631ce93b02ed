"""The whole test suite on a fresh clone, beside CPU-burning processes (issue 35.2).

A suite that passes only on a quiet machine cries wolf in CI. This clones the repository's
HEAD into a temporary directory, then runs the README's test command there (``make test``: it
makes its own venv and installs as the README says) ``--runs`` times, each beside ``--burners``
processes that each keep a CPU busy for the whole run, and prints one line per run: passed,
failed, wall time, and the failing tests.

    python bench/suite_under_load.py [--runs 3] [--burners 2] [--pytest-args "-q"]

The venv is made once (the first run) and reused by the later ones, as `make` does.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _one_run(clone: Path, burners: int, pytest_args: str, env: dict[str, str]) -> tuple[int, float, str]:
    procs = _burners(burners)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            ["make", "test", f"PYTEST_ARGS={pytest_args}"], cwd=clone, capture_output=True, text=True, env=env
        )
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return proc.returncode, time.monotonic() - t0, proc.stdout + proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--pytest-args", default="-q -p no:cacheprovider")
    ap.add_argument("--keep-logs", type=Path, default=None, help="write each run's output here")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # the real-trace corpus sits beside this checkout (../shared), not beside the clone: without
    # this its ~230 tests would skip; and as in .ci/run, a missing corpus then fails them
    corpus = Path(env.get("NEURONSCOPE_REAL_TRACES") or ROOT.parent / "shared" / "real-traces")
    if corpus.is_dir():
        env["NEURONSCOPE_REAL_TRACES"] = str(corpus.resolve())
        env["NEURONSCOPE_REQUIRE_REAL_TRACES"] = "1"
    results = []
    with tempfile.TemporaryDirectory(prefix="suite-under-load-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
        for k in range(1, args.runs + 1):
            rc, wall, out = _one_run(clone, args.burners, args.pytest_args, env)
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                (args.keep_logs / f"run{k}.log").write_text(out)
            # `make test` runs pytest twice (the tests on two workers, then the timing claims alone)
            lines = [ln.strip("= ") for ln in out.splitlines() if re.search(r"\d+ (passed|failed)", ln) and " in " in ln]
            summary = " + ".join(lines) or "no pytest summary"
            failed = sorted(set(re.findall(r"^FAILED (\S+)", out, re.M)))
            results.append((k, rc, wall, summary, failed))
            print(f"run {k} ({head}, {args.burners} burners): exit {rc}, {wall / 60:.1f} min: {summary}", flush=True)
            for name in failed:
                print(f"    FAILED {name}", flush=True)
    return 0 if all(rc == 0 for _, rc, *_ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
