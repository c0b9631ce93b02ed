"""Real torchrun jobs of tests/multirank/torchrun_job.py on 127.0.0.1 (gloo), for the multi-rank tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

JOB_SCRIPT = Path(__file__).with_name("torchrun_job.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Job:
    out: Path  #: the output dir
    job_dir: Path  #: <out>/<job id>
    port: int
    reports: dict[int, dict]  #: what each rank saw (run paths, OTel ids), by rank
    stdout: str


def run_torchrun(tmp_path: Path, nproc: int, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> Job:
    """``python -m torch.distributed.run --nproc-per-node N`` of tests/multirank/torchrun_job.py."""
    out = tmp_path / "runs"
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    port = free_port()
    full_env = {
        **os.environ, "NEURONSCOPE_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "GLOO_SOCKET_IFNAME": "lo",  # gloo's sockets on the loopback interface only
    }
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "NEURONSCOPE_JOB_ID"):
        full_env.pop(key, None)
    full_env.update(env or {})
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--master-addr", "127.0.0.1", "--master-port", str(port), "--local-addr", "127.0.0.1",
        str(JOB_SCRIPT), "--report", str(reports), *args,
    ]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun failed (rc={proc.returncode}):\n{text[-6000:]}"
    got = {}
    for f in sorted(reports.glob("rank*.json")):
        data = json.loads(f.read_text())
        got[int(data["rank"])] = data
    assert sorted(got) == list(range(nproc)), f"reports from ranks {sorted(got)}:\n{text[-3000:]}"
    return Job(out=out, job_dir=out / f"127.0.0.1_{port}", port=port, reports=got, stdout=text)
