"""On a CPU, a torch.compile graph's time is device time, with or without ``record_shapes``.

torch 2.13 records Inductor's ``## Call CompiledFxGraph <hash> ##`` as a ``cpu_op`` without
shapes and as a ``user_annotation`` with them; the C++ kernels run inside that call. Each test
profiles a real compiled function, reads the saved ``trace.json.gz`` with ``json`` and computes
what the call (or each kernel, with Inductor's kernel profiling) took by nesting the raw events
itself, then checks the live summary and the summary of the reloaded trace against it. On a GPU
trace the call stays a region: its kernels are device events of their own.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope.analysis.summary import Summary, summarize

STEPS = 6
GRAPH_CALL = "## Call CompiledFxGraph "
#: what ``torch._inductor.config.cpp.enable_kernel_profile`` names each C++ kernel
KERNEL = re.compile(r"^graph_\d+_cpp_")


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rmsnorm_for_kernel_profile(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # its own code object: dynamo caches compiled graphs per function, not per Inductor config
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@pytest.fixture(scope="module")
def xw() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(8, 128, 2048), torch.randn(2048)  # 8 MiB: the kernel, not Python, fills a step


@pytest.fixture(scope="module")
def compiled(xw):
    fn = torch.compile(rmsnorm)
    fn(*xw)  # compile before any profile
    return fn


def _profile(fn, xw, name: str, record_shapes: bool) -> tuple[ns.Run, float]:
    """A profiled run of ``STEPS`` calls and the wall time of the loop, measured here (us)."""
    fn(*xw)
    with ns.profile_neuron(name=name, record_shapes=record_shapes) as run:
        t0 = time.perf_counter_ns()
        for _ in range(STEPS):
            fn(*xw)
            ns.step()
        wall_us = (time.perf_counter_ns() - t0) / 1e3
    ns.flush(60)
    return run, wall_us


# -- the raw trace, read here -----------------------------------------------------------------


def _raw_cpu_events(run_dir: Path) -> list[dict]:
    """The CPU thread's ops and annotations of the saved trace, without neuronscope's markers."""
    events = json.loads(gzip.decompress((run_dir / "trace.json.gz").read_bytes()))["traceEvents"]
    return [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and not e["name"].startswith("neuronscope::")
    ]


def _within(inner: dict, outer: dict) -> bool:
    return (
        inner is not outer
        and (inner["pid"], inner["tid"]) == (outer["pid"], outer["tid"])
        and outer["ts"] <= inner["ts"]
        and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    )


def _self_us(event: dict, events: list[dict]) -> float:
    """The event's duration less that of its direct children."""
    inner = [e for e in events if _within(e, event)]
    direct = [e for e in inner if not any(_within(e, o) for o in inner)]
    return event["dur"] - sum(e["dur"] for e in direct)


def _top_level_us(events: list[dict]) -> float:
    """On a CPU every self time is device time; they add up to the outermost events' durations."""
    return sum(e["dur"] for e in events if not any(_within(e, o) for o in events))


def _summaries(run: ns.Run) -> dict[str, Summary]:
    """The live summary and the one of the trace reloaded from disk: both readers."""
    return {"live": run.summary, "reloaded": summarize(ns.load_trace(run.path))}


def _graph_row(summary: Summary):
    rows = [r for r in summary.rows if r.name.startswith(GRAPH_CALL)]
    assert len(rows) == 1, [r.name for r in summary.rows]
    return rows[0]


# -- tests ------------------------------------------------------------------------------------


@pytest.mark.timing
@pytest.mark.parametrize("record_shapes", [False, True])
def test_the_compiled_graph_call_is_device_time_with_and_without_shapes(compiled, xw, record_shapes):
    run, wall_us = _profile(compiled, xw, f"compiled-shapes-{record_shapes}", record_shapes)
    events = _raw_cpu_events(run.path)
    calls = [e for e in events if e["name"].startswith(GRAPH_CALL)]
    assert len(calls) == STEPS
    # torch 2.13's own classification, which made the call vanish with shapes on
    assert {e["cat"] for e in calls} == {"user_annotation" if record_shapes else "cpu_op"}
    call_self_us = sum(_self_us(e, events) for e in calls)
    tol = 0.01 * len(events)  # the file's microseconds have three decimals
    for how, s in _summaries(run).items():
        row = _graph_row(s)
        assert row.calls == STEPS, how
        assert row.self_device_time_us == pytest.approx(call_self_us, abs=tol), how
        assert row.name not in s.regions, how
        assert s.total_device_time_us == pytest.approx(_top_level_us(events), abs=tol), how
        # the kernels are the step: the profile's device time is most of the loop's wall time
        assert s.total_device_time_us <= wall_us, how
        assert s.total_device_time_us >= 0.5 * wall_us, (how, s.total_device_time_us, wall_us)


def test_inductor_kernel_profiling_puts_each_kernels_time_on_the_kernel(xw):
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
        fn = torch.compile(rmsnorm_for_kernel_profile)
        fn(*xw)
    for record_shapes in (False, True):
        run, _ = _profile(fn, xw, f"kernel-profile-shapes-{record_shapes}", record_shapes)
        events = _raw_cpu_events(run.path)
        kernels = [e for e in events if KERNEL.match(e["name"])]
        calls = [e for e in events if e["name"].startswith(GRAPH_CALL)]
        assert kernels and all(e["cat"] == "cpu_op" for e in kernels)  # a record_function per kernel
        assert all(any(_within(k, c) for c in calls) for k in kernels)  # inside the graph's call
        tol = 0.01 * len(events)
        for how, s in _summaries(run).items():
            for name in {e["name"] for e in kernels}:
                expected = sum(_self_us(e, events) for e in kernels if e["name"] == name)
                assert s[name].self_device_time_us == pytest.approx(expected, abs=tol), (how, record_shapes)
            # the call keeps what its kernels did not take (allocations, the wrapper)
            row = _graph_row(s)
            assert row.self_device_time_us == pytest.approx(sum(_self_us(e, events) for e in calls), abs=tol), how
            assert row.self_device_time_us < 0.5 * sum(s[k].self_device_time_us for k in {e["name"] for e in kernels})
            assert s.total_device_time_us == pytest.approx(_top_level_us(events), abs=tol), (how, record_shapes)


def test_a_graph_called_outside_dynamo_is_busy_time_in_the_diagnosis(xw):
    """Inductor's graph called directly (no ``Torch-Compiled Region`` op around it): with shapes
    the call is a top-level annotation, and the CPU timeline counts it busy all the same."""

    def rmsnorm_tuple(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (rmsnorm(x, w),)

    graph = torch._inductor.compile(torch.fx.symbolic_trace(rmsnorm_tuple), list(xw))
    run, wall_us = _profile(graph, xw, "inductor-direct", record_shapes=True)
    events = _raw_cpu_events(run.path)
    calls = [e for e in events if e["name"].startswith(GRAPH_CALL)]
    assert len(calls) == STEPS and not any(_within(c, o) for c in calls for o in events)
    calls_us = sum(e["dur"] for e in calls)
    for how, diagnosis in {"live": run.diagnosis, "reloaded": ns.diagnose(run.path)}.items():
        assert diagnosis is not None and diagnosis.timeline == "cpu_main_thread"
        assert diagnosis.device_busy_us >= calls_us - 0.01 * STEPS, how
    for how, s in _summaries(run).items():
        assert _graph_row(s).self_device_time_us == pytest.approx(calls_us, abs=0.01 * len(events)), how


def test_on_a_gpu_trace_the_compiled_graph_call_stays_a_region():
    """The real MI300X torch.compile trace: the call's kernels are device events, linked to the
    Triton launches; its totals are what the raw file says (the call adds no time of its own)."""
    from real_traces.test_real_traces import _corpus_file

    path = _corpus_file("tracelens__tests_traces_torch_compile_triton_trace.json.gz")
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    device_us = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    cpu = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")]
    ops = [e for e in cpu if e["cat"] != "user_annotation"]
    assert any(e["name"].startswith(GRAPH_CALL) for e in cpu if e["cat"] == "user_annotation")
    s = summarize(ns.load_trace(path))
    assert s.device == "rocm"
    assert s.total_device_time_us == pytest.approx(device_us, abs=0.01)
    assert s.total_cpu_time_us == pytest.approx(sum(_self_us(e, cpu) for e in ops), abs=0.01 * len(cpu))
    assert not any(r.name.startswith(GRAPH_CALL) for r in s.rows)
    assert any(p.startswith(GRAPH_CALL) for p in s.regions)
