"""Communication: collective time, the part no compute overlapped, kinds, and the verdict —
on synthetic device traces with exact timing and on a real gloo collective (CPU)."""

from __future__ import annotations

import pytest
import torch
from builder import TraceBuilder

import neuronscope as ns
from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.diagnosis.communication import collective_kind


def _ddp_like(overlap_us: float) -> TraceBuilder:
    """A 1000 us window: compute [0, 400) on stream 7; an all-reduce kernel of 500 us starting at
    400 - overlap_us on stream 9, launched inside record_param_comms (ncclDevKernel_Generic says
    nothing of its kind: the op around it does)."""
    b = TraceBuilder("cuda")
    b.window(0, 1000)
    k = b.op("aten::mm", 0, 5)
    b.launch(k, 0, 1, kernel_at=0, kernel_us=400, name="gemm", stream=-7)
    ar = b.op("c10d::allreduce_", 1, 8)
    rpc = b.op("record_param_comms", 2, 6)
    b.launch(rpc, 3, 2, kernel_at=400 - overlap_us, kernel_us=500, name="ncclDevKernel_Generic(args)", stream=-9)
    del ar
    return b


@pytest.mark.parametrize("overlap_us", [0.0, 100.0, 300.0])
def test_exposed_time_is_collective_time_with_no_compute_beside_it(overlap_us):
    d = diagnose_trace(_ddp_like(overlap_us).build(), serial=1)
    c = d.communication
    assert c is not None and c.backend == "nccl"
    assert c.collective_us == pytest.approx(500.0)
    assert c.exposed_us == pytest.approx(500.0 - overlap_us)
    assert c.overlap_pct == pytest.approx(100.0 * overlap_us / 500.0)
    assert [(k.kind, k.calls) for k in c.by_kind] == [("all_reduce", 1)]  # from c10d::allreduce_
    # busy % still counts the collective as busy
    assert d.device_busy_us == pytest.approx(400.0 + 500.0 - overlap_us)
    # exposed 500 us > compute 400 us, and > any idle: communication-bound; 200 exposed < 400 compute: not
    assert (d.bound_by == "communication") == (500.0 - overlap_us >= 400.0)
    f = d.finding("exposed_communication")
    assert f is not None and f.us_at_stake == pytest.approx(500.0 - overlap_us) and "DDP" in f.message


def test_no_collective_no_communication():
    b = TraceBuilder("cuda")
    b.window(0, 100)
    k = b.op("aten::mm", 0, 5)
    b.launch(k, 0, 1, kernel_at=0, kernel_us=90)
    d = diagnose_trace(b.build(), serial=1)
    assert d.communication is None and d.to_dict()["communication"] is None
    assert "communication" not in str(d)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "all_reduce"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
        ("allreduce", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("gloo:broadcast", "broadcast"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ],
)
def test_collective_kinds(name, kind):
    assert collective_kind(name) == kind


def test_a_real_gloo_all_reduce_on_cpu_is_named_and_bounds_the_run():
    """Two gloo ranks in one process (threads sharing an in-memory store: no default process
    group, loopback only): each all-reduce of 4M floats takes far longer than the one small op
    between them."""
    import datetime
    import threading

    store = torch.distributed.HashStore()
    groups: dict[int, object] = {}

    def join(rank: int) -> None:
        groups[rank] = torch.distributed.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=60))

    joining = [threading.Thread(target=join, args=(r,)) for r in (0, 1)]
    for t in joining:
        t.start()
    for t in joining:
        t.join()
    x, y, small = torch.randn(1 << 22), torch.randn(1 << 22), torch.randn(8)
    peer = threading.Thread(target=lambda: [groups[1].allreduce([y]).wait() for _ in range(5)])
    peer.start()
    try:
        with ns.profile_neuron(name="gloo", all_threads=True) as run:
            for _ in range(5):
                small.add_(1)
                groups[0].allreduce([x]).wait()
    finally:
        peer.join(60)
    d = run.diagnosis
    c = d.communication
    assert c is not None and c.backend == "gloo"
    assert [k.kind for k in c.by_kind] == ["all_reduce"] and c.by_kind[0].calls >= 5
    assert 0 < c.exposed_us <= c.collective_us <= d.window_us
    assert c.exposed_pct_of_window > 50
    assert d.bound_by == "communication", str(d)
    assert "communication (gloo)" in str(d)
