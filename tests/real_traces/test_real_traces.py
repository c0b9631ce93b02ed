"""Real Kineto traces from public repositories (tests/data/real/README.md): each one loads,
is diagnosed, gets the device its lanes say, agrees with HolisticTraceAnalysis' busy % over
HTA's own window, and never counts more host-device syncs than the file has blocking calls.

The corpus lives outside the repository (see the README for why and where); without it these
tests skip, unless NEURONSCOPE_REQUIRE_REAL_TRACES=1.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import neuronscope as ns
from neuronscope.analysis.intervals import clip, union
from neuronscope.analysis.summary import summarize
from neuronscope.trace.kinds import EventKind

HERE = Path(__file__).resolve().parent
README = HERE.parent / "data" / "real" / "README.md"
FIGURES = json.loads((HERE.parent / "data" / "real" / "hta_figures.json").read_text())["figures"]
SHA256 = dict(
    (name, digest)
    for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", README.read_text(), flags=re.MULTILINE)
)
CORPUS = Path(os.environ.get("NEURONSCOPE_REAL_TRACES") or HERE.parents[2] / "shared" / "real-traces")

#: what the trace's lanes are, read by a person from each file (runtime names, deviceProperties,
#: process names)
DEVICE = {
    "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz": "rocm",
    "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": "cpu",
    "hta__mtia_inference_trace_mtia_inference_rank_0.json.gz": "mtia",
    "hta__mtia_trace_single_rank_mtia_rank_0.json.gz": "mtia",
    "tracelens__tests_traces_inference_sglang_decode_sglang_Qwen3-8B_decode.json.gz": "rocm",
    "tracelens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz": "rocm",
    "tracelens__tests_traces_mi300_resnet_act_checkpoint.json.gz": "rocm",
    "tracelens__tests_traces_torch_compile_triton_trace.json.gz": "rocm",
}
#: the files whose event set differs from HTA's, with the reason (README: "Busy % against HTA")
HTA_DIFFERS = {
    "hta__negative_queue_length_values_check_rank0.json.gz": "HTA drops GPU work launched outside profiler steps",
    "hta__triton_example_triton_example.json.gz": "HTA counts a cpu_op with a stream argument as GPU work",
    "tracelens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz": (
        "HTA truncates ts and dur to whole microseconds: on 434 device ops of a few us each the device loses "
        "~1 us per op (99.8% exact, 97.5% truncated, HTA 95.7%)"
    ),
}
#: torch 1.8-1.10: capitalised categories
OLD_FORMAT = [n for n in SHA256 if n.startswith("kineto__")]

# what blocks the host, read from the raw file with plain patterns (independent of the code under test)
_BLOCKING = re.compile(r"Synchronize|^(?:cuda|hip|cu)Memcpy(?!\w*Async)\w*$|^(?:cuda|hip)Memset(?:2D|3D)?$")
_ASYNC_COPY = re.compile(r"Memcpy\w*Async")
_VALUE_READS = {
    "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
    "aten::allclose", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::tolist",
}


def _corpus_file(name: str) -> Path:
    path = CORPUS / name
    if not path.is_file():
        if os.environ.get("NEURONSCOPE_REQUIRE_REAL_TRACES") == "1":
            pytest.fail(f"real-trace corpus missing {path} (NEURONSCOPE_REAL_TRACES={os.environ.get('NEURONSCOPE_REAL_TRACES')})")
        pytest.skip(f"real-trace corpus not here ({CORPUS}); see tests/data/real/README.md")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SHA256[name], f"{path} is not the file the README names (sha256 {digest})"
    return path


def _raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_the_readme_names_every_file_with_hta_figures():
    assert len(SHA256) >= 14
    assert set(FIGURES) == set(SHA256)


@pytest.mark.parametrize("name", sorted(SHA256))
def test_loads_and_is_diagnosed_with_the_device_its_lanes_say(name):
    path = _corpus_file(name)
    trace = ns.load_trace(path)
    diagnosis = ns.diagnose(path)
    assert trace.device == DEVICE.get(name, "cuda")
    assert diagnosis.device == trace.device
    assert trace.count(EventKind.OP) > 0
    if trace.device != "cpu":
        assert trace.count(EventKind.DEVICE) > 0
        assert diagnosis.timeline == "device"
    assert diagnosis.window_us > 0 and diagnosis.bound_by != "none"
    assert 0.0 <= diagnosis.device_busy_pct <= 100.0
    str(diagnosis)  # renders


@pytest.mark.parametrize("name", sorted(n for n in SHA256 if "busy_pct" in FIGURES[n]))
def test_busy_percent_agrees_with_hta_over_htas_window(name):
    path = _corpus_file(name)
    trace = ns.load_trace(path)
    hta = FIGURES[name]
    lo = round(hta["window_start_us"] * 1000) + trace.base_time_ns
    hi = round(hta["window_end_us"] * 1000) + trace.base_time_ns
    device = trace.kind == EventKind.DEVICE
    s, e = union(trace.start_ns[device], (trace.start_ns + trace.duration_ns)[device])
    s, e = clip(s, e, lo, hi)
    ours = 100.0 * float((e - s).sum()) / (hi - lo)
    if name == "hta__negative_queue_length_values_check_rank0.json.gz":
        assert ours >= hta["busy_pct"] - 0.5, HTA_DIFFERS[name]
    elif name == "hta__triton_example_triton_example.json.gz":
        assert trace.count(EventKind.DEVICE) == 1, HTA_DIFFERS[name]
    elif name == "tracelens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz":
        # the same union over HTA's window with the file's times truncated as HTA reads them
        ev = [e for e in _raw_events(path) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        t_lo, t_hi = hta["window_start_us"], hta["window_end_us"]
        ts, te = union(np.array([int(e["ts"]) for e in ev]), np.array([int(e["ts"]) + int(e["dur"]) for e in ev]))
        ts, te = clip(ts, te, int(t_lo), int(t_hi))
        truncated = 100.0 * float((te - ts).sum()) / (t_hi - t_lo)
        assert truncated == pytest.approx(hta["busy_pct"], abs=3.0), HTA_DIFFERS[name]
        assert ours > truncated > hta["busy_pct"], HTA_DIFFERS[name]
    else:
        assert ours == pytest.approx(hta["busy_pct"], abs=3.0)


@pytest.mark.parametrize("name", sorted(SHA256))
def test_no_more_syncs_than_the_file_has_blocking_calls(name):
    path = _corpus_file(name)
    events = [e for e in _raw_events(path) if e.get("ph") == "X"]
    blocking = sum(1 for e in events if _BLOCKING.search(e.get("name", "")) and "runtime" in str(e.get("cat", "")).lower())
    copies = sum(1 for e in events if _ASYNC_COPY.search(e.get("name", "")))
    reads = sum(1 for e in events if e.get("name") in _VALUE_READS)
    diagnosis = ns.diagnose(path)
    finding = diagnosis.finding("sync_in_loop")
    syncs = finding.evidence["syncs"] if finding else 0
    assert syncs <= blocking + copies + reads
    if finding is None:
        return
    # every op it names held a blocking call or is a value read: never a poll alone
    for op in finding.evidence["by_op"]:
        assert op in _VALUE_READS or not op.startswith("Cudnn"), op


def test_polls_are_not_syncs_on_the_resnet_style_training_trace():
    """The trace that read as "504 host-device syncs (100.8 per step) — CudnnBatchNormBackward0
    ×164": its only blocking call is one cudaDeviceSynchronize; the rest are cudaEventQuery polls."""
    name = "hta__ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    path = _corpus_file(name)
    names = [e.get("name", "") for e in _raw_events(path) if e.get("ph") == "X"]
    assert names.count("cudaEventQuery") > 100 and names.count("cudaDeviceSynchronize") == 1
    diagnosis = ns.diagnose(path)
    assert diagnosis.finding("sync_in_loop") is None
    assert diagnosis.idle_us_by_class["sync"] < 0.01 * diagnosis.device_idle_us
    assert diagnosis.bound_by != "sync"


@pytest.mark.parametrize("name", OLD_FORMAT)
def test_torch_1_9_traces_read_with_ops_steps_and_device_time(name):
    path = _corpus_file(name)
    trace = ns.load_trace(path)
    summary = summarize(trace)
    assert trace.device == "cuda"
    assert trace.count(EventKind.OP) > 10_000 and trace.count(EventKind.DEVICE) > 8_000
    # kernels link to the ops that launched them through the lowercase "external id"
    assert summary.rows and summary.rows[0].device_time_us > 0
    assert any(r.name.startswith("aten::") for r in summary.rows[:10])
    # torch's own annotations of that era ("ProfilerStep#5", "Optimizer.step#SGD.step") are
    # regions and steps, not operators
    diagnosis = ns.diagnose(path)
    assert diagnosis.steps is not None and diagnosis.steps.name == "ProfilerStep"
    assert not any(r.name.startswith("ProfilerStep#") for r in summary.rows)
    # V100 (compute capability 7.0): float16 tensor cores, no bfloat16
    fp32 = diagnosis.finding("fp32_matmul")
    if fp32 is not None:
        assert "float16" in fp32.message and "bf16-native" not in fp32.message


def test_amd_and_mtia_busy_is_measured_on_their_own_lanes():
    amd = ns.diagnose(_corpus_file("hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    mtia = ns.diagnose(_corpus_file("hta__mtia_inference_trace_mtia_inference_rank_0.json.gz"))
    assert amd.device == "rocm" and mtia.device == "mtia"
    assert mtia.device_busy_pct > 50  # its device lanes are busy; as "cpu" it read 7%
    assert "rocm busy" in str(amd) and "mtia busy" in str(mtia)
