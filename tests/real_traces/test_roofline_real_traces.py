"""Issue 28 on the real-trace corpus: the device each trace names, and the GEMM rows' work and
roofline against numbers read straight from the raw file.

For every GEMM call (``aten::mm``/``addmm``/``bmm``) the FLOPs (2·M·N·K·batch from ``Input Dims``)
and the device time of the kernels it launched are computed here by a few independent lines: the
runtime calls (cudaLaunchKernel, cuLaunchKernelEx, hipExtModuleLaunchKernel...) inside the op's span
on its thread, and the device events whose ``correlation`` is one of theirs (that is how every file
of the corpus links a kernel to its launch; the op's own kernels and those of any op nested inside
it, as the summary's inclusive time counts them). The dense peaks and bandwidths are typed in from
notes/issue-28/device_specs.md §1, not read from the code.

Like the other real-trace tests these skip without the corpus, unless NEURONSCOPE_REQUIRE_REAL_TRACES=1.
Run with ``-s`` to see the table of three GEMM rows.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
from collections import defaultdict

import pytest

import neuronscope as ns
from neuronscope.analysis.roofs import limits_for_device, limits_for_trace
from neuronscope.analysis.summary import summarize

from .test_real_traces import SHA256, _corpus_file

B200 = "tracelens__tests_traces_b200_eager_trace.json.gz"
COMPILE = "tracelens__tests_traces_torch_compile_triton_trace.json.gz"
RESNET_MI300 = "tracelens__tests_traces_mi300_resnet_act_checkpoint.json.gz"
VLLM = "tracelens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz"
TRACE_DIFF = "hta__trace_diff_control_control.json.gz"
NEG_QUEUE = "hta__negative_queue_length_values_check_rank0.json.gz"
MI250 = "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
RESNET_V100 = "kineto__resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"

#: deviceProperties[].name -> the device it is (device_specs.md §3a); None: not in the device list
NAMES_3A = {
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-DGXS-32GB": "NVIDIA V100 SXM2",  # DGX Station V100: mapped to SXM2 32 GB (an assumption, §3a)
    "NVIDIA A100-PG509-200": "NVIDIA A100 SXM4 40GB",  # Meta's board name
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM4 80GB",
    "NVIDIA B200": "NVIDIA B200",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
    "": "AMD Instinct MI300X",  # the vLLM trace: only (9.4, 304 CUs, 192 GiB) says so
    "AMD Radeon Graphics": "AMD Instinct MI250 (one GCD)",  # gfx90a, 104 CUs, 64 GiB
    "NVIDIA GeForce RTX 2080 Ti": None,
    "ARTEMIS": None,  # Meta MTIA
}
#: the traces with no deviceProperties (or an empty list)
NO_DEVICE = {
    "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta__mtia_trace_single_rank_mtia_rank_0.json.gz",
    "hta__timeline_analysis_sampled_rank-0.json.gz",
}

#: dense peak TFLOP/s of the GEMMs' dtype and memory GB/s, from device_specs.md §1
SPECS = {
    "NVIDIA B200": {"matrix/bf16": 2250, "GB/s": 8000},
    "AMD Instinct MI300X": {"matrix/bf16": 1307.4, "GB/s": 5300},
    "NVIDIA A100 SXM4 40GB": {"matrix/fp32": 19.5, "matrix/tf32": 156, "GB/s": 1555},
    "NVIDIA A100 SXM4 80GB": {"matrix/fp32": 19.5, "GB/s": 2039},
    "NVIDIA V100 SXM2": {"matrix/fp32": 15.7, "GB/s": 900},
    "AMD Instinct MI250 (one GCD)": {"matrix/fp32": 45.25, "GB/s": 1638.4},  # FP32 matrix, per GCD
}
#: the GEMM traces: the device each names, the GEMM dtype
GEMM_TRACES = {
    B200: ("NVIDIA B200", "bf16"),
    COMPILE: ("AMD Instinct MI300X", "bf16"),
    RESNET_MI300: ("AMD Instinct MI300X", "bf16"),
    VLLM: ("AMD Instinct MI300X", "bf16"),
    TRACE_DIFF: ("NVIDIA A100 SXM4 40GB", "fp32"),
    NEG_QUEUE: ("NVIDIA A100 SXM4 80GB", "fp32"),
    MI250: ("AMD Instinct MI250 (one GCD)", "fp32"),
    RESNET_V100: ("NVIDIA V100 SXM2", "fp32"),
}
GEMMS = ("aten::mm", "aten::addmm", "aten::bmm")
BPE = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2}
#: the three rows of the table (trace, op)
TABLE = [(B200, "aten::addmm"), (COMPILE, "aten::mm"), (VLLM, "aten::mm")]


@functools.lru_cache(maxsize=None)
def _doc(name: str) -> dict:
    return json.loads(gzip.decompress(_corpus_file(name).read_bytes()))


@functools.lru_cache(maxsize=None)
def _summary(name: str):
    return summarize(ns.load_trace(_corpus_file(name)))


def _cat(e: dict) -> str:
    return (e.get("cat") or "").lower()


@functools.lru_cache(maxsize=None)
def _raw_gemms(name: str) -> dict[str, list[dict]]:
    """Every GEMM call in the raw file: its shapes, FLOPs, compulsory bytes and kernel time (µs)."""
    events = [e for e in _doc(name)["traceEvents"] if e.get("ph") == "X"]
    runtime = defaultdict(list)  # (pid, tid) -> [(ts, end, correlation)] sorted by ts
    for e in events:
        if _cat(e) in ("cuda_runtime", "cuda_driver", "runtime", "driver") and "correlation" in (e.get("args") or {}):
            runtime[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e.get("dur", 0), e["args"]["correlation"]))
    for v in runtime.values():
        v.sort()
    device_us = defaultdict(float)  # correlation -> device µs
    for e in events:
        if _cat(e) in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"):
            device_us[(e.get("args") or {}).get("correlation")] += e.get("dur", 0)
    out: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        args = e.get("args") or {}
        if _cat(e) not in ("cpu_op", "operator") or e["name"] not in GEMMS or "Input Dims" not in args:
            continue
        dims, types = args["Input Dims"], args["Input type"]
        a_at = 1 if e["name"] == "aten::addmm" else 0
        a, b = dims[a_at], dims[a_at + 1]
        batch = a[0] if e["name"] == "aten::bmm" else 1
        m, k, n = a[-2], a[-1], b[-1]
        bpe = BPE[types[a_at]]
        bias = 1
        for d in dims[0] if e["name"] == "aten::addmm" else []:
            bias *= d
        nbytes = (batch * (m * k + k * n + m * n) + (bias if e["name"] == "aten::addmm" else 0)) * bpe
        start, end = e["ts"], e["ts"] + e["dur"]
        calls = runtime.get((e["pid"], e["tid"]), [])
        i = bisect.bisect_left(calls, (start,))
        kernel_us = 0.0
        while i < len(calls) and calls[i][0] <= end:
            if calls[i][1] <= end:
                kernel_us += device_us.get(calls[i][2], 0.0)
            i += 1
        out[e["name"]].append(
            {
                "shape": f"{a}x{b}",
                "dtype": types[a_at],
                "flops": 2 * batch * m * n * k,
                "bytes": nbytes,
                "mn": batch * m * n,
                "us": kernel_us,
            }
        )
    return dict(out)


# -- which device each trace names -----------------------------------------------------------------------
def test_every_device_name_in_the_corpus_maps_as_device_specs_3a_says():
    seen = set()
    for name in sorted(SHA256):
        props = _doc(name).get("deviceProperties") or []
        if not props:
            assert name in NO_DEVICE, name
            assert limits_for_trace(ns.load_trace(_corpus_file(name))) is None, name
            continue
        for p in props:
            found = limits_for_device(p.get("name", ""), p)
            assert (found.name if found else None) == NAMES_3A[p.get("name", "")], (name, p.get("name"))
            seen.add(p.get("name", ""))
    assert seen == set(NAMES_3A)  # every name of §3a is still in the corpus, and no other


@pytest.mark.parametrize("name", sorted(GEMM_TRACES))
def test_gemm_traces_are_recognised(name):
    limits = limits_for_trace(ns.load_trace(_corpus_file(name)))
    device, _dtype = GEMM_TRACES[name]
    assert limits is not None and limits.name == device
    assert _summary(name).limits == limits


# -- GEMM rows against the raw file ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GEMM_TRACES))
def test_gemm_rows_work_and_roofline(name):
    device, dtype = GEMM_TRACES[name]
    spec = SPECS[device]
    raw = _raw_gemms(name)
    assert raw, "the trace records GEMM shapes"
    summary = _summary(name)
    for op, calls in raw.items():
        row = summary[op]
        w, r = row.work, row.roofline
        flops = sum(c["flops"] for c in calls)
        nbytes = sum(c["bytes"] for c in calls)
        us = sum(c["us"] for c in calls)
        assert all(c["us"] > 0 for c in calls), f"{op}: a call without a kernel"
        # every call is counted once, on this row (no GEMM of the corpus sits inside another modelled op)
        assert w.calls == len(calls) and w.not_counted == 0, (op, w)
        assert w.flops == flops, op
        assert w.bytes == nbytes, op
        assert w.time_us == pytest.approx(us, rel=1e-6, abs=1e-3 * len(calls)), op
        assert w.flops_by_roof == {f"matrix/{dtype}": flops}
        if op == "aten::addmm":
            # TraceLens adds the bias epilogue, M·N per call (perf_model.py:84-88); we do not, as
            # flop_counter, with_flops and MFU conventions do not. Its bytes (one bpe, a 1×N bias) are
            # ours here: every operand has the same dtype and the bias is [N].
            tracelens_flops = flops + sum(c["mn"] for c in calls)
            assert w.flops < tracelens_flops
        # the roofline: achieved FLOP/s, the dense peak of the dtype, the bound; fp32 GEMMs faster
        # than the fp32 peak ran on TF32 tensor cores and are held to the TF32 peak (docs/roofline.md)
        seconds = us / 1e6
        roof = dtype
        if dtype == "fp32" and "matrix/tf32" in spec and flops / seconds > 1.05 * spec["matrix/fp32"] * 1e12:
            roof = "tf32"
        peak = spec[f"matrix/{roof}"] * 1e12
        assert r is not None and r.dtype == f"matrix/{roof}"
        assert r.roof_flops_per_s == pytest.approx(peak)
        assert r.achieved_flops_per_s == pytest.approx(flops / seconds, rel=1e-5)
        compute_s, memory_s = flops / peak, nbytes / (spec["GB/s"] * 1e9)
        assert r.pct_of_roof == pytest.approx(100 * max(compute_s, memory_s) / seconds, rel=1e-5)
        assert r.bound == ("compute" if compute_s > memory_s else "memory")


def test_a100_fp32_gemms_ran_as_tf32():
    """The A100 trace's fp32 GEMMs run cutlass ``tensorop_s1688gemm`` kernels: TF32 tensor cores. Their
    achieved rate is above the fp32 peak (19.5 TFLOP/s) and below the TF32 one (156): the fp32 roof the
    fp32 roof cannot be reached by the kernel it did run, so the row is held to the TF32 peak instead."""
    spec = SPECS["NVIDIA A100 SXM4 40GB"]
    calls = _raw_gemms(TRACE_DIFF)["aten::mm"]
    achieved = sum(c["flops"] for c in calls) / (sum(c["us"] for c in calls) / 1e6) / 1e12
    assert spec["matrix/fp32"] < achieved < spec["matrix/tf32"]
    r = _summary(TRACE_DIFF)["aten::mm"].roofline
    assert r.dtype == "matrix/tf32" and r.roof_flops_per_s == spec["matrix/tf32"] * 1e12 and r.pct_of_roof < 100


def test_three_gemm_rows_table():
    lines = [
        "| trace | op | shapes (calls) | dtype | device | FLOPs | device time (µs) | achieved TFLOP/s "
        "| % of dense peak | bound, % of roof |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, op in TABLE:
        device, dtype = GEMM_TRACES[name]
        calls = _raw_gemms(name)[op]
        flops, us = sum(c["flops"] for c in calls), sum(c["us"] for c in calls)
        achieved = flops / (us / 1e6)
        peak = SPECS[device][f"matrix/{dtype}"] * 1e12
        r = _summary(name)[op].roofline
        assert r.achieved_flops_per_s == pytest.approx(achieved, rel=1e-5)
        assert 100 * r.achieved_flops_per_s / r.roof_flops_per_s == pytest.approx(100 * achieved / peak, rel=1e-5)
        by_shape: dict[str, int] = defaultdict(int)
        for c in calls:
            by_shape[c["shape"]] += 1
        shapes = ", ".join(f"{s} ({n})" for s, n in sorted(by_shape.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"| {name.removesuffix('.json.gz')} | {op} | {shapes} | {calls[0]['dtype']} | {device} | {flops:.4g} | {us:,.1f} "
            f"| {achieved / 1e12:,.1f} | {100 * achieved / peak:.1f} % of {peak / 1e12:g} | {r.bound}, {r.pct_of_roof:.1f} % |"
        )
    print("\n" + "\n".join(lines))
