"""compare_ranks on synthetic jobs with exact timing (tests/multirank/synthetic.py): the
straggler, its cause, the clock offsets, the null result, and the errors."""

from __future__ import annotations

import json
import random
import shutil
import statistics

import pytest
from synthetic import make_job

import neuronscope as ns
from neuronscope import TraceLoadError
from neuronscope.analysis.ranks import collective_kind
from neuronscope.api import compare_ranks

OWN_HOSTS = {0: "h0", 1: "h1", 2: "h2", 3: "h3"}


def test_late_data_loading_rank_is_the_straggler_and_a_clock_offset_is_not(tmp_path):
    # F16: 4 ranks, rank 2 loads data 3 ms longer; rank 1's clock runs 1 ms ahead (its own host)
    job = make_job(tmp_path, ranks=4, steps=8, data_us={2: 3000}, clock_us={1: 1000}, hosts=OWN_HOSTS)
    c = ns.compare_ranks(job)
    assert c.straggler is not None and c.straggler.rank == 2
    assert c.straggler.cause == "data"
    assert c.straggler.late_us == pytest.approx(3000, rel=0.05)
    assert c.straggler.cause_us == pytest.approx(3000, rel=0.05)
    assert c.straggler.last_share_pct == 100.0
    assert c.straggler.others_wait_us == pytest.approx(3000, rel=0.05)
    assert c.clock["offsets_us"][1] == pytest.approx(1000, abs=60)
    assert abs(c.clock["offsets_us"][2]) < 60 and abs(c.clock["offsets_us"][3]) < 60
    assert c.rank(1).late_us == pytest.approx(0, abs=100)  # aligned: rank 1 is on time
    assert c.rank(2).collective_wait_us < 100 < c.rank(0).collective_wait_us
    assert "STRAGGLER rank 2" in str(c) and "cause: data" in str(c)


def test_without_alignment_the_offset_rank_would_look_late(tmp_path):
    # the same clock offset on one host (one clock) is not removed: this is what alignment buys
    job = make_job(tmp_path, ranks=4, steps=8, clock_us={1: 1000}, hosts={r: "same" for r in range(4)})
    c = compare_ranks(job)
    assert c.clock["hosts"] == 1 and c.clock["max_skew_us"] == 0.0
    assert c.clock["estimated_us"][1] == pytest.approx(1000, abs=60)  # measured, reported
    assert c.rank(1).late_us == pytest.approx(1000, rel=0.1)


@pytest.mark.parametrize("seed", range(4))
def test_a_balanced_job_has_no_straggler(tmp_path, seed):
    job = make_job(tmp_path, ranks=4, steps=8, jitter_us=300, seed=seed, hosts=OWN_HOSTS, clock_us={3: -2500})
    c = compare_ranks(job)
    assert c.straggler is None, c.straggler
    assert c.clock["offsets_us"][3] == pytest.approx(-2500, abs=100)
    assert "no straggler" in c.headline()[1]


@pytest.mark.parametrize("seed", range(3))
def test_a_straggler_whose_delay_varies_is_still_found(tmp_path, seed):
    rng = random.Random(seed)
    delays = [rng.uniform(500, 6000) for _ in range(8)]  # late every step, by 0.5 to 6 ms
    c = compare_ranks(make_job(tmp_path, ranks=4, steps=8, host_us={1: delays}, jitter_us=200, seed=seed))
    assert c.straggler is not None and c.straggler.rank == 1 and c.straggler.cause == "host"
    assert c.straggler.late_us == pytest.approx(statistics.median(delays), rel=0.15)


@pytest.mark.parametrize("seed", range(4))
def test_two_balanced_ranks_on_a_noisy_machine_have_no_straggler(tmp_path, seed):
    c = compare_ranks(make_job(tmp_path, ranks=2, steps=6, jitter_us=3000, seed=seed))
    assert c.straggler is None, c.straggler


def test_two_ranks_one_late_by_a_varying_amount(tmp_path):
    rng = random.Random(7)
    delays = [rng.uniform(5000, 40000) for _ in range(6)]
    c = compare_ranks(make_job(tmp_path, ranks=2, steps=6, host_us={0: delays}, jitter_us=2000))
    assert c.straggler is not None and c.straggler.rank == 0


@pytest.mark.parametrize(
    "kw, rank, cause",
    [
        (dict(compute_us={3: 2000}), 3, "compute"),
        (dict(host_us={1: 1500}), 1, "host"),
        (dict(data_us={0: 800}), 0, "data"),
    ],
)
def test_the_lead_cause(tmp_path, kw, rank, cause):
    c = compare_ranks(make_job(tmp_path, ranks=4, steps=6, **kw))
    assert (c.straggler.rank, c.straggler.cause) == (rank, cause)
    extra = next(iter(next(iter(kw.values())).values()))
    assert c.straggler.late_us == pytest.approx(extra, rel=0.05)
    assert c.straggler.deltas_us[cause] == pytest.approx(extra, rel=0.05)


def test_lateness_adds_up_over_the_collectives_of_a_step(tmp_path):
    # 3 all_reduces per step; the slow part comes before the first only
    c = compare_ranks(make_job(tmp_path, ranks=2, steps=6, host_us={1: 1500}, collectives_per_step=3))
    assert c.collectives == 18
    assert c.straggler.rank == 1 and c.straggler.late_us == pytest.approx(1500, rel=0.05)
    # each step: late at its first collective only, on time at the next two; the sum is the step's extra time
    assert all(st.late_us[1] == pytest.approx(1500, rel=0.1) and st.collectives == 3 for st in c.steps)


def test_two_hosts_two_clocks(tmp_path):
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    c = compare_ranks(make_job(tmp_path, ranks=4, steps=6, compute_us={3: 2000}, hosts=hosts, clock_us={2: 5000, 3: 5000}))
    assert c.clock["hosts"] == 2
    assert c.clock["offsets_us"] == pytest.approx({0: 0, 1: 0, 2: 5000, 3: 5000}, abs=50)
    assert c.straggler.rank == 3 and c.straggler.cause == "compute"


@pytest.mark.parametrize(
    "name, kind",
    [
        ("gloo:all_reduce", "all_reduce"), ("gloo:all_gather", "all_gather"), ("gloo:barrier", "barrier"),
        ("gloo:broadcast", "broadcast"), ("nccl:all_reduce", "all_reduce"), ("nccl:_reduce_scatter_base", "reduce_scatter"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, ncclWork*)", "all_gather"),
        ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
        ("c10d::allreduce_", "all_reduce"), ("c10d::_allgather_base_", "all_gather"), ("c10d::alltoall_base_", "all_to_all"),
        ("c10d::recv_", "recv"), ("all-reduce.3", "all_reduce"), ("something", "other"),
    ],
)
def test_collective_kinds(name, kind):
    assert collective_kind(name) == kind


@pytest.mark.parametrize("kernel", ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ncclWork*)", "AllReduce_bf16"])
def test_other_collective_kernel_names_are_found(tmp_path, kernel):
    c = compare_ranks(make_job(tmp_path, ranks=2, steps=4, host_us={0: 2000}, collective=kernel))
    assert c.collectives == 4 and c.collective_events == "device"
    assert c.straggler.rank == 0


def test_json_and_html(tmp_path):
    c = compare_ranks(make_job(tmp_path, ranks=3, steps=4, data_us={1: 2000}))
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["straggler"]["rank"] == 1 and [r["rank"] for r in d["ranks"]] == [0, 1, 2]
    assert len(d["steps"]) == 4 and d["steps"][0]["last_rank"] == 1
    from neuronscope.report.html import render_html

    page = render_html(c)
    assert page.count('class="rank-lane"') == 3 and 'data-rank="1" data-straggler="1"' in page
    assert page.count('class="rank-wait"') >= 8  # two waiting ranks x four steps
    assert '<p class="straggler">STRAGGLER rank 1' in page


def test_which_directories_it_takes(tmp_path):
    job = make_job(tmp_path / "out", ranks=2, steps=3, host_us={1: 1000})
    assert compare_ranks(tmp_path / "out").straggler.rank == 1  # the output dir holding one job
    runs = sorted(job.glob("rank*/*"))
    assert compare_ranks(runs).straggler.rank == 1  # the run directories themselves
    assert compare_ranks([job / "rank0", job / "rank1"]).straggler.rank == 1  # rank directories
    make_job(tmp_path / "out", ranks=2, steps=3, job_id="job-2")
    with pytest.raises(TraceLoadError, match=r"holds 2 jobs \(job-1, job-2\); pass one of them"):
        compare_ranks(tmp_path / "out")


def test_errors_name_what_to_pass(tmp_path):
    with pytest.raises(TraceLoadError, match="no such file"):
        compare_ranks(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceLoadError, match="no runs found; pass a job directory"):
        compare_ranks(tmp_path / "empty")
    job = make_job(tmp_path / "one", ranks=2, steps=2)
    with pytest.raises(TraceLoadError, match=r"needs two or more"):
        compare_ranks(job / "rank0")
    with pytest.raises(TraceLoadError, match=r"no profile named 'eval' on every rank; profiles on every rank: \['train_step'\]"):
        compare_ranks(job, name="eval")
    single = tmp_path / "single"
    shutil.copytree(next(job.glob("rank0/*")), single / "run")
    m = json.loads((single / "run" / "manifest.json").read_text())
    del m["rank"]
    (single / "run" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceLoadError, match="this run has no rank"):
        compare_ranks(single / "run")


def test_runs_missing_on_some_ranks_are_left_out_and_said(tmp_path):
    job = make_job(tmp_path, ranks=2, steps=5, host_us={1: 1000})
    victim = sorted((job / "rank0").iterdir())[2]
    shutil.rmtree(victim)
    c = compare_ranks(job)
    assert len(c.steps) == 4 and c.straggler.rank == 1
    assert any("not on every rank" in w and "rank 1: 1" in w for w in c.warnings)


def test_a_relaunch_of_the_same_job_compares_the_latest(tmp_path):
    job = make_job(tmp_path, ranks=2, steps=3, host_us={1: 1000})
    # an older launch of rank 0 (another pid, earlier), left next to the new runs
    for run in list((job / "rank0").iterdir()):
        old = run.with_name(run.name.replace("-100-", "-99-"))
        shutil.copytree(run, old)
        m = json.loads((old / "manifest.json").read_text())
        m["pid"], m["start_ns"] = 99, m["start_ns"] - 10**12
        (old / "manifest.json").write_text(json.dumps(m))
    c = compare_ranks(job)
    assert c.rank(0).runs == 3 and c.straggler.rank == 1
    assert any("several launches" in w for w in c.warnings)
