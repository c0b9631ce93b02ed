"""Synthetic multi-rank jobs with exact timing: run directories as neuronscope writes them.

Each rank's run of each step is built as a trace (tests/diagnosis/builder.py), turned into
rank.json by the real ``rank_profile``, and written with a manifest next to it, so
``compare_ranks`` reads them as it reads a real job. Times in microseconds.

    job = make_job(tmp_path, ranks=4, steps=8, data_us={2: 3000}, clock_us={1: 1000})
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from diagnosis.builder import BASE, US, TraceBuilder

from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.ranks import RANK_FILE, rank_profile
from neuronscope.sinks.rundir import write_trace_model

STEP_GAP_US = 20_000
COMPUTE_US = 5_000
TRANSFER_US = 400
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
DATA_REGION = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def make_job(
    root: Path,
    *,
    ranks: int = 4,
    steps: int = 8,
    data_us: dict[int, float] | None = None,
    compute_us: dict[int, float] | None = None,
    host_us: dict[int, float] | None = None,
    clock_us: dict[int, float] | None = None,
    hosts: dict[int, str] | None = None,
    jitter_us: float = 50.0,
    collective: str = NCCL,
    collectives_per_step: int = 1,
    seed: int = 0,
    name: str = "train_step",
    job_id: str = "job-1",
    save_trace: bool = False,
) -> Path:
    """Write ``root/<job_id>/rank<N>/<run>/`` for every rank and step; returns the job directory.

    ``data_us`` / ``compute_us`` / ``host_us``: a rank's extra data loading (a DataLoader
    region), device work (a longer kernel) or host time (nothing recorded) before the step's
    first collective, in µs, or a list of µs per step; ``clock_us``: a rank's clock offset;
    ``hosts``: host names (default: all "h0").
    """
    rng = random.Random(seed)
    clock_us = clock_us or {}
    hosts = hosts or {}
    job = root / job_id
    for k in range(steps):
        data_us_k, compute_us_k, host_us_k = (_at(x, k) for x in (data_us, compute_us, host_us))
        t0 = 1_000 + k * STEP_GAP_US * (1 + collectives_per_step)
        # true arrival of each rank at each collective of the step
        arrivals: list[list[float]] = []
        ends: list[float] = []
        seg_start = [t0] * ranks
        for c in range(collectives_per_step):
            arr = []
            for r in range(ranks):
                extra = (data_us_k.get(r, 0) + compute_us_k.get(r, 0) + host_us_k.get(r, 0)) if c == 0 else 0
                arr.append(seg_start[r] + COMPUTE_US + extra + rng.uniform(0, jitter_us))
            end = max(arr) + TRANSFER_US
            arrivals.append(arr)
            ends.append(end)
            seg_start = [end + rng.uniform(0, jitter_us / 5) for _ in range(ranks)]
        for r in range(ranks):
            off = clock_us.get(r, 0.0)
            b = TraceBuilder("cuda")
            lo, hi = t0 + off, ends[-1] + 50 + off
            b.window(lo, hi, serial=1, name=name)
            cursor = t0 + off
            for c in range(collectives_per_step):
                extra_host = host_us_k.get(r, 0) if c == 0 else 0
                extra_data = data_us_k.get(r, 0) if c == 0 else 0
                if extra_data:
                    b.region(DATA_REGION, cursor, extra_data)
                cursor += extra_data + extra_host
                op = b.op("aten::mm", cursor, 10)
                busy = COMPUTE_US + (compute_us_k.get(r, 0) if c == 0 else 0)
                b.launch(op, cursor + 1, 5, kernel_at=cursor + 20, kernel_us=busy - 40, name="gemm")
                a = arrivals[c][r] + off
                comm = b.op("c10d::allreduce_", a - 15, 10)
                b.launch(comm, a - 14, 5, kernel_at=a, kernel_us=ends[c] + off - a, name=collective)
                cursor = ends[c] + off + 5
            trace = b.build()
            run = job / f"rank{r}" / f"{name}-20260101T000000.{k:06d}Z-{100 + r}-{k + 1}"
            run.mkdir(parents=True)
            profile = rank_profile(trace, serial=1)
            diag = diagnose_trace(trace, serial=1)
            manifest = {
                "schema_version": 1, "name": name, "device": "cuda", "status": "complete",
                "start_ns": BASE + round(lo * US), "end_ns": BASE + round(hi * US),
                "host": hosts.get(r, "h0"), "pid": 100 + r, "rank": r, "local_rank": r, "world_size": ranks,
                "node_rank": 0, "job_id": job_id, "window": None, "device_busy_pct": round(diag.device_busy_pct, 2),
                "distributed": {"call_index": k, "restart_count": 0, "profiled_ranks": "all", "backend": "nccl"},
            }
            (run / "manifest.json").write_text(json.dumps(manifest))
            (run / RANK_FILE).write_text(json.dumps(profile))
            if save_trace:
                write_trace_model(trace, run / "trace.json.gz", {"neuronscope_device": "cuda"})
    return job


def _at(extra: dict | None, step: int) -> dict[int, float]:
    return {r: (v[step] if isinstance(v, (list, tuple)) else v) for r, v in (extra or {}).items()}

