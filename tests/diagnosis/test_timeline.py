"""Busy/idle and the class of every gap, on synthetic traces with exact timing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from builder import TraceBuilder

import neuronscope as ns
from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.diagnosis.timeline import CLASSES, build_timeline
from neuronscope.analysis.summary import summarize



def every_class_trace() -> TraceBuilder:
    b = TraceBuilder("cuda")
    b.window(0, 2000)
    k = b.op("aten::mul", 0, 10)
    b.launch(k, 2, 5, kernel_at=10, kernel_us=100)                   # K1 [10, 110)
    k = b.op("aten::mul", 280, 10)
    b.launch(k, 282, 5, kernel_at=300, kernel_us=40)                 # host_wait gap [110, 300)
    k = b.op("aten::add", 341, 8)
    b.launch(k, 342, 4, kernel_at=350, kernel_us=10)                 # launch gap [340, 350)
    k = b.op("aten::add", 352, 2)
    b.launch(k, 352.5, 1, kernel_at=500, kernel_us=20)               # [360, 500): queued while busy: stream_wait
    item = b.op("aten::item", 510, 90)
    b.runtime("cudaStreamSynchronize", 512, 86, item)
    k = b.op("aten::mul", 610, 5)
    b.launch(k, 611, 3, kernel_at=650, kernel_us=10)                 # sync [520, 611), launch [611, 650)
    b.region("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 665, 235)
    k = b.op("aten::mul", 900, 5)
    b.launch(k, 901, 3, kernel_at=910, kernel_us=10)                 # data [660, 901), launch [901, 910)
    b.region("_compile.compile_inner (dynamo_timed)", 925, 375)
    k = b.op("aten::mul", 1301, 4)
    b.launch(k, 1302, 2, kernel_at=1310, kernel_us=10)               # compile [920, 1302), launch [1302, 1310)
    return b                                                         # trailing host_wait [1320, 2000)


def test_every_gap_class_on_a_device_trace():
    """Each gap is split where its next kernel was launched: host-side classes before, launch
    (or stream_wait) after. Expected values by hand from the launches above."""
    d = diagnose_trace(every_class_trace().build(), serial=1)
    assert (d.window_start_ns, d.window_end_ns) == (1_700_000_000_000_000_000, 1_700_000_000_000_000_000 + 2_000_000)
    assert d.device_busy_us == pytest.approx(200.0)
    assert d.device_idle_us == pytest.approx(1800.0)
    assert d.device_busy_pct == pytest.approx(10.0)
    host_wait = (282 - 110) + (2000 - 1320)
    launch = 10 + (300 - 282) + 10 + (650 - 611) + (910 - 901) + (1310 - 1302)
    expected = {"host_wait": host_wait, "launch": launch, "sync": 611 - 520, "data": 901 - 660,
                "compile": 1302 - 920, "stream_wait": 140}
    assert d.idle_us_by_class == pytest.approx(expected)
    assert sum(d.idle_us_by_class.values()) == pytest.approx(d.device_idle_us)
    assert d.bound_by == "host"
    assert d.gaps.count == 6
    assert d.gaps.count_by_class == {"host_wait": 2, "launch": 0, "sync": 1, "data": 1, "compile": 1, "stream_wait": 1}
    assert [(g.duration_us, g.cls) for g in d.gaps.top] == [
        (680, "host_wait"), (382, "compile"), (241, "data"), (172, "host_wait"), (140, "stream_wait")
    ]
    data_gap = d.gaps.top[2]
    assert data_gap.host[0][0].startswith("enumerate(DataLoader)")
    assert data_gap.before == "k" and data_gap.after == "k"


def test_a_gap_part_python_part_data_loading_is_split_between_them():
    """The step's own Python (a sleep here) then the DataLoader's wait, in one gap: each part
    has its own class, not the one that covers half (before: all 591 us host_wait; in a real
    loop, the first item's load of every step went to host_wait, 24 of 96 ms)."""
    b = TraceBuilder("cuda")
    b.window(0, 1000)
    k = b.op("aten::mul", 0, 10)
    b.launch(k, 2, 5, kernel_at=10, kernel_us=100)  # K1 [10, 110)
    b.region("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 500, 200)
    k = b.op("aten::mul", 700, 5)
    b.launch(k, 701, 3, kernel_at=710, kernel_us=290)  # the gap [110, 710), launched at 701
    d = diagnose_trace(b.build(), serial=1)
    # by hand: host [110, 500), data [500, 701) (the 1 us after the region is no piece of its
    # own), then the launch latency [701, 710); and [0, 10) before the first kernel
    assert d.idle_us_by_class == pytest.approx(
        {"host_wait": 390, "launch": 10 + 9, "sync": 0, "data": 201, "compile": 0, "stream_wait": 0}
    )
    assert d.bound_by == "host"
    assert [(g.duration_us, g.cls) for g in d.gaps.top] == [(390, "host_wait"), (201, "data")]


def stream_wait_trace() -> TraceBuilder:
    """The SGLang decode shape: kernels launched 40 us into a long device gap, the stream told
    to wait on an event, the host then blocked in a synchronous copy until the device ran."""
    b = TraceBuilder("rocm")
    b.window(0, 10_000)
    k = b.op("aten::mul", 0, 10)
    b.launch(k, 2, 5, kernel_at=10, kernel_us=90, call="hipLaunchKernel")       # busy [10, 100)
    b.runtime("hipStreamWaitEvent", 120, 10)                                     # the stream waits
    b.launch(None, 140, 5, kernel_at=9_000, kernel_us=50, call="hipLaunchKernel")  # queued at 140, runs at 9000
    copy = b.op("aten::copy_", 150, 8_910)
    rt = b.runtime("hipMemcpyWithStream", 152, 8_905, copy)
    b.kernel("Memcpy DtoH (Device -> Host)", 9_050, 5, copy, call=rt, cat="gpu_memcpy")
    k = b.op("aten::add", 9_100, 10)
    b.launch(k, 9_102, 5, kernel_at=9_110, kernel_us=10, call="hipLaunchKernel")
    return b


def test_a_device_waiting_on_its_own_event_is_stream_wait_not_host_bound():
    d = diagnose_trace(stream_wait_trace().build(), serial=1)
    # gap [100, 9000): host side [100, 140) (launch: short), device side [140, 9000) stream_wait
    assert d.idle_us_by_class["stream_wait"] == pytest.approx(9_000 - 140)
    assert d.idle_us_by_class["host_wait"] == pytest.approx(10_000 - 9_120)  # the tail only
    assert d.bound_by == "stream_wait"
    top = d.gaps.top[0]
    assert top.cls == "stream_wait" and top.wait.startswith("hipStreamWaitEvent at ")
    assert top.host[0][0] == "aten::copy_"
    line = str(d).splitlines()[0]
    assert "stream-wait-bound" in line and "hipStreamWaitEvent" in line and "aten::copy_" in line


def test_time_blocked_in_a_sync_is_never_host_wait():
    """The host blocks in cudaDeviceSynchronize while the device is idle and nothing is queued
    (it waits on work of another process, say): that time is sync, not host_wait."""
    b = TraceBuilder("cuda")
    b.window(0, 1_000)
    k = b.op("aten::mul", 0, 10)
    b.launch(k, 2, 5, kernel_at=10, kernel_us=90)
    b.runtime("cudaDeviceSynchronize", 110, 700)
    k = b.op("aten::mul", 900, 10)
    b.launch(k, 902, 5, kernel_at=950, kernel_us=50)
    d = diagnose_trace(b.build(), serial=1)
    assert d.idle_us_by_class["sync"] == pytest.approx(902 - 100)
    assert d.idle_us_by_class["host_wait"] == pytest.approx(0)
    assert d.idle_us_by_class["launch"] == pytest.approx(10 + 950 - 902)  # [0, 10) too


def test_graph_launches_are_counted_with_their_latency():
    b = TraceBuilder("rocm")
    b.window(0, 10_000)
    rt = b.runtime("hipGraphLaunch", 1_500, 500)
    for i, at in enumerate((8_400, 8_460, 8_520)):  # 10 us apart: under the gap threshold
        b.kernel(f"graph_kernel_{i}", at, 50, call=rt)
    d = diagnose_trace(b.build(), serial=1)
    assert d.evidence["graph_launches"] == 1
    assert d.evidence["graph_launch_latency_us"] == {"p50": 6_900.0, "max": 6_900.0}
    # before the launch the host queued nothing; after it the device waited on the launch itself
    # (and the 10 us between its kernels, queued all along)
    assert d.idle_us_by_class["launch"] == pytest.approx(8_400 - 1_500 + 2 * 10)
    assert d.idle_us_by_class["host_wait"] == pytest.approx(1_500 + 10_000 - 8_570)
    # the graph's kernels ran outside any op: rows of their own
    rows = {r.name: r.self_device_time_us for r in summarize(b.build()).rows if r.self_device_time_us}
    assert rows == {"graph_kernel_0": 50.0, "graph_kernel_1": 50.0, "graph_kernel_2": 50.0}


def test_device_bound_verdict_at_80_percent():
    b = TraceBuilder("cuda")
    b.window(0, 1000)
    k = b.op("aten::mm", 0, 5)
    b.launch(k, 1, 2, kernel_at=100, kernel_us=800)
    d = diagnose_trace(b.build(), serial=1)
    assert d.device_busy_pct == pytest.approx(80.0) and d.bound_by == "device"


def test_cpu_run_uses_the_main_threads_ops_and_labels_it():
    b = TraceBuilder("cpu")
    b.window(0, 3000)
    b.op("aten::mul", 0, 10)
    b.op("aten::add", 12, 8)          # 2 us between: launch (dispatch overhead)
    b.op("aten::mul", 2020, 10)       # [20, 2020): the host slept: host_wait
    b.op("aten::item", 2030, 5)       # [2030, 2035)
    b.op("aten::mul", 2500, 10)       # [2035, 2500): after .item() on a CPU: no queue to drain, host_wait
    b.op("aten::mul", 100, 15, thread=7)  # another thread's ops: not the main thread's timeline
    b.op("aten::mul", 1200, 15, thread=7)
    d = diagnose_trace(b.build(), serial=1)
    assert d.timeline == "cpu_main_thread"
    assert d.device_busy_us == pytest.approx(43.0)
    # gaps: [10, 12) launch, [20, 2020) host_wait, [2035, 2500) host_wait (a CPU has no queue for
    # .item() to drain: the time after it is the host's own work), [2510, 3000) host_wait
    assert d.idle_us_by_class["launch"] == pytest.approx(2.0)
    assert d.idle_us_by_class["host_wait"] == pytest.approx(2000.0 + 465.0 + 490.0)
    assert d.idle_us_by_class["sync"] == pytest.approx(0.0)
    assert d.bound_by == "host"
    assert any("no accelerator" in n for n in d.notes)


def test_cpu_run_counts_the_ops_torch_compile_runs_while_tracing_as_compilation():
    b = TraceBuilder("cpu")
    b.window(0, 1000)
    b.op("aten::mul", 0, 100)                                        # the model: busy [0, 100)
    b.region("_compile.compile_inner (dynamo_timed)", 100, 700)      # compiling [100, 800)
    for t in range(110, 790, 20):                                    # fake-tensor ops while tracing
        b.op("aten::mul", t, 15)
    b.op("aten::mul", 800, 150)                                      # the compiled graph: busy [800, 950)
    d = diagnose_trace(b.build(), serial=1)
    assert d.device_busy_us == pytest.approx(250.0)
    assert d.idle_us_by_class["compile"] == pytest.approx(700.0)
    assert d.bound_by == "compile"


def test_cpu_summary_keeps_compilation_out_of_device_time_like_the_diagnosis():
    from neuronscope.analysis.summary import summarize

    b = TraceBuilder("cpu")
    b.window(0, 1000)
    b.op("aten::mul", 0, 100)                                        # the model: busy [0, 100)
    b.op("compile_file (dynamo_timed)", 100, 700)                    # a compile phase (a cpu_op in torch)
    for t in range(110, 790, 20):                                    # ops torch.compile runs while tracing
        b.op("aten::mul", t, 15)
    b.op("PythonDispatchMode", 790, 5)                               # only ever inside compilation
    b.op("aten::mul", 800, 150)                                      # the compiled graph: busy [800, 950)
    trace = b.build()
    s, d = summarize(trace), diagnose_trace(trace, serial=1)
    assert s.total_device_time_us == pytest.approx(250.0) == pytest.approx(d.device_busy_us)
    assert s.compile_time_us == pytest.approx(700.0)
    assert s.total_device_time_us + s.compile_time_us == pytest.approx(s.total_cpu_time_us)
    mul, phase, mode = s["aten::mul"], s["compile_file (dynamo_timed)"], s["PythonDispatchMode"]
    assert (mul.calls, mul.self_device_time_us, mul.self_cpu_time_us) == (36, pytest.approx(250.0), pytest.approx(760.0))
    assert not mul.compile and mul.device_pct == pytest.approx(100.0)
    assert phase.compile and phase.self_device_time_us == 0 and phase.device_time_us == 0
    assert phase.compile_time_us == pytest.approx(700 - 34 * 15 - 5)
    assert mode.compile and mode.device_pct == 0
    table = s.table().splitlines()
    row = next(line for line in table if line.startswith("compile_file"))
    assert "compile" in row.split()[3:] and "%" not in row  # marked compile, no device share
    assert table.index(row) > next(i for i, line in enumerate(table) if line.startswith("aten::mul"))
    assert any(line.startswith("Compilation: 700.000us") and "not in the device time" in line for line in table)
    assert type(s).from_dict(s.to_dict()) == s  # the marks survive summary.json


def test_subtract_matches_a_brute_force_count():
    import numpy as np

    from neuronscope.analysis.intervals import subtract, union

    rng = random.Random(3)
    for _ in range(200):
        def intervals(n):
            s = np.array([rng.randrange(0, 100) for _ in range(n)], dtype=np.int64)
            return union(s, s + np.array([rng.randrange(0, 15) for _ in range(n)], dtype=np.int64))

        (a_s, a_e), (c_s, c_e) = intervals(rng.randrange(0, 8)), intervals(rng.randrange(0, 8))
        r_s, r_e = subtract(a_s, a_e, c_s, c_e)

        def covers(s, e, t):
            return bool(((s <= t) & (t < e)).any())

        for t in range(0, 120):
            assert covers(r_s, r_e, t) == (covers(a_s, a_e, t) and not covers(c_s, c_e, t)), t
        assert (r_s[1:] > r_e[:-1]).all()  # disjoint, sorted, merged


def _hta_fixture(path: Path) -> Path:
    """HolisticTraceAnalysis' behaviour fixture (research notes: shared/docs/diagnosis/make_trace.py,
    run through HTA at f4d0062c): 6 kernels on one stream, 3 ProfilerSteps, times in us."""
    kernels = [(1010, 1020, 100), (1015, 1140, 60), (1100, 1300, 50), (1500, 1510, 50), (1520, 1600, 10), (2010, 2020, 10)]
    ev = [
        dict(ph="X", cat="user_annotation", name=f"ProfilerStep#{i}", pid=1, tid=1, ts=1000 * i, dur=1000, args={"External id": i})
        for i in (1, 2, 3)
    ]
    for i, (rt, kt, kd) in enumerate(kernels):
        corr, ext = 100 + i, 10 + i
        ev.append(dict(ph="X", cat="cpu_op", name="aten::foo", pid=1, tid=1, ts=rt - 1, dur=7, args={"External id": ext}))
        ev.append(dict(ph="X", cat="cuda_runtime", name="cudaLaunchKernel", pid=1, tid=1, ts=rt, dur=5,
                       args={"External id": ext, "correlation": corr, "cbid": 211}))
        ev.append(dict(ph="X", cat="kernel", name=f"my_kernel_{i}", pid=0, tid=7, ts=kt, dur=kd,
                       args={"External id": ext, "correlation": corr, "device": 0, "stream": 7, "context": 1}))
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "deviceProperties": [],
           "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": ev, "displayTimeUnit": "ms"}
    path.write_text(json.dumps(doc))
    return path


def test_hta_parity_fixture_interior_gaps_match_holistic_trace_analysis(tmp_path):
    """HTA gives host_wait 570, kernel_wait 20, other 140 us (consecutive_kernel_delay 30 us),
    compute 280 us, idle 730 us over the kernel span. neuronscope splits each gap where its
    next kernel was launched: HTA's host_wait 570 = our host_wait 550 + the 20 us between the
    two launches and their kernels; HTA's kernel_wait (20, under the threshold) is our launch;
    HTA's other (140: work queued while the device was busy, and the device idle anyway) is our
    stream_wait (a dependency the trace does not name)."""
    trace = ns.load_trace(_hta_fixture(tmp_path / "rank-0.json"))
    tl = build_timeline(trace, threshold_us=30)
    first, last = int(tl.busy_s[0]), int(tl.busy_e[-1])
    interior = (tl.gap_s >= first) & (tl.gap_e <= last)
    by = {c: 0.0 for c in CLASSES}
    for s, e, c in zip(tl.gap_s[interior], tl.gap_e[interior], tl.gap_cls[interior]):
        by[CLASSES[int(c)]] += (int(e) - int(s)) / 1e3
    assert by == {"host_wait": 550.0, "launch": 20.0 + 20.0, "sync": 0.0, "data": 0.0, "compile": 0.0, "stream_wait": 140.0}
    assert tl.busy_ns / 1e3 == 280.0  # HTA: compute 280 us
    assert (last - first) / 1e3 - 280.0 == 730.0  # HTA: idle 730 us over the kernel span
    assert trace.metadata["distributedInfo"] == {"rank": 0}
    d = diagnose_trace(trace)
    assert d.steps is not None and d.steps.source == "profiler_step" and d.steps.count == 3


def test_partition_invariants_on_random_traces():
    rng = random.Random(7)
    for _ in range(30):
        b = TraceBuilder("cuda")
        b.window(0, 10_000)
        t = 0.0
        for _ in range(rng.randint(1, 40)):
            t += rng.uniform(0, 300)
            op = b.op(rng.choice(["aten::mul", "aten::item", "aten::add"]), t, rng.uniform(1, 20))
            b.launch(op, t + 0.5, 0.5, kernel_at=t + rng.uniform(1, 200), kernel_us=rng.uniform(1, 150))
        if rng.random() < 0.5:
            b.region("enumerate(DataLoader)#x.__next__", rng.uniform(0, 5000), rng.uniform(10, 2000))
        trace = b.build()
        d = diagnose_trace(trace, serial=1)
        assert d.device_busy_us + d.device_idle_us == pytest.approx(10_000.0)
        assert sum(d.idle_us_by_class.values()) == pytest.approx(d.device_idle_us)
        assert 0 <= d.device_busy_pct <= 100
        # a permutation of the events changes nothing
        order = list(range(len(trace)))
        rng.shuffle(order)
        shuffled = trace.select(__import__("numpy").ones(len(trace), dtype=bool))
        import numpy as np

        perm = np.array(order)
        shuffled = type(trace)(
            names=trace.names, kind=trace.kind[perm], name_id=trace.name_id[perm], start_ns=trace.start_ns[perm],
            duration_ns=trace.duration_ns[perm], thread=trace.thread[perm], correlation_id=trace.correlation_id[perm],
            linked_correlation_id=trace.linked_correlation_id[perm], device=trace.device, base_time_ns=trace.base_time_ns,
            category=trace.category[perm], categories=trace.categories,
        )
        d2 = diagnose_trace(shuffled, serial=1)
        assert d2.idle_us_by_class == pytest.approx(d.idle_us_by_class)
        assert d2.bound_by == d.bound_by


def test_diagnosis_round_trips_through_json():
    d = diagnose_trace(every_class_trace().build(), serial=1)
    back = type(d).from_dict(json.loads(json.dumps(d.to_dict())))
    assert back.to_dict() == d.to_dict()


def test_committed_emulated_neuron_trace_offline():
    trace = ns.load_trace(Path(__file__).resolve().parents[1] / "data" / "emulated_neuron_rmsnorm.trace.json.gz")
    d = ns.diagnose(trace)
    assert d.device == "neuron" and d.timeline == "device"
    kernels = sorted(e for e in trace if e.kind == ns.EventKind.DEVICE)
    busy, reach = 0, 0
    for e in sorted(kernels, key=lambda e: e.start_ns):
        s, t = e.start_ns, e.start_ns + e.duration_ns
        if t > max(s, reach):
            busy += t - max(s, reach)
            reach = max(reach, t)
    assert d.device_busy_us == pytest.approx(busy / 1e3)
    assert sum(d.idle_us_by_class.values()) == pytest.approx(d.device_idle_us)
    assert d.finding("neuron_schedule_gap") is None  # the emulator starts executions as scheduled
