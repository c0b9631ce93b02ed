"""compare_ranks at scale (issue 20): the ranks read in parallel on any concurrent.futures
Executor — a local process pool, a real dask.distributed LocalCluster — with the serial result;
1,000 per-rank Kineto traces of a plain torch.profiler job; a corrupt file among them named,
or left out with --skip-bad."""

from __future__ import annotations

import gzip
import json
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from synthetic import make_job

import neuronscope as ns
from neuronscope.cli import cli


def _per_rank_traces(root: Path, ranks: int) -> Path:
    """A folder of one Kineto trace per rank, as a plain torch.profiler job writes them: each
    names its rank in ``distributedInfo``. Built from a synthetic 2-rank job's traces."""
    job = make_job(root / "src", ranks=2, steps=3, save_trace=True, data_us={1: 3000})
    templates = [json.loads(gzip.decompress(next((job / f"rank{r}").glob("*/trace.json.gz")).read_bytes())) for r in (0, 1)]
    out = root / "traces"
    out.mkdir()
    for r in range(ranks):
        doc = dict(templates[1 if r == ranks - 1 else 0])  # the last rank is the slow one
        doc["distributedInfo"] = {"rank": r, "world_size": ranks, "backend": "nccl"}
        doc.pop("neuronscope", None)
        (out / f"rank{r}.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    shutil.rmtree(root / "src")
    return out


@pytest.fixture(scope="module")
def thousand(tmp_path_factory) -> Path:
    return _per_rank_traces(tmp_path_factory.mktemp("thousand"), 1000)


def test_a_process_pool_gives_the_serial_result(tmp_path):
    job = make_job(tmp_path, ranks=4, steps=6, save_trace=True, compute_us={2: 2500})
    for rank_json in job.rglob("rank.json"):
        rank_json.unlink()  # so each worker parses its trace, not the saved profile
    serial = ns.compare_ranks(job)
    with ProcessPoolExecutor(max_workers=2) as pool:
        parallel = ns.compare_ranks(job, executor=pool)
    assert parallel.to_dict() == serial.to_dict()
    assert serial.straggler is not None and serial.straggler.rank == 2


def test_a_dask_local_cluster_gives_the_serial_result(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the [dask] extra (pip install 'neuronscope[dask]')")
    job = make_job(tmp_path, ranks=4, steps=4, save_trace=True, data_us={3: 4000})
    for rank_json in job.rglob("rank.json"):
        rank_json.unlink()
    serial = ns.compare_ranks(job)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            on_cluster = ns.compare_ranks(job, executor=client)
            traces = ns.load_traces(sorted(job.rglob("trace.json.gz"))[:2], executor=client)
    assert on_cluster.to_dict() == serial.to_dict()
    assert on_cluster.straggler is not None and on_cluster.straggler.rank == 3
    assert [len(t) for t in traces] == [len(ns.load_trace(p)) for p in sorted(job.rglob("trace.json.gz"))[:2]]


def test_a_thousand_per_rank_traces_with_the_cli_in_parallel(thousand):
    result = CliRunner().invoke(cli, ["ranks", str(thousand), "--jobs", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert len(doc["ranks"]) == 1000 and doc["world_size"] == 1000
    assert doc["straggler"] is not None and doc["straggler"]["rank"] == 999


def test_a_corrupt_file_among_a_thousand_is_named_or_skipped(thousand, tmp_path):
    job = tmp_path / "traces"
    shutil.copytree(thousand, job)
    bad = job / "rank517.trace.json.gz"
    bad.write_bytes(bad.read_bytes()[:300])  # truncated mid-stream
    with pytest.raises(ns.TraceLoadError, match="rank517.trace.json.gz"):
        ns.compare_ranks(job)
    result = CliRunner().invoke(cli, ["ranks", str(job), "--jobs", "2", "--skip-bad", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["ranks"]) == 999 and 517 not in [r["rank"] for r in doc["ranks"]]
    assert any("rank517.trace.json.gz" in w for w in doc["warnings"])
    assert "warning: skipped" in result.stderr and "rank517.trace.json.gz" in result.stderr
