"""The op families the work models cover (:mod:`neuronscope.analysis.work`), by name.

The trace readers keep the recorded inputs (``Input Dims``, ``Input type``) of exactly these ops,
and the scalar arguments (``Concrete Inputs``) of the ones whose models read them: stride and
padding, the causal flag, the reduced dims.
"""

from __future__ import annotations

GEMM = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})
CONV = frozenset({"aten::convolution", "aten::_convolution"})
CONV_BACKWARD = frozenset({"aten::convolution_backward"})
#: attention op -> (layout, index of is_causal (or custom_mask_type), backward)
ATTENTION: dict[str, tuple[str, int, bool]] = {
    "aten::scaled_dot_product_attention": ("bhsd", 5, False),
    "aten::_scaled_dot_product_attention_math": ("bhsd", 5, False),
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4, False),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 6, False),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 6, False),
    "aten::_flash_attention_forward": ("bshd", 8, False),
    "aten::_efficient_attention_forward": ("bshd_mask", 9, False),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", 11, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", 7, True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", 14, True),
    "aten::_flash_attention_backward": ("bshd", 11, True),
    "aten::_efficient_attention_backward": ("bshd_mask", 14, True),
}
ELEMENTWISE = frozenset(
    "aten::" + n
    for n in (
        "mul mul_ add add_ sub sub_ div div_ pow pow_ rsqrt rsqrt_ sqrt sqrt_ exp exp_ log log_ neg neg_ "
        "reciprocal reciprocal_ abs abs_ sigmoid sigmoid_ tanh tanh_ relu relu_ gelu gelu_ silu silu_ "
        "clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ where maximum minimum square erf erf_ sin cos "
        "softplus hardswish leaky_relu elu addcmul addcmul_ addcdiv addcdiv_ lerp lerp_ "
        "threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward masked_fill masked_fill_ "
        "eq ne lt le gt ge logical_not logical_and bitwise_and mish hardtanh hardsigmoid exp2 log1p expm1 sign "
        "floor ceil round trunc fmod remainder"
    ).split()
)
#: where the ``out=`` tensor of an elementwise op's ``.out`` overload is recorded (the number of
#: arguments of its functional overloads): a tensor at this position or later is the output, not
#: an input (``aten::add`` ``[[M, N], [M, N], [], [M, N]]`` is ``add.out(self, other, alpha, out)``)
ELEMENTWISE_OUT_AT: dict[str, int] = {
    **{
        "aten::" + n: 1
        for n in (
            "abs ceil cos erf exp exp2 expm1 floor hardsigmoid hardswish log log1p logical_not mish neg "
            "reciprocal relu round rsqrt sigmoid sign silu sin sqrt square tanh trunc"
        ).split()
    },
    **{
        "aten::" + n: 2
        for n in (
            "bitwise_and clamp_max clamp_min div eq fmod ge gelu gt le leaky_relu logical_and lt maximum minimum "
            "mul ne pow remainder sigmoid_backward silu_backward tanh_backward"
        ).split()
    },
    **{
        "aten::" + n: 3 for n in "add clamp gelu_backward hardtanh lerp masked_fill softplus sub threshold_backward where".split()
    },
    **{"aten::" + n: 4 for n in "addcdiv addcmul elu".split()},
}
#: elementwise ops whose output is a bool tensor whatever their inputs are
BOOL_OUTPUT = frozenset("aten::" + n for n in "eq ne lt le gt ge logical_not logical_and".split())
FILL = frozenset({"aten::fill_", "aten::zero_"})
COPY = frozenset({"aten::copy_"})
#: reductions -> FLOPs per input element, and the index of their ``dim`` argument
REDUCTION: dict[str, tuple[int, int]] = {
    "aten::sum": (1, 1),
    "aten::mean": (1, 1),
    "aten::amax": (1, 1),
    "aten::amin": (1, 1),
    "aten::max": (1, 1),
    "aten::min": (1, 1),
    "aten::argmax": (1, 1),
    "aten::argmin": (1, 1),
    "aten::prod": (1, 1),
    "aten::any": (1, 1),
    "aten::all": (1, 1),
    "aten::logsumexp": (3, 1),
    "aten::cumsum": (1, 1),
    "aten::cumprod": (1, 1),
    "aten::var": (3, 1),
    "aten::std": (3, 1),
    "aten::var_mean": (3, 1),
    "aten::std_mean": (3, 1),
    "aten::norm": (2, 2),
    "aten::linalg_vector_norm": (2, 2),
}
KEEPS_SHAPE = frozenset({"aten::cumsum", "aten::cumprod"})
INT_DIM = frozenset(
    {
        "aten::max",
        "aten::min",
        "aten::argmax",
        "aten::argmin",
        "aten::cumsum",
        "aten::cumprod",
        "aten::prod",
        "aten::any",
        "aten::all",
    }
)
NORM = frozenset(
    {
        "aten::native_layer_norm",
        "aten::rms_norm",
        "aten::_fused_rms_norm",
        "aten::batch_norm",
        "aten::native_batch_norm",
        "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training",
        "aten::native_group_norm",
    }
)
NORM_BACKWARD = frozenset(
    {
        "aten::native_layer_norm_backward",
        "aten::_fused_rms_norm_backward",
        "aten::native_batch_norm_backward",
        "aten::native_group_norm_backward",
    }
)
SOFTMAX = frozenset({"aten::_softmax", "aten::_log_softmax"})
SOFTMAX_BACKWARD = frozenset({"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"})
EMBEDDING = frozenset({"aten::embedding", "aten::embedding_dense_backward", "aten::_embedding_bag", "aten::index_select"})

#: every op a model covers: the trace model keeps these ops' recorded inputs
MODELLED_OPS = (
    GEMM
    | CONV
    | CONV_BACKWARD
    | frozenset(ATTENTION)
    | ELEMENTWISE
    | FILL
    | COPY
    | frozenset(REDUCTION)
    | NORM
    | NORM_BACKWARD
    | SOFTMAX
    | SOFTMAX_BACKWARD
    | EMBEDDING
)
#: of those, the ops whose scalar arguments (``Concrete Inputs``) the models read
CONCRETE_OPS = (
    GEMM | CONV | CONV_BACKWARD | frozenset(ATTENTION) | frozenset(REDUCTION) | NORM | NORM_BACKWARD | SOFTMAX | EMBEDDING
)
