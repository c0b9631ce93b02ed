"""Helpers for the multi-rank tests: real torchrun jobs on 127.0.0.1 (gloo), synthetic jobs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuronscope.capture import ranks as _ranks

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
    """``python -m torch.distributed.run --nproc-per-node N`` of tests/distributed/torchrun_job.py."""
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


@pytest.fixture
def torchrun_env(monkeypatch):
    """Make this process look like torchrun's rank ``rank`` of ``world`` (and forget it after)."""

    def set_rank(rank: int, world: int = 2, *, port: int = 29999, run_id: str = "none", **extra: str) -> None:
        env = {
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_RESTART_COUNT": "0", **extra,
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        _ranks._reset()

    yield set_rank
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "NEURONSCOPE_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    _ranks._reset()


class Telemetry:
    """In-memory OpenTelemetry spans for the tests of one process."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def finished(self) -> list:
        import neuronscope as ns

        ns.flush(30)
        return list(self.spans.get_finished_spans())


@pytest.fixture
def telemetry():
    import neuronscope as ns

    t = Telemetry()
    ns.configure(tracer_provider=t.tracer_provider)
    yield t
    ns.flush(30)
    ns.configure(tracer_provider=None)
