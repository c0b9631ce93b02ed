"""Issue 37, item 4 on the real-trace corpus: the device time by class (GEMM, attention, copy,
communication...) against counts read straight from the raw file.

For every trace the raw file's kernels are listed with the op that launched them by a few
independent lines (``reference.reference_launches``: correlation id -> runtime call -> innermost
enclosing cpu_op). The checks:

* the classes add up to the file's device time, and the part launched outside any op is the
  part no cpu_op encloses;
* the class that matters in each trace (GEMM in the decode steps, communication in the DDP and
  recommender jobs, convolution in the ResNets, copies in the AlexNet benchmarks...) holds
  exactly the kernels a hand-written rule picks: the ops that launched them (``aten::mm``...)
  and, where no op classifies them, a pattern over their names (``^Cijk_`` on the SGLang decode
  step, whose GEMMs a HIP graph replays outside any op);
* the GEMM kernels outside any op get no roofline, and the roofline footer and the finding say so.

Run with ``-s`` to see, per trace, the share of device time the roofline models, the share the
launching op's work family classified before item 4, and the share classified now.
"""

from __future__ import annotations

import functools
import re

import pytest

import neuronscope as ns
from neuronscope.analysis.roofline import run_roofline
from neuronscope.analysis.summary import summarize
from neuronscope.trace.op_families import MODELLED_OPS

from .reference import raw_events, reference_launches
from .test_real_traces import SHA256, _corpus_file

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
CONV_OPS = re.compile(r"^aten::(?:_?convolution|cudnn_convolution|miopen_convolution|conv\dd)")
COMMS_OPS = re.compile(r"^(?:record_param_comms|c10d::|symm_mem::)")


def _gemm_by_op(k: dict) -> bool:
    return k["owner"] in GEMM_OPS


def _names(pattern: str, *, outside: bool = False):
    rx = re.compile(pattern)

    def pick(k: dict) -> bool:
        return bool(rx.search(k["name"])) and (k["owner"] is None or not outside)

    return pick


def _either(*picks):
    return lambda k: any(p(k) for p in picks)


#: trace -> {class: which raw kernels it holds}, read by a person from each file's kernels and ops
CHECKS = {
    "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz": {"gemm": _gemm_by_op},
    "hta__critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz": {
        "copy": lambda k: k["owner"] == "aten::copy_",
        "conv": lambda k: bool(CONV_OPS.match(k["owner"] or "")),
    },
    "hta__critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz": {"gemm": _gemm_by_op},
    "hta__critical_path_simple_add_benchmark_result_493459_1694039959_trace.json.gz": {
        "copy": lambda k: k["owner"] == "aten::copy_",
    },
    # CUPTI range-profiler kernels, linked to no runtime call: every one by its name
    "hta__cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz": {
        "gemm": _names(r"^ampere_\w*gemm|^void epilogue::impl::globalKernel", outside=True),
        "conv": _names(r"^void xmma_new::gemm::kernel<xmma_new::implicit_gemm|^void fft2d_|implicit_convolve", outside=True),
    },
    "hta__mtia_inference_trace_mtia_inference_rank_0.json.gz": {"copy": _names(r"^dma_request$", outside=True)},
    "hta__mtia_trace_single_rank_mtia_rank_0.json.gz": {"gemm": _gemm_by_op},
    "hta__nccl_parser_config_nccl_data.json.gz": {"communication": lambda k: bool(COMMS_OPS.match(k["owner"] or ""))},
    "hta__negative_queue_length_values_check_rank0.json.gz": {"communication": _names(r"^ncclKernel_")},
    "hta__ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": {
        "conv": lambda k: bool(CONV_OPS.match(k["owner"] or "")),
    },
    "hta__timeline_analysis_sampled_rank-0.json.gz": {
        "communication": lambda k: bool(COMMS_OPS.match(k["owner"] or "")),
    },
    "hta__trace_diff_control_control.json.gz": {
        "communication": lambda k: bool(COMMS_OPS.match(k["owner"] or "")),
        "gemm": _gemm_by_op,
    },
    "hta__triton_example_triton_example.json.gz": {"elementwise": _names(r"^triton_poi_fused_add_cos_sin")},
    "kineto__resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz": {
        "conv": lambda k: bool(CONV_OPS.match(k["owner"] or "")),
    },
    "kineto__resnet50_num_workers_4_worker0.1623212756351.pt.trace.json.gz": {
        "conv": lambda k: bool(CONV_OPS.match(k["owner"] or "")),
    },
    "param__et_replay_tests_inputs_linear_kineto.json.gz": {"gemm": _gemm_by_op},
    # vLLM eager: the MoE GEMMs (TensorRT-LLM's bmm_* kernels) run under vllm::moe_forward, no GEMM op
    "tracelens__tests_traces_b200_eager_trace.json.gz": {
        "gemm": _either(_gemm_by_op, lambda k: k["owner"] == "vllm::moe_forward" and k["name"].startswith("bmm_")),
        "communication": lambda k: bool(COMMS_OPS.match(k["owner"] or "")),
        "attention": _names(r"^fmhaSm100"),
    },
    # one decode step replayed as a HIP graph: hipBLASLt's GEMMs and the paged attention outside any op
    "tracelens__tests_traces_inference_sglang_decode_sglang_Qwen3-8B_decode.json.gz": {
        "gemm": _names(r"^Cijk_", outside=True),
        "attention": _names(r"paged_attention|flashinfer_kv_indices", outside=True),  # + FlashInfer's KV index
        "norm": _names(r"rmsnorm", outside=True),
    },
    # a full-graph vLLM decode: Triton's matmul_ogs MoE GEMMs and hipBLASLt outside any op, one aten::mm
    "tracelens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz": {
        "gemm": _either(_gemm_by_op, _names(r"^Cijk_|^_matmul_ogs_", outside=True)),
        "attention": _names(r"^kernel_unified_attention", outside=True),
    },
    "tracelens__tests_traces_mi300_resnet_act_checkpoint.json.gz": {"communication": _names(r"^ncclDevKernel_")},
    "tracelens__tests_traces_torch_compile_triton_trace.json.gz": {
        "gemm": _gemm_by_op,
        "attention": lambda k: k["owner"] == "aten::_flash_attention_forward",
        "norm": _names(r"^triton_red_fused\w*mean\w*rsqrt"),
    },
}
DEVICE_TRACES = sorted(CHECKS)
CPU_ONLY = "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@functools.lru_cache(maxsize=None)
def _summary(name: str):
    return summarize(ns.load_trace(_corpus_file(name)))


@functools.lru_cache(maxsize=None)
def _kernels(name: str) -> list[dict]:
    return reference_launches(raw_events(_corpus_file(name)))


def test_every_trace_of_the_corpus_is_checked():
    assert set(SHA256) == set(CHECKS) | {CPU_ONLY}


@pytest.mark.parametrize("name", DEVICE_TRACES)
def test_classes_add_up_to_the_files_device_time(name):
    kernels = _kernels(name)
    dc = _summary(name).device_classes
    total = sum(k["dur"] for k in kernels)
    assert dc.total_us == pytest.approx(total, rel=1e-9)
    assert _summary(name).total_device_time_us == pytest.approx(dc.total_us, rel=1e-9)
    outside = sum(k["dur"] for k in kernels if k["owner"] is None)
    assert sum(dc.outside_ops_us.values()) == pytest.approx(outside, rel=1e-9, abs=1e-6)
    graph = sum(k["dur"] for k in kernels if (k["runtime"] or "").endswith("GraphLaunch"))
    assert dc.graph_us == pytest.approx(graph, rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in dc.by_class_us.values()) and list(dc.by_class_us.values()) == sorted(
        dc.by_class_us.values(), reverse=True
    )


@pytest.mark.parametrize("name", DEVICE_TRACES)
def test_the_class_that_matters_holds_exactly_its_kernels(name):
    kernels = _kernels(name)
    dc = _summary(name).device_classes
    for cls, pick in CHECKS[name].items():
        expected = sum(k["dur"] for k in kernels if pick(k))
        assert expected > 0, (name, cls)  # the rule picks something: the check is not empty
        assert dc.by_class_us.get(cls, 0.0) == pytest.approx(expected, rel=1e-9), (name, cls)


def test_a_cpu_only_trace_classes_its_ops():
    s = _summary(CPU_ONLY)
    assert s.device == "cpu"
    assert s.device_classes.total_us == pytest.approx(s.total_device_time_us)
    assert s.device_classes.outside_ops_us == {} and s.device_classes.graph_us == 0.0


def test_sglang_decode_is_told_it_is_gemm_bound_outside_any_op():
    """The issue's trace: 59 % of the decode step is hipBLASLt GEMMs a HIP graph replays; the
    roofline models 1 % of device time and says why the GEMMs have none."""
    name = "tracelens__tests_traces_inference_sglang_decode_sglang_Qwen3-8B_decode.json.gz"
    kernels = _kernels(name)
    total = sum(k["dur"] for k in kernels)
    gemm = sum(k["dur"] for k in kernels if k["name"].startswith("Cijk_"))
    s = _summary(name)
    assert s.device_classes.share("gemm") == pytest.approx(100 * gemm / total)
    assert s.device_classes.dominant == "gemm" and s.device_classes.share("gemm") > 50
    d = ns.diagnose(_corpus_file(name))
    f = d.finding("device_time_by_class")
    assert f is not None and f.severity == "info" and f.us_at_stake == 0.0 and f.subject == "gemm"
    assert f.evidence["shares_pct"]["gemm"] == pytest.approx(100 * gemm / total, abs=0.01)
    assert f.evidence["dominant_outside_pct"] == 100.0  # every Cijk_ kernel ran outside any op
    assert f.message.startswith(f"{100 * gemm / total:.0f}% of device time is GEMM")
    assert "graph replay" in f.message and "record_shapes=True" in f.message
    # the roofline: what it models, and the GEMM time it cannot see (no sizes outside ops)
    from neuronscope.analysis.text import roofline_footer

    run = run_roofline(s)
    assert run is not None and run.coverage_pct < 2
    footer = "\n".join(roofline_footer(s))
    assert f"no roofline for GEMM kernels of {gemm / 1e3:.3f}ms" in footer
    assert "launched outside any op (the trace records no sizes for them)" in footer
    for row in s.rows:
        if row.name.startswith("Cijk_"):
            assert row.roofline is None and row.work.reason.startswith("gemm kernel launched outside any op")


def test_shares_before_and_after_the_classes():
    """The table of the closing note (printed with -s): per trace, the share of device time the
    roofline models, the share whose launching op has a work model (what classified device time
    before item 4), and the share classified now (by op or by kernel name)."""
    lines = ["| trace | roofline models | classified before (op with a work model) | classified now (by op, by name) |"]
    lines.append("|---|---|---|---|")
    for name in DEVICE_TRACES:
        kernels = _kernels(name)
        total = sum(k["dur"] for k in kernels)
        before = 100 * sum(k["dur"] for k in kernels if k["owner"] in MODELLED_OPS) / total
        s = _summary(name)
        dc = s.device_classes
        run = run_roofline(s)
        by_op = dc.pct(sum(dc.by_op_us.values()))
        assert dc.classified_pct >= by_op >= before - 1e-9  # every modelled op has a class
        lines.append(
            f"| {name.removesuffix('.json.gz')} | {run.coverage_pct if run else 0.0:.1f} % | {before:.1f} % "
            f"| {dc.classified_pct:.1f} % ({by_op:.1f} + {dc.classified_pct - by_op:.1f}) |"
        )
    print("\n" + "\n".join(lines))


SGLANG = "tracelens__tests_traces_inference_sglang_decode_sglang_Qwen3-8B_decode.json.gz"


def test_windows_fold_their_classes_and_the_finding_is_the_runs():
    """Two windows of the same decode step: the classes add up, the shares stay, and the finding is
    worked out again over the folded summary (one finding, its device time the run's)."""
    from neuronscope.analysis.fold import fold_diagnoses, fold_summaries

    s = _summary(SGLANG)
    d = ns.diagnose(_corpus_file(SGLANG))
    folded = fold_summaries([s, s])
    dc, one = folded.device_classes, s.device_classes
    assert dc.by_class_us == pytest.approx({c: 2 * us for c, us in one.by_class_us.items()})
    assert dc.outside_ops_us == pytest.approx({c: 2 * us for c, us in one.outside_ops_us.items()})
    assert dc.graph_us == pytest.approx(2 * one.graph_us) and dc.share("gemm") == pytest.approx(one.share("gemm"))
    run = fold_diagnoses([d, d], window_indexes=[0, 1], summary=folded)
    found = [f for f in run.findings if f.rule == "device_time_by_class"]
    assert len(found) == 1 and found[0].subject == "gemm" and found[0].evidence["windows"] == 2
    assert found[0].evidence["device_us"] == pytest.approx(2 * d.finding("device_time_by_class").evidence["device_us"])
    assert found[0].message == d.finding("device_time_by_class").message  # the same shares, the same words


def test_a_summary_saved_before_the_classes_loads_and_renders():
    from neuronscope.analysis.fold import fold_summaries
    from neuronscope.analysis.summary import Summary
    from neuronscope.report.html import render_html

    s = _summary(SGLANG)
    saved = s.to_dict()
    assert saved["device_classes"]["by_class_us"] == s.device_classes.by_class_us
    del saved["device_classes"]  # what summary.json held before item 4
    old = Summary.from_dict(saved)
    assert old.device_classes is None and len(old) == len(s)
    assert "Device time by class" not in old.table() and "Device time by class: gemm 59%" in s.table()
    assert "class-chart" not in render_html(old) and 'id="class-chart-a"' in render_html(s)
    assert fold_summaries([old, s]).device_classes == s.device_classes  # the windows that have them


def test_show_and_the_report_say_the_classes():
    """`show` prints the split under the op table, `show --json` carries it, the report draws it."""
    import json

    from click.testing import CliRunner

    from neuronscope.cli import cli
    from neuronscope.report.html import render_html

    path = str(_corpus_file(SGLANG))
    kernels = _kernels(SGLANG)
    total = sum(k["dur"] for k in kernels)
    gemm = 100 * sum(k["dur"] for k in kernels if k["name"].startswith("Cijk_")) / total
    attention = 100 * sum(k["dur"] for k in kernels if "paged_attention" in k["name"]) / total
    result = CliRunner().invoke(cli, ["show", path, "--top", "3"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"Device time by class: gemm {gemm:.0f}% · attention {attention:.0f}% · " in result.output
    assert "99% launched outside any op" in result.output.replace("\n", " ")
    data = json.loads(CliRunner().invoke(cli, ["show", path, "--json"]).stdout)
    classes = data["device_classes"]
    assert classes["total_us"] == pytest.approx(total) and classes["by_class_us"]["gemm"] == pytest.approx(gemm * total / 100)
    assert list(classes["by_class_us"])[:2] == ["gemm", "attention"]
    html = render_html(_summary(SGLANG))
    bars = dict(re.findall(r'<rect class="class-bar"[^>]*data-class="(\w+)" data-us="([\d.]+)"', html))
    assert {c: float(us) for c, us in bars.items()} == pytest.approx(classes["by_class_us"], abs=1e-3)
    rows = re.findall(r'<tr data-class="(\w+)">', html)
    assert rows == list(classes["by_class_us"])
