"""Matrix-unit precision and shape rules; they need ``record_shapes=True``.

``fp32_matmul``
    a matmul/convolution ran in float32 on Neuron or CUDA. Trainium's tensor engine and
    Ampere+ GPUs are bf16-native; float32 runs at a fraction of their speed. Time at stake:
    half of those ops' device time (bf16 throughput is at least 2x).
``matmul_dims_unaligned``
    torch's ``MatMulDimInFP16Pattern``: a bf16/fp16 ``mm``/``bmm``/``addmm`` with one of the
    last two dims of an input not a multiple of 8. Time at stake: a quarter of their device
    time (an estimate: padding recovers the fast path).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....trace.kinds import EventKind
from ..locations import source_of
from ..timeline import launcher_positions
from . import Context, MessageContext, rule

_MATMUL = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear"})
_CONV = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution"})
_FLOAT32 = {"float", "float32", "c10::float"}
_HALF = {"c10::BFloat16", "c10::Half", "bfloat16", "half", "BFloat16", "Half", "float16"}


def device_ns_by_op(ctx: Context) -> dict[int, int]:
    """Device time launched by each op position (its own kernels)."""
    trace = ctx.trace
    dev = np.flatnonzero(trace.kind == EventKind.DEVICE)
    launcher = launcher_positions(trace, dev)
    out: dict[int, int] = {}
    for pos, d in zip(launcher.tolist(), trace.duration_ns[dev].tolist()):
        if pos >= 0:
            out[pos] = out.get(pos, 0) + d
    return out


def _inputs(ctx: Context, names: frozenset[str]) -> dict[int, tuple[list, list]]:
    trace = ctx.trace
    return {p: v for p, v in trace.inputs.items() if trace.names[int(trace.name_id[p])] in names}


def _fp32_message(ev: dict[str, Any], words: MessageContext) -> str:
    at = f" at {ev['locations'][0]}" if ev.get("locations") else ""
    return f"{ev['calls']} float32 {'/'.join(n.removeprefix('aten::') for n in ev['ops'])} calls{at}: {ev['advice']}"


@rule(
    "fp32_matmul",
    message=_fp32_message,
    adds=("calls", "device_time_us"),
    model="precision: half the fp32 matmuls' device time (bf16 at least 2x as fast)",
)
def fp32_matmul(ctx: Context) -> list:
    if ctx.device not in ("neuron", "cuda", "rocm"):
        return []
    trace = ctx.trace
    heavy = _MATMUL | _CONV
    present = any(n in heavy for n in trace.names)
    if not present:
        return []
    recorded = _inputs(ctx, heavy)
    if not recorded:
        ctx.note("matmul/conv precision not checked: profile with record_shapes=True")
        return []
    dev_by_op = device_ns_by_op(ctx)
    hits = [p for p, (_, dtypes, *_) in recorded.items() if dtypes and str(dtypes[0]) in _FLOAT32]
    if not hits:
        return []
    dev_ns = inclusive_total(ctx, hits, dev_by_op)
    names = sorted({trace.names[int(trace.name_id[p])] for p in hits})
    where = source_of(trace, np.array(hits, dtype=np.int64), limit=2)
    return [
        ctx.finding(
            "fp32_matmul",
            None,
            dev_ns / 2e3,
            {
                "calls": len(hits),
                "ops": names,
                "device_time_us": round(dev_ns / 1e3, 3),
                "locations": where,
                "advice": _precision_advice(ctx),
            },
            host_side=False,
        )
    ]


def _precision_advice(ctx: Context) -> str:
    """What to use instead of float32 on this chip: bf16 on Trainium, AMD CDNA and Ampere+;
    fp16 on Volta/Turing (compute capability 7.x: fp16 tensor cores, no bf16)."""
    if ctx.device == "neuron":
        return "Trainium's tensor engine is bf16-native — use bfloat16 (torch.autocast('neuron', dtype=torch.bfloat16) or model.to(torch.bfloat16))"
    props = ctx.trace.metadata.get("deviceProperties") or []
    majors = [m for d in props if isinstance(d, dict) and isinstance(m := d.get("computeMajor"), int)]
    if ctx.device == "cuda" and majors and max(majors) < 8:
        return (
            "this GPU (compute capability 7.x) has float16 tensor cores but no bfloat16 — use mixed precision "
            "(torch.autocast('cuda', dtype=torch.float16) with a GradScaler for training)"
        )
    cores = "matrix cores" if ctx.device == "rocm" else "tensor cores"
    return f"the GPU's {cores} are bf16-native — use bfloat16 (torch.autocast('cuda', dtype=torch.bfloat16) or model.to(torch.bfloat16))"


def inclusive_total(ctx: Context, positions: list[int], dev_by_op: dict[int, int]) -> int:
    """Device time of the ops at ``positions`` and of the ops nested in them."""
    trace = ctx.trace
    if not dev_by_op:
        return 0
    pos = np.array(sorted(dev_by_op), dtype=np.int64)
    ns = np.array([dev_by_op[int(p)] for p in pos], dtype=np.int64)
    total = 0
    for t in set(int(trace.thread[p]) for p in positions):
        sel = trace.thread[pos] == t
        starts = trace.start_ns[pos[sel]]
        order = np.argsort(starts, kind="stable")
        starts, cum = starts[order], np.concatenate(([0], np.cumsum(ns[sel][order])))
        for p in positions:
            if int(trace.thread[p]) != t:
                continue
            lo = np.searchsorted(starts, trace.start_ns[p], side="left")
            hi = np.searchsorted(starts, trace.start_ns[p] + trace.duration_ns[p], side="right")
            total += int(cum[hi] - cum[lo])
    return total


def _unaligned_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"{ev['calls']} half-precision matmuls with a dimension not a multiple of 8 (e.g. inputs {ev['example_shapes']}): "
        "pad the dimensions to multiples of 8"
    )


@rule(
    "matmul_dims_unaligned",
    message=_unaligned_message,
    adds=("calls", "device_time_us"),
    model="padding: a quarter of the unaligned matmuls' device time",
)
def matmul_dims_unaligned(ctx: Context) -> list:
    trace = ctx.trace
    recorded = _inputs(ctx, frozenset({"aten::mm", "aten::bmm", "aten::addmm"}))
    hits = []
    for p, (shapes, dtypes, *_) in recorded.items():
        if not dtypes or str(dtypes[0]) not in _HALF:
            continue
        for shape in shapes:
            if isinstance(shape, (list, tuple)) and len(shape) >= 2 and any(int(d) % 8 for d in shape[-2:]):
                hits.append(p)
                break
    if not hits:
        return []
    dev_by_op = device_ns_by_op(ctx)
    dev_ns = sum(dev_by_op.get(p, 0) for p in hits) or int(trace.duration_ns[hits].sum())
    example = recorded[hits[0]][0]
    return [
        ctx.finding(
            "matmul_dims_unaligned",
            None,
            dev_ns / 4e3,
            {"calls": len(hits), "example_shapes": example, "device_time_us": round(dev_ns / 1e3, 3)},
            host_side=False,
        )
    ]
