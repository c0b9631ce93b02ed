"""Device time by class: GEMM, convolution, attention, norm, softmax, elementwise, reduction,
embedding, copy, communication — from the op that launched each kernel, else the kernel's name.

A kernel launched by an op takes the op's class (:data:`OP_CLASSES`: the work models' families,
:mod:`..trace.op_families`, and the wrappers and data-movement ops around them: ``aten::linear``,
``aten::cudnn_convolution``, ``aten::cat``...). A kernel launched outside any op (a CUDA/HIP graph
replay, a communication thread) or by an op of no class (``vllm::moe_forward``, a custom extension)
takes the class its name says (:func:`kernel_class`, the table :data:`KERNEL_PATTERNS`, built on the
kernel names of the real-trace corpus and the libraries' naming schemes). What neither names is
``other``. On a CPU-only profile the op time is the device time: each op's self time takes the op's
class (or its name's: Inductor's ``cpp_fused_...`` kernels).

Classified is not modelled: a roofline needs a kernel's sizes, and a graph replay records its
kernels' names, grids and blocks but not the shapes of the ops that captured them. Tile sizes in a
name (``MT256x32x64``, ``128x128``) are the kernel's, not the problem's: no work is read from them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..trace import op_families as fam

if TYPE_CHECKING:
    from ..trace.model import Trace

__all__ = [
    "CLASSES",
    "CLASS_WORDS",
    "DeviceClasses",
    "KERNEL_PATTERNS",
    "OP_CLASSES",
    "device_classes",
    "kernel_class",
    "op_class",
    "outside_ops_reason",
    "pct_text",
]

#: every class, in the order tables list them when their times tie
CLASSES = (
    "gemm",
    "conv",
    "attention",
    "norm",
    "softmax",
    "elementwise",
    "reduction",
    "embedding",
    "copy",
    "communication",
    "other",
)
#: what each class is, in words
CLASS_WORDS = {
    "gemm": "GEMM (matrix multiply)",
    "conv": "convolution",
    "attention": "attention",
    "norm": "normalisation (layer/RMS/batch/group norm)",
    "softmax": "softmax",
    "elementwise": "elementwise",
    "reduction": "reduction (sum, mean, max, pooling)",
    "embedding": "embedding lookup",
    "copy": "copy (memcpy, memset, layout, gather/scatter)",
    "communication": "communication (collectives)",
    "other": "unclassified",
}


def _ops(*names: str) -> frozenset[str]:
    return frozenset("aten::" + n for n in " ".join(names).split())


#: op name -> class: the work models' families, then the wrappers and the ops no model covers
OP_CLASSES: dict[str, str] = {
    **{n: "gemm" for n in fam.GEMM | _ops("linear matmul mv addmv addbmm dot vdot _int_mm _addmm_activation")},
    **{
        n: "conv"
        for n in fam.CONV
        | fam.CONV_BACKWARD
        | _ops(
            "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d _convolution_mode "
            "cudnn_convolution cudnn_convolution_transpose miopen_convolution miopen_depthwise_convolution "
            "miopen_convolution_transpose mkldnn_convolution _slow_conv2d_forward _slow_conv2d_backward "
            "thnn_conv2d slow_conv_transpose2d"
        )
    },
    **{n: "attention" for n in fam.ATTENTION},
    **{
        n: "norm"
        for n in fam.NORM
        | fam.NORM_BACKWARD
        | _ops(
            "layer_norm group_norm instance_norm batch_norm _batch_norm_impl_index _batch_norm_impl_index_backward "
            "cudnn_batch_norm cudnn_batch_norm_backward miopen_batch_norm miopen_batch_norm_backward "
            "native_batch_norm_backward batch_norm_backward _fused_rms_norm_backward"
        )
    },
    **{n: "softmax" for n in fam.SOFTMAX | fam.SOFTMAX_BACKWARD | _ops("softmax log_softmax _safe_softmax")},
    **{
        n: "elementwise"
        for n in fam.ELEMENTWISE
        | _ops("dropout native_dropout native_dropout_backward _fused_adam_ _fused_adamw_ _fused_sgd_ _fused_dropout")
    },
    **{
        n: "reduction"
        for n in frozenset(fam.REDUCTION)
        | _ops(
            "max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices avg_pool1d avg_pool2d "
            "avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d _adaptive_avg_pool2d "
            "_adaptive_avg_pool3d adaptive_max_pool2d max_pool2d_with_indices_backward avg_pool2d_backward "
            "_adaptive_avg_pool2d_backward _foreach_norm"
        )
    },
    **{n: "embedding" for n in fam.EMBEDDING | _ops("embedding_backward embedding_bag _embedding_bag_backward")},
    **{
        n: "copy"
        for n in fam.FILL
        | fam.COPY
        | _ops(
            "to _to_copy clone contiguous cat stack index index_put_ _index_put_impl_ gather scatter scatter_ "
            "scatter_add scatter_add_ zeros ones full zeros_like ones_like full_like new_zeros new_ones new_full "
            "constant_pad_nd pad repeat flip roll narrow_copy _copy_from _copy_from_and_resize _foreach_copy_ "
            "masked_scatter_ masked_select"
        )
    },
}
#: op-name prefixes of collectives (c10d, functional collectives, symmetric memory, Kineto's record)
_COMMUNICATION_OPS = ("c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:", "record_param_comms", "symm_mem::")
#: op-name prefixes of the backends' convolutions and their gradients (cudnn_convolution_backward_weight...)
_CONV_OPS = tuple(
    "aten::" + n
    for n in "cudnn_convolution miopen_convolution miopen_depthwise_convolution mkldnn_convolution slow_conv thnn_conv "
    "_slow_conv convolution_backward".split()
)


@functools.lru_cache(maxsize=8192)
def op_class(name: str) -> str | None:
    """The class of the op ``name`` (None: no class; the kernels it launches are classified by
    their own names)."""
    found = OP_CLASSES.get(name)
    if found is not None:
        return found
    if name.startswith(_COMMUNICATION_OPS):
        return "communication"
    if name.startswith(_CONV_OPS):
        return "conv"
    if name.startswith("aten::_foreach_"):  # the optimizers' multi-tensor ops (_foreach_add_, _mul_...)
        return "elementwise"
    return None


def outside_ops_reason(name: str) -> str:
    """Why a kernel launched outside any op has no work: nothing in the trace gives its sizes."""
    cls = kernel_class(name)
    what = f"{cls} kernel" if cls != "other" else "kernel"
    return f"{what} launched outside any op: the trace records no sizes for it (a graph replay keeps no shapes)"


def _p(pattern: str) -> re.Pattern[str]:
    # matched against the lower-cased name: 2-3x faster than re.IGNORECASE on kernel names of 1,000 characters
    return re.compile(pattern.lower())


#: (class, pattern) in order, the first that matches a kernel's name wins (case-insensitive, searched
#: anywhere in the name without its parameter list). The order settles the names that say two things:
#: ``reshape_and_cache_flash_kernel`` writes the KV cache (copy) before ``flash`` says attention,
#: ``paged_attention_ll4mi_reduce_kernel`` is attention before ``reduce``, ``implicit_convolve_sgemm``
#: a convolution before ``gemm``, ``rotary_embedding_kernel`` elementwise before ``embedding``.
KERNEL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # NCCL/RCCL (ncclDevKernel_Generic, ncclKernel_AllReduce_RING_LL_Sum_float), MSCCL, vLLM's custom
    # all-reduce (cross_device_reduce_1stage), torch symmetric memory (multimem_all_reduce_kernel)
    (
        "communication",
        _p(
            r"nccl|rccl|msccl|(?<![a-z])all_?reduce|(?<![a-z])all_?gather|reduce_?scatter|(?<![a-z])all_?to_?all"
            r"|multimem|cross_device_reduce|quick_?reduce|custom_?all_?reduce|symm_?mem"
        ),
    ),
    # the runtime's copies and fills (Kineto: "Memcpy HtoD (Pinned -> Device)", "Memset (Device)"),
    # torch's copy kernels, KV-cache writes, layout transforms (cuDNN nchwToNhwc, MIOpen batched_transpose)
    (
        "copy",
        _p(
            r"memcpy|memset|direct_copy|CatArrayBatchedCopy|reshape_and_cache|store_kvcache|nchwToNhwc|nhwcToNchw"
            r"|batched_transpose|_copy_page|copy_kernel|Copy<|CopyFunctor|dma_request"
        ),
    ),
    # flash attention (flash_fwd_kernel, flash_bwd_*), fmha (cuDNN/TensorRT-LLM fmhaSm100a*, CUTLASS
    # fmha), paged/unified attention (vLLM, aiter, SGLang), Triton's attn_fwd, NKI flash_fwd/attention_*
    (
        "attention",
        _p(
            r"attention|attn|flash_?fwd|flash_?bwd|fmha|(?<![a-z])mha_|sdpa|flashinfer|xformers|_fwd_kernel_stage"
            r"|mla_decode|decode_mla"
        ),
    ),
    # layer/RMS/batch/group norm: torch (vectorized_layer_norm_kernel, batch_norm_*), cuDNN (bn_fw_*,
    # bn_bw_*), apex (cuApplyLayerNorm), vLLM (rms_norm_kernel), aiter (add_rmsnorm_quant_kernel),
    # CK tile (Rmsnorm2dFwd, Layernorm2dFwd), MIOpen (MIOpenBatchNormFwdTrain*)
    (
        "norm",
        _p(
            r"(?:layer|rms|batch|group|instance)_?norm|(?<![a-z])bn_(?:fw|bw)|cuApplyLayerNorm|cuComputeGradInput"
            r"|GammaBetaBackward|RowwiseMoments"
        ),
    ),
    ("softmax", _p(r"softmax")),
    # cuDNN/MIOpen convolutions: implicit GEMM (xmma fprop/dgrad/wgrad, implicit_convolve_sgemm),
    # Winograd, FFT (fft2d_r2c), scudnn tiles, CUTLASS ImplicitGemmConvolution, CK bwd_weight/bwd_data
    (
        "conv",
        _p(
            r"convol|conv_?[123]d|naive_conv|implicit_?gemm|implicit_convolve|scudnn|(?<![a-z])fprop|dgrad|wgrad"
            r"|winograd|fft2d_|igemm|bwd_weight|bwd_data|miopen\w*conv|sp3asmconv"
        ),
    ),
    # fbgemm's embedding kernels (split_embedding_*, whose library name holds "gemm"), EmbeddingBag;
    # RoPE first: rotary_embedding_kernel is elementwise
    ("elementwise", _p(r"rotary|(?<![a-z])rope(?![a-z])")),
    (
        "embedding",
        _p(
            r"embedding|split_eb|embedding_?bag|permute_pooled_embs|(?<![a-z])tbe_|bounds_check_indices|linearize_index"
            r"|bucketize_sparse_features"
        ),
    ),
    # MoE finalize kernels sum each token's experts (moe::dev::finalize, Triton _finalize_matmul_scatter)
    ("reduction", _p(r"finali[sz]e")),
    # cuBLAS/cuBLASLt (sm90_xmma_gemm_*, ampere_sgemm_*, volta_h884gemm_*, nvjet_*, gemv2T_kernel,
    # gemmSN_*, splitKreduce_kernel), hipBLASLt/Tensile (Cijk_Alik_Bljk_*), CUTLASS (cutlass::Kernel
    # <cutlass_80_tensorop_s1688gemm_*>), CK (kernel_gemm_xdl*), aiter (fmoe_*, ck_moe), vLLM ROCm
    # skinny GEMMs (wvSplitK, LLGemm), TensorRT-LLM gen (bmm_E4m3_*), Triton matmuls (_matmul_ogs_*,
    # matmul_kernel, fused_moe_kernel), NKI (nki_matmul_*), MTIA (fc-dtype_*, batch_matmul-*)
    (
        "gemm",
        _p(
            r"^Cijk_|_Cijk_|(?<!fb)gemm|gemv|nvjet|cublas|(?<![a-z])bmm_|matmul|(?<![a-z])mm_kernel|fused_moe|(?<![a-z])fmoe"
            r"|ck_moe|wvSplitK|splitKreduce|epilogue::impl|^fc-"
        ),
    ),
    # the rest of data movement: transposes, permutes, gathers/scatters, fills, pads, concatenation
    (
        "copy",
        _p(
            r"transpose|permute|gather|scatter|index_?select|index_elementwise|FillFunctor|fill_kernel|constant_pad"
            r"|concat|cat_array|im2col|col2im|CastTensor|(?<![a-z])copy(?![a-z])"
        ),
    ),
    # torch's reduce_kernel and ReduceOp, cub's DeviceReduce/DeviceScan, argmax, cumsum, vector norms,
    # pooling (a windowed reduction), MTIA's reduce_sum
    (
        "reduction",
        _p(r"reduce|reduction|argmax|argmin|cumsum|DeviceScan|(?<![a-z])scan|vector_norm|L2Norm|pool"),
    ),
    # torch's elementwise kernels (vectorized_/unrolled_elementwise_kernel, elementwise_kernel), optimizer
    # multi-tensor kernels, activations (act_and_mul, silu_and_mul), (de)quantisation, dropout, RNG
    (
        "elementwise",
        _p(
            r"elementwise|multi_tensor_apply|act_and_mul|silu|gelu|relu|swiglu|sigmoid|tanh|quant|dropout|clamp"
            r"|(?<![a-z])fp8|qparam|scalePackedTensor|SubTensorOp|(?<![a-z])scal_kernel"
            r"|(?<![a-z])(?:add|sub|mul|div|divide|log2?|exp|neg|clip|eq_kernel|threshold_backward|nan_to_num)[-_.]"
            r"|customized_\w*mul"
        ),
    ),
)

#: Inductor's generated kernels: ``triton_{poi,per,red,tem,for}_fused_<ops>_<n>``, ``cpp_fused_<ops>_<n>``
_INDUCTOR = re.compile(r"(?:^|_)(?:triton_(poi|per|red|tem|for)|cpp)_fused_?(\w*?)(?:_\d+)?$")
#: ops that only move data: a pointwise kernel made of these alone is a copy
_COPY_OPS = re.compile(
    r"(?:^|(?<=_))_?(?:to_copy|clone|copy|cat|constant_pad_nd|unsafe_view|view|permute|transpose|select|slice|index"
    r"|gather|fill|zeros|full|expand|squeeze|unsqueeze|reshape|stack|repeat|alias|as_strided|t)(?=_|$)"
)


def _inductor_class(kind: str | None, ops: str) -> str:
    """The class of an Inductor kernel from the ops it fused (its name lists them)."""
    if re.search(r"native_(?:layer|group|batch)_norm|rms_norm|rsqrt.*(?:mean|var)|(?:mean|var).*rsqrt", ops):
        return "norm"
    if "softmax" in ops:
        return "softmax"
    if kind == "tem":  # a template: mm/addmm/bmm, convolution, flex attention
        return "attention" if "attention" in ops else "conv" if "convolution" in ops else "gemm"
    if "embedding" in ops:
        return "embedding"
    if kind in ("red", "per"):
        return "reduction"
    left = _COPY_OPS.sub("", ops)
    return "copy" if ops and not left.strip("_0123456789") else "elementwise"


@functools.lru_cache(maxsize=8192)
def kernel_class(name: str) -> str:
    """The class a device kernel's name says (``other`` when it says none of them)."""
    if name.startswith("aten::"):  # a device lane named after the op (MTIA: "aten::mul.out-dtype_Float")
        op = op_class(re.split(r"[.\-]", name, maxsplit=1)[0])
        if op is not None:
            return op
    head = name if name.startswith("_Z") else _without_parameters(name)
    m = _INDUCTOR.search(head)
    if m is not None:
        return _inductor_class(m.group(1), m.group(2) or "")
    low = head.lower()
    for cls, pattern in KERNEL_PATTERNS:
        if pattern.search(low):
            return cls
    return "other"


def _without_parameters(name: str) -> str:
    """``void ns::k<Copy<long>>(float*, int)`` -> ``void ns::k<Copy<long>>``: a demangled kernel's
    parameter types (``LoadWithoutCast``...) say nothing of what it does. The list is the balanced
    group of parentheses that ends the name (``(anonymous namespace)`` before it stays). A mangled
    ``_Z`` name is searched whole: its identifiers are there verbatim."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        if name[i] == ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
            if depth == 0:
                return name[:i]
    return name


def pct_text(pct: float) -> str:
    """A share as people read it: ``59%``, ``<1%`` for a little, ``99.9%`` short of all."""
    if 0 < pct < 0.5:
        return "<1%"
    if 99.5 <= pct < 100:
        return f"{min(pct, 99.9):.1f}%"
    return f"{pct:.0f}%"


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _ordered(by: dict[str, float]) -> dict[str, float]:
    """Most time first, ties in :data:`CLASSES` order; classes without time dropped."""
    rank = {c: i for i, c in enumerate(CLASSES)}
    return {k: v for k, v in sorted(by.items(), key=lambda kv: (-kv[1], rank.get(kv[0], len(rank)))) if v > 0}


@dataclass(frozen=True)
class DeviceClasses:
    """A profile's device time by class (µs), and how each part was classified.

    ``by_class_us`` sums to the summary's device time (``other``: what neither an op nor a kernel
    name classifies). ``by_op_us`` is the part classified by the op that launched it, the rest by
    the kernel's name; ``outside_ops_us`` the part launched outside any op (no row of the op table
    is an op for it, and no roofline can see it); ``graph_us`` the device time a graph replay
    launched (``cudaGraphLaunch``/``hipGraphLaunch``: its kernels carry no op and no sizes)."""

    by_class_us: dict[str, float] = field(default_factory=dict)
    by_op_us: dict[str, float] = field(default_factory=dict)
    outside_ops_us: dict[str, float] = field(default_factory=dict)
    graph_us: float = 0.0

    @property
    def total_us(self) -> float:
        return sum(self.by_class_us.values())

    @property
    def classified_us(self) -> float:
        return self.total_us - self.by_class_us.get("other", 0.0)

    def pct(self, us: float) -> float:
        """``us`` as a share (%) of the device time."""
        total = self.total_us
        return 100.0 * us / total if total > 0 else 0.0

    @property
    def classified_pct(self) -> float:
        return self.pct(self.classified_us)

    def share(self, cls: str) -> float:
        """The class's share (%) of the device time."""
        return self.pct(self.by_class_us.get(cls, 0.0))

    @property
    def dominant(self) -> str | None:
        """The classified class with the most time (None: nothing classified)."""
        return next((c for c in self.by_class_us if c != "other"), None)

    def line(self, max_classes: int = 6, sep: str = " · ") -> str:
        """``gemm 59% · attention 22% · norm 7% · other <1%``."""
        parts = [f"{c} {pct_text(self.share(c))}" for c in list(self.by_class_us)[:max_classes]]
        rest = len(self.by_class_us) - max_classes
        return sep.join(parts) + (f"{sep}+{rest} more" if rest > 0 else "")

    def combine(self, other: "DeviceClasses") -> "DeviceClasses":
        """Both profiles' device time (the windows of one run)."""
        return DeviceClasses(
            _ordered(_add(self.by_class_us, other.by_class_us)),
            _ordered(_add(self.by_op_us, other.by_op_us)),
            _ordered(_add(self.outside_ops_us, other.outside_ops_us)),
            self.graph_us + other.graph_us,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "by_class_us": dict(self.by_class_us),
            "by_op_us": dict(self.by_op_us),
            "outside_ops_us": dict(self.outside_ops_us),
            "graph_us": self.graph_us,
            "total_us": self.total_us,
            "classified_pct": self.classified_pct,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeviceClasses":
        def us(key: str) -> dict[str, float]:
            return _ordered({str(k): float(v) for k, v in (data.get(key) or {}).items()})

        return cls(us("by_class_us"), us("by_op_us"), us("outside_ops_us"), float(data.get("graph_us") or 0.0))


def device_classes(trace: "Trace", rows: Any = ()) -> DeviceClasses:
    """The device time of ``trace`` by class. On a CPU-only trace, from ``rows`` (the summary's
    :class:`~.summary.OpStats`: each op's self device time, which is its CPU time there)."""
    if trace.device == "cpu":
        by: dict[str, float] = {}
        by_op: dict[str, float] = {}
        for r in rows:
            cls = op_class(r.name)
            if cls is not None:
                by_op[cls] = by_op.get(cls, 0.0) + r.self_device_time_us
            elif not r.name.startswith("aten::"):  # Inductor's cpp_fused_... kernels, custom ops
                cls = kernel_class(r.name)
            # an aten op of no class (a view, an allocation, aten::topk) is none of them: not its name's
            by[cls or "other"] = by.get(cls or "other", 0.0) + r.self_device_time_us
        return DeviceClasses(_ordered(by), _ordered(by_op))
    return _kernel_classes(trace)


def _kernel_classes(trace: "Trace") -> DeviceClasses:
    """Each device event by its launching op's class, else its own name's (:mod:`.launches`)."""
    import numpy as np

    from .launches import device_launches

    launches = device_launches(trace)
    dev, op = launches.device, launches.op
    if not dev.size:
        return DeviceClasses()
    index = {c: i for i, c in enumerate(CLASSES)}
    op_table = np.full(len(trace.names) or 1, -1, dtype=np.int64)
    for nid in np.unique(trace.name_id[op[op >= 0]]).tolist():
        found = op_class(trace.names[nid])
        op_table[nid] = index[found] if found is not None else -1
    by_op = np.where(op >= 0, op_table[trace.name_id[np.maximum(op, 0)]], -1)
    kernel_table = np.zeros(len(trace.names) or 1, dtype=np.int64)
    for nid in np.unique(trace.name_id[dev]).tolist():
        kernel_table[nid] = index[kernel_class(trace.names[nid])]
    class_of = np.where(by_op >= 0, by_op, kernel_table[trace.name_id[dev]])
    us = trace.duration_ns[dev].astype(np.float64) / 1e3

    def per_class(mask: Any) -> dict[str, float]:
        sums = np.bincount(class_of[mask], weights=us[mask], minlength=len(CLASSES))
        return _ordered({c: float(sums[i]) for i, c in enumerate(CLASSES)})

    runtime = launches.runtime
    graph_name = np.zeros(len(trace.names) or 1, dtype=bool)  # cudaGraphLaunch, hipGraphLaunch
    for nid in np.unique(trace.name_id[runtime[runtime >= 0]]).tolist():
        graph_name[nid] = "GraphLaunch" in trace.names[nid]
    graph = (runtime >= 0) & graph_name[trace.name_id[np.maximum(runtime, 0)]]
    return DeviceClasses(
        per_class(np.ones(dev.size, dtype=bool)),
        per_class(by_op >= 0),
        per_class(op < 0),
        float(us[graph].sum()),
    )
