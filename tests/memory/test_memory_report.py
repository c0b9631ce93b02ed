"""Known-answer memory tests (issue 19, item 6): real torch.profiler runs on CPU, real files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.profiler import record_function

import neuronscope as ns
from neuronscope.analysis.memory import analyse_memory
from neuronscope.trace.memory import MemoryRecords, records_from_event_tree, records_from_kineto_json
from neuronscope.trace.model import EventKind, Trace

MiB = 1 << 20


def _other_work() -> None:
    a = torch.randn(128, 128)
    for _ in range(5):
        a = torch.tanh(a @ a)


def test_region_big_holds_the_peak():
    with ns.profile_neuron(name="big", memory=True) as run:
        with record_function("big"):
            held = torch.ones(16 * MiB)  # 64 MiB of float32, kept while other ops run
        _other_work()
        del held
    m = run.memory
    assert m is not None and m.device == "cpu"
    assert m.peak_bytes >= 64 * MiB
    top = m.at_peak[0]
    assert top.region == "big" and top.op == "aten::ones"
    assert abs(top.bytes - 64 * MiB) <= 0.05 * 64 * MiB
    assert m.region("big").allocated_bytes >= 64 * MiB and m.region("big").net_bytes == 0  # freed inside the window
    assert min(b for _, b in m.timeline) >= 0 and max(b for _, b in m.timeline) == m.peak_bytes
    peak = run.diagnosis.finding("memory_peak")
    assert peak is not None and peak.evidence["region"] == "big" and peak.evidence["bytes"] >= 64 * MiB
    assert "big" in m.headline() and "memory peak" in m.headline()


def _loop(keep: bool) -> ns.Run:
    kept = []
    with ns.profile_neuron(name="loop", memory=True) as run:
        for _ in range(20):
            with record_function("train_step"):
                t = torch.ones(MiB // 4)  # 1 MiB
                if keep:
                    kept.append(t)
                _other_work()
    return run


def test_growth_per_step_is_found_and_named():
    run = _loop(keep=True)
    m = run.memory
    assert len(m.steps) == 20 and m.steps_source == "region"
    assert abs(m.growth_per_step_bytes - MiB) <= 0.1 * MiB
    assert m.growth_bytes >= 19 * MiB
    f = run.diagnosis.finding("memory_growth")
    assert f is not None
    first = f.evidence["never_freed"][0]
    assert first["op"] == "aten::ones" and first["region"] == "train_step"
    assert "aten::ones in train_step" in f.message and f.evidence["bytes"] >= 19 * MiB


def test_no_growth_without_kept_tensors():
    run = _loop(keep=False)
    m = run.memory
    assert abs(m.growth_per_step_bytes) < 64 * 1024
    assert run.diagnosis.finding("memory_growth") is None


def test_allocation_from_before_the_profile_never_goes_negative():
    before = torch.ones(4 * MiB // 4)
    with ns.profile_neuron(name="pre", memory=True) as run:
        del before  # allocated before the window, freed inside it
        x = torch.ones(MiB // 4)
        del x
    m = run.memory
    assert m.peak_bytes >= 0 and m.start_bytes >= 0 and m.end_bytes >= 0
    assert all(b >= 0 for _, b in m.timeline)
    assert all(g.net_bytes >= 0 and g.freed_bytes >= 0 for g in m.by_op)


def _synthetic_trace(ops: list[tuple[str, int, int]], regions: list[tuple[str, int, int]] = ()) -> Trace:
    rows = [(n, int(EventKind.OP), s, e - s) for n, s, e in ops] + [(n, int(EventKind.REGION), s, e - s) for n, s, e in regions]
    return Trace.from_columns(
        names=[r[0] for r in rows], kind=[r[1] for r in rows], start_ns=[r[2] for r in rows],
        duration_ns=[r[3] for r in rows], thread=[0] * len(rows),
    )


def test_pre_window_free_is_counted_at_the_start_not_negative():
    # the CUDA caching allocator reports frees of blocks allocated before the profile
    trace = _synthetic_trace([("aten::mul", 0, 100), ("aten::add", 200, 300)])
    records = MemoryRecords.build(
        time_ns=[10, 50, 250], bytes=[MiB, -8 * MiB, -MiB], addr=[1, 99, 1],
        device_type=[0, 0, 0], thread=[0, 0, 0],
    )
    m, _ = analyse_memory(trace, records)
    assert m.start_bytes == 8 * MiB and m.peak_bytes == 9 * MiB and m.end_bytes == 0
    assert m.at_peak[0].op == "aten::mul" or m.at_peak[0].op == "(before the profile)"
    assert {h.op for h in m.at_peak} == {"aten::mul", "(before the profile)"}
    assert min(b for _, b in m.timeline) >= 0


def test_pairing_is_by_address_not_by_size():
    # two 1 MiB blocks: the first (aten::ones) is freed, the second (aten::mul) kept
    trace = _synthetic_trace([("aten::ones", 0, 100), ("aten::mul", 200, 300), ("aten::sum", 400, 500)])
    records = MemoryRecords.build(
        time_ns=[10, 210, 410, 420], bytes=[MiB, MiB, 4, -MiB], addr=[7, 8, 9, 7], device_type=[0] * 4, thread=[0] * 4,
    )
    m, _ = analyse_memory(trace, records)
    assert m.op("aten::ones").net_bytes == 0 and m.op("aten::mul").net_bytes == MiB


def test_fragmentation_on_cuda_records():
    trace = _synthetic_trace([("aten::empty", 0, 100)])
    records = MemoryRecords.build(
        time_ns=[10, 20], bytes=[100 * MiB, -100 * MiB], addr=[1, 1], total_allocated=[100 * MiB, 0],
        total_reserved=[1024 * MiB, 1024 * MiB], device_type=[1, 1], device_id=[0, 0], thread=[0, 0],
    )
    m, findings = analyse_memory(trace, records)
    assert m.device == "cuda" and m.peak_reserved_bytes == 1024 * MiB
    frag = next(f for f in findings if f.rule == "fragmentation")
    assert frag.evidence["bytes"] == 924 * MiB and "expandable_segments" in frag.message


def test_churn_of_short_lived_large_allocations():
    kept = []
    with ns.profile_neuron(name="churn", memory=True) as run:
        for _ in range(4):
            with record_function("step"):
                for _ in range(20):
                    tmp = torch.ones(2 * MiB // 4) * 2  # two 2 MiB blocks, freed at once
                    kept.append(float(tmp[0]))
    f = run.diagnosis.finding("allocator_churn")
    assert f is not None and f.evidence["per_step"] >= 16 and f.evidence["bytes"] >= 4 * 20 * 2 * MiB


class _FakeOOM(torch.OutOfMemoryError):
    pass


def test_out_of_memory_keeps_the_run_and_propagates_unchanged():
    raised = RuntimeError("placeholder")
    held = []
    with pytest.raises(torch.OutOfMemoryError) as info:
        with ns.profile_neuron(name="oom", memory=True) as run:
            with record_function("fill"):
                for _ in range(8):
                    held.append(torch.ones(2 * MiB // 4))
            raised = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            raise raised
    assert info.value is raised  # the user's exception, untouched
    assert run.wait(30) and run.status == ns.RunStatus.ERROR and run.error == "OutOfMemoryError"
    m = run.memory
    assert m is not None and m.oom is not None and m.peak_bytes >= 16 * MiB
    f = run.diagnosis.finding("out_of_memory")
    assert f is not None and f.severity == "high" and "fill" in f.message
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["status"] == "error" and manifest["error"] == "OutOfMemoryError"


def test_saved_run_and_offline_trace_give_the_same_report(tmp_path):
    kept = []
    with ns.profile_neuron(name="saved", memory=True) as run:
        for _ in range(5):
            with record_function("s"):
                kept.append(torch.ones(MiB // 4) + 1)
    m = run.memory
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["memory"]["peak_bytes"] == m.peak_bytes
    assert ns.load_run(run.path).memory == m or ns.load_run(run.path).memory.to_dict() == m.to_dict()
    offline = ns.diagnose_memory(run.path / "trace.json.gz")
    assert offline.peak_bytes == m.peak_bytes and offline.growth_bytes == m.growth_bytes
    assert offline.at_peak[0].op == m.at_peak[0].op and offline.at_peak[0].region == m.at_peak[0].region


def test_diagnose_memory_says_what_to_enable(tmp_path):
    with ns.profile_neuron(name="nomem") as run:
        torch.ones(10) + 1
    assert run.memory is None
    with pytest.raises(ns.TraceLoadError, match="profile_memory=True"):
        ns.diagnose_memory(run.path)


def test_json_reader_matches_torch_event_tree():
    from neuronscope.trace.kineto import trace_from_kineto
    from neuronscope.trace.memory import MEMORY_EVENT

    held = []
    prof = torch.profiler.profile(profile_memory=True)
    prof.start()
    for _ in range(3):
        held.append(torch.ones(1000) * 3)
    prof.stop()
    results = prof.profiler.kineto_results
    tree = records_from_event_tree(results)
    trace = trace_from_kineto(results)
    rows = np.flatnonzero(trace.name_id == trace.names.index(MEMORY_EVENT))
    path = f"{prof.profiler.kineto_results}".__class__  # noqa: F841 - keeps flake quiet about unused
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        results.save(f.name)
        fast = records_from_kineto_json(open(f.name, "rb").read(), trace.start_ns[rows], trace.thread[rows])
    assert len(fast) == len(tree) > 0
    assert np.array_equal(fast.bytes, tree.bytes) and np.array_equal(fast.addr, tree.addr)
    assert np.array_equal(fast.time_ns, tree.time_ns)


def test_memory_option_is_validated():
    with pytest.raises(ns.ConfigurationError, match="memory="):
        ns.profile_neuron(memory="yes")
    assert ns.profile_neuron(profile_memory=True).memory == "on"
    assert ns.profile_neuron(memory=True).torch_options["profile_memory"] is True
    assert ns.profile_neuron().memory is None
