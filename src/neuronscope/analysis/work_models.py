"""The work models: the FLOPs and bytes one call does, from the shapes torch recorded.

``record_shapes=True`` gives every op's inputs: ``Input Dims`` (a shape per argument, ``[]`` for
a scalar, ``None`` or a 0-dim tensor), ``Input type`` (the dtype name, or ``Scalar``/``ScalarList``
/ ``TensorList`` / ``""``) and ``Concrete Inputs`` (scalar and list values: Python values in a live
profile, strings in a saved trace). :func:`op_cost` turns one call into an :class:`OpCost`, or
into the reason it cannot.

The models (research: ``notes/issue-28/op_work_models.md``; the table in docs/roofline.md):

* **GEMM** (``mm addmm bmm baddbmm _scaled_mm``): ``2·B·M·N·K`` FLOPs (the bias epilogue is not
  counted, as ``torch.utils.flop_counter`` and MFU conventions do); bytes = every operand at its
  own dtype (the bias at its recorded shape) + the output.
* **Convolution** (``convolution``, forward and ``convolution_backward``): ``2·numel(out)·numel(W[1:])``
  with the output size from stride, padding and dilation; the backward counts only the gradients
  its ``output_mask`` asks for.
* **Attention** (scaled-dot-product and its flash/efficient/cudnn/CPU kernels):
  ``2·B·Hq·pairs·(Dqk + Dv)`` with ``pairs = Sq·Sk``, or the unmasked pairs of a top-left causal
  mask (bottom-right for ``_efficient_attention_*`` with ``custom_mask_type`` 2); the backward is
  2.5× (five GEMMs, the recompute included). ``_flash_attention_*`` and ``_efficient_attention_*``
  take ``[B, S, H, D]``, the SDPA ops ``[B, H, S, D]``.
* **Elementwise** ops: 1 FLOP per output element; bytes = tensor inputs + the output (of the
  dtype torch gives it: a recorded ``out=`` tensor's, the input's for an in-place op, bool for a
  comparison, else the promoted dtype of the inputs, where a 0-dim tensor does not widen it).
* **Reductions**: 1 FLOP per input element (2 for norms, 3 for var/std); bytes = input + output
  (``max``/``min`` over a dim also write their int64 indices).
* **Norms** (layer, RMS, batch, group): ~8 FLOPs an element forward, ~10 backward; bytes = input,
  output and every other tensor argument (weights, biases, batch norm's running statistics); the
  per-row mean/rstd a layer or RMS norm writes (a C-th of its input) are not counted.
  **Softmax**: ~5 FLOPs an element; bytes = input + output.
* **Embedding**: the gathered rows read and written. **Copies**: source read, destination written.

Bytes are the compulsory traffic (each tensor once): a kernel that moves more is below its
memory roof by exactly that much. Only one op of a chain that repeats the same work
(``linear -> addmm``, ``conv2d -> convolution -> mkldnn_convolution``) carries it: the outermost
modelled one (:mod:`.summary`), with the device time of everything under it.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

from ..trace.op_families import (
    ATTENTION,
    BOOL_OUTPUT,
    CONV,
    CONV_BACKWARD,
    COPY,
    ELEMENTWISE,
    ELEMENTWISE_OUT_AT,
    EMBEDDING,
    FILL,
    GEMM,
    INT_DIM,
    KEEPS_SHAPE,
    MODELLED_OPS,
    NORM,
    NORM_BACKWARD,
    REDUCTION,
    SOFTMAX,
    SOFTMAX_BACKWARD,
)

__all__ = [
    "DTYPE_BYTES",
    "NO_WORK_OPS",
    "OpCost",
    "WRAPPER_OPS",
    "dtype_class",
    "is_modelled",
    "no_model_reason",
    "op_cost",
]

#: bytes per element of the dtype names torch's profiler records (``Input type``); a name not
#: here makes the op's bytes unknown (never a guess)
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "short unsigned int": 2,
    "unsigned int": 4,
    "long unsigned int": 8,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::qint8": 1,
    "c10::quint8": 1,
    "c10::qint32": 4,
}

#: the roof a dtype is measured against (``fp32``, ``bf16``...; integers and bools: ``int``)
_DTYPE_CLASS = {
    "float": "fp32",
    "double": "fp64",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::complex<float>": "fp32",
    "c10::complex<double>": "fp64",
}


def dtype_class(dtype: str) -> str:
    if dtype in _DTYPE_CLASS:
        return _DTYPE_CLASS[dtype]
    if "Float8" in dtype or "Float4" in dtype:
        return "fp8"
    if dtype in ("signed char", "unsigned char", "c10::qint8", "c10::quint8"):
        return "int8"
    return "int"


@dataclass(frozen=True)
class OpCost:
    """The work of one call."""

    flops: float
    bytes: float
    unit: str  #: "matrix" (tensor cores, the tensor engine, a CPU's matmul) or "vector"
    dtype: str  #: the dtype class whose roof applies: fp32, bf16, fp16, fp8, fp64, int8, int
    family: str  #: gemm, conv, attention, elementwise, reduction, norm, softmax, embedding, copy

    @property
    def roof_key(self) -> str:
        return f"{self.unit}/{self.dtype}"


#: ops that move no data (views, allocations, bookkeeping): "no work" rather than "no model"
NO_WORK_OPS = frozenset(
    "aten::" + n
    for n in (
        "view reshape _reshape_alias as_strided as_strided_ empty empty_like empty_strided t transpose permute "
        "expand expand_as slice select unsqueeze squeeze squeeze_ unsqueeze_ detach detach_ alias resize_ "
        "lift_fresh result_type unbind split chunk narrow _unsafe_view numpy_T contiguous set_ is_nonzero "
        "item _local_scalar_dense unflatten flatten movedim view_as stride size dim record_stream"
    ).split()
)
#: wrappers whose work a modelled op under them carries
WRAPPER_OPS = frozenset(
    "aten::" + n
    for n in (
        "linear matmul conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d cudnn_convolution "
        "mkldnn_convolution miopen_convolution _convolution_mode layer_norm group_norm instance_norm softmax "
        "log_softmax to _to_copy clone dropout native_dropout embedding_backward _batch_norm_impl_index "
        "cudnn_batch_norm miopen_batch_norm"
    ).split()
)


def is_modelled(name: str) -> bool:
    return name in MODELLED_OPS


def no_model_reason(name: str) -> str:
    if name in NO_WORK_OPS:
        return "moves no data (a view, an allocation or bookkeeping)"
    if name in WRAPPER_OPS:
        return "a wrapper: the op it calls carries the work"
    return "no work model for this op"


# -- reading the recorded arguments --------------------------------------------------------
def _value(concrete: Any, i: int) -> Any:
    """Argument ``i``'s concrete value: a Python value live, a string in a saved trace."""
    if concrete is None or i >= len(concrete):
        return None
    v = concrete[i]
    if isinstance(v, str):
        if v in ("", "None"):
            return None
        if v in ("True", "False"):
            return v == "True"
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return v
    return v


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, list):
        return None
    n = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return None
        n *= d
    return n


#: ``Input type`` names of arguments that are not tensors: torch >= 1.11 writes the first four; torch
#: 1.8-1.10 wrote the IValue tag (``Int``, ``Bool``, ``Double``, ``GenericList``...) of every non-tensor
_NOT_TENSOR = frozenset(
    "Scalar ScalarList TensorList None Int Bool Double ComplexDouble SymInt SymFloat SymBool Tuple String Blob "
    "GenericList GenericDict Future Await Device Stream Object PyObject Uninitialized Capsule RRef Quantizer "
    "Generator Enum IntList DoubleList BoolList".split()
) | {""}


def _tensor(shapes: list, dtypes: list, i: int) -> tuple[list[int], str] | None:
    """Argument ``i`` when it is a tensor (a 0-dim tensor has shape ``[]`` and a real dtype)."""
    if i >= len(shapes):
        return None
    t = dtypes[i] if i < len(dtypes) else ""
    s = shapes[i]
    if not isinstance(s, list) or not isinstance(t, str) or t in _NOT_TENSOR:
        return None
    if s and isinstance(s[0], list):  # a tensor list
        return None
    return s, t


class _Unknown(Exception):
    """The op cannot be modelled from what was recorded: the message says why."""


def _bpe(dtype: str) -> int:
    b = DTYPE_BYTES.get(dtype)
    if b is None:
        raise _Unknown(f"unknown dtype {dtype!r}")
    return b


def _bytes(shape: list[int], dtype: str) -> int:
    n = _numel(shape)
    if n is None:
        raise _Unknown("a shape that is not a list of sizes")
    return n * _bpe(dtype)


def _need(t: tuple[list[int], str] | None, what: str) -> tuple[list[int], str]:
    if t is None:
        raise _Unknown(f"no recorded {what}")
    return t


# -- the models ----------------------------------------------------------------------------
def op_cost(name: str, shapes: list, dtypes: list, concrete: Any = None) -> OpCost | str:
    """The work of one call of ``name``, or a one-line reason it cannot be known."""
    try:
        if name in GEMM:
            return _gemm(name, shapes, dtypes, concrete)
        if name in CONV:
            return _conv(shapes, dtypes, concrete)
        if name in CONV_BACKWARD:
            return _conv_backward(shapes, dtypes, concrete)
        if name in ATTENTION:
            return _attention(name, shapes, dtypes, concrete)
        if name in ELEMENTWISE:
            return _elementwise(name, shapes, dtypes)
        if name in FILL:
            x, t = _need(_tensor(shapes, dtypes, 0), "tensor")
            return OpCost(0.0, float(_bytes(x, t)), "vector", dtype_class(t), "copy")
        if name in COPY:
            dst, td = _need(_tensor(shapes, dtypes, 0), "destination")
            src, ts = _need(_tensor(shapes, dtypes, 1), "source")
            return OpCost(0.0, float(_bytes(dst, td) + _bytes(src, ts)), "vector", dtype_class(td), "copy")
        if name in REDUCTION:
            return _reduction(name, shapes, dtypes, concrete)
        if name in NORM or name in NORM_BACKWARD:
            return _norm(name, shapes, dtypes, concrete)
        if name in SOFTMAX or name in SOFTMAX_BACKWARD:
            return _softmax(name, shapes, dtypes, concrete)
        if name in EMBEDDING:
            return _embedding(name, shapes, dtypes, concrete)
    except _Unknown as why:
        return str(why)
    except (TypeError, ValueError, IndexError, OverflowError) as exc:  # a shape we did not expect
        return f"unreadable arguments ({type(exc).__name__})"
    return no_model_reason(name)


def _gemm(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    if name in ("aten::mm", "aten::bmm", "aten::_scaled_mm"):
        a, ta = _need(_tensor(shapes, dtypes, 0), "first matrix")
        b, tb = _need(_tensor(shapes, dtypes, 1), "second matrix")
        bias = _tensor(shapes, dtypes, 4) if name == "aten::_scaled_mm" else None
    else:  # addmm(bias, a, b), baddbmm(bias, a, b)
        bias = _tensor(shapes, dtypes, 0)
        a, ta = _need(_tensor(shapes, dtypes, 1), "first matrix")
        b, tb = _need(_tensor(shapes, dtypes, 2), "second matrix")
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise _Unknown(f"matrix shapes {a} x {b} do not multiply")
    batch = _numel(a[:-2]) or 1
    m, k, n = a[-2], a[-1], b[-1]
    out_bytes = batch * m * n * _bpe(ta)
    if name == "aten::_scaled_mm":  # fp8 in; the output dtype is an argument (a ScalarType code)
        code = _value(concrete, 6)
        out_bytes = batch * m * n * {6: 4, 15: 2, 5: 2}.get(code if isinstance(code, int) else 15, 2)
    moved = _bytes(a, ta) + _bytes(b, tb) + out_bytes + (_bytes(*bias) if bias else 0)
    return OpCost(2.0 * batch * m * n * k, float(moved), "matrix", dtype_class(ta), "gemm")


def _ints(v: Any, n: int, default: int) -> list[int]:
    if v is None:
        return [default] * n
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    return v * n if len(v) == 1 else v


def _conv(shapes: list, dtypes: list, concrete: Any) -> OpCost:
    x, tx = _need(_tensor(shapes, dtypes, 0), "input")
    w, tw = _need(_tensor(shapes, dtypes, 1), "weight")
    bias = _tensor(shapes, dtypes, 2)
    if concrete is None or len(concrete) < 9:
        raise _Unknown("no stride/padding recorded (a trace without Concrete Inputs)")
    nsp = len(x) - 2
    if nsp < 1 or len(w) != len(x):
        raise _Unknown(f"input {x} and weight {w} are not a convolution's")
    if any(_value(concrete, i) is None for i in (3, 4, 5)):
        raise _Unknown("no stride/padding recorded (a trace without Concrete Inputs)")
    stride, padding, dilation = (_ints(_value(concrete, i), nsp, d) for i, d in ((3, 1), (4, 0), (5, 1)))
    transposed = bool(_value(concrete, 6))
    out_pad = _ints(_value(concrete, 7), nsp, 0)
    groups = int(_value(concrete, 8) or 1)
    k = w[2:]
    if transposed:
        spatial = [
            (i - 1) * s - 2 * p + d * (kk - 1) + op + 1
            for i, s, p, d, kk, op in zip(x[2:], stride, padding, dilation, k, out_pad)
        ]
        c_out = w[1] * groups
        flops = 2.0 * _numel(x) * _numel(w[1:])  # type: ignore[operator]
    else:
        spatial = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, s, p, d, kk in zip(x[2:], stride, padding, dilation, k)]
        c_out = w[0]
        flops = 2.0 * x[0] * c_out * math.prod(spatial) * _numel(w[1:])
    out = [x[0], c_out, *spatial]
    moved = _bytes(x, tx) + _bytes(w, tw) + _bytes(out, tx) + (_bytes(*bias) if bias else 0)
    return OpCost(flops, float(moved), "matrix", dtype_class(tx), "conv")


def _conv_backward(shapes: list, dtypes: list, concrete: Any) -> OpCost:
    gout, tg = _need(_tensor(shapes, dtypes, 0), "grad_output")
    x, tx = _need(_tensor(shapes, dtypes, 1), "input")
    w, tw = _need(_tensor(shapes, dtypes, 2), "weight")
    mask = _value(concrete, 10)
    if not isinstance(mask, (list, tuple)) or len(mask) < 3:
        mask = [True, True, True]
    transposed = bool(_value(concrete, 7))
    # one GEMM-shaped pass per gradient: grad-input and grad-weight each cost the forward's FLOPs
    per_pass = 2.0 * (_numel(x) if transposed else _numel(gout)) * _numel(w[1:])  # type: ignore[operator]
    flops = per_pass * (bool(mask[0]) + bool(mask[1])) + (_numel(gout) if mask[2] else 0)  # type: ignore[operator]
    moved = _bytes(gout, tg)
    if mask[0]:
        moved += _bytes(w, tw) + _bytes(x, tx)  # read W, write grad_input
    if mask[1]:
        moved += _bytes(x, tx) + _bytes(w, tw)  # read x, write grad_weight
    if mask[2]:
        moved += gout[1] * _bpe(tg)
    return OpCost(float(flops), float(moved), "matrix", dtype_class(tx), "conv")


def _causal_pairs(sq: int, sk: int, offset: int = 0) -> int:
    """Unmasked (query, key) pairs of a causal mask: query row i sees keys 0..i+offset (torch's
    top-left mask: offset 0; bottom-right, as flash-attn aligns it: offset sk - sq)."""
    lo, hi = 1 + offset, sq + offset  # keys seen by the first and the last row, before clamping

    def span(a: int, b: int) -> int:  # a + (a+1) + ... + b
        return (a + b) * (b - a + 1) // 2 if a <= b else 0

    partial = span(max(lo, 1), min(hi, sk))  # rows that see part of the keys
    full = max(hi - max(lo, sk + 1) + 1, 0) * sk  # rows that see every key
    return partial + full


def _attention(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    layout, causal_at, backward = ATTENTION[name]
    first = 1 if backward else 0
    q, tq = _need(_tensor(shapes, dtypes, first), "query")
    k, tk = _need(_tensor(shapes, dtypes, first + 1), "key")
    v, tv = _need(_tensor(shapes, dtypes, first + 2), "value")
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise _Unknown(f"query {q}: not 4-D (variable-length attention: FLOPs unknown)")
    if layout == "bhsd":
        b, hq, sq, d = q
        sk, dv = k[2], v[3]
    else:  # [B, S, H, D]
        b, sq, hq, d = q
        sk, dv = k[1], v[3]
    flag = _value(concrete, causal_at)
    causal = bool(flag) if layout != "bshd_mask" else flag in (1, 2)
    offset = sk - sq if layout == "bshd_mask" and flag == 2 else 0  # custom_mask_type 2: bottom-right
    pairs = _causal_pairs(sq, sk, offset) if causal else sq * sk
    flops = 2.0 * b * hq * pairs * (d + dv)
    out_bytes = b * hq * sq * dv * _bpe(tq)
    moved = _bytes(q, tq) + _bytes(k, tk) + _bytes(v, tv) + out_bytes
    if backward:  # read q, k, v, out, grad_out; write grad_q, grad_k, grad_v: twice the forward's
        flops *= 2.5
        moved = 2 * moved
    return OpCost(flops, float(moved), "matrix", dtype_class(tq), "attention")


def _broadcast(shapes: list[list[int]]) -> list[int]:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s):
            j = ndim - len(s) + i
            if d != 1:
                if out[j] not in (1, d):
                    raise _Unknown(f"shapes {shapes} do not broadcast")
                out[j] = d
    return out


def _category(dtype: str) -> int:
    """torch's promotion categories: bool < integer < floating < complex."""
    if dtype == "bool":
        return 0
    if "complex" in dtype:
        return 3
    return 2 if dtype in ("float", "double", "c10::Half", "c10::BFloat16") or "Float" in dtype else 1


def _result_dtype(tensors: list[tuple[list[int], str]]) -> str:
    """The dtype torch promotes the inputs to: the dimensioned tensors decide; a 0-dim tensor (a
    wrapped Python number is one, recorded as ``double``) only when its category is higher."""
    dimensioned = [t for s, t in tensors if s] or [t for _, t in tensors]
    best = max(dimensioned, key=lambda t: (_category(t), DTYPE_BYTES.get(t, 0)))
    scalars = [t for s, t in tensors if not s and _category(t) > _category(best)]
    if scalars:
        top = max(scalars, key=_category)
        return "float" if _category(top) == 2 else top  # a number promotes to the default dtype
    return best


def _elementwise(name: str, shapes: list, dtypes: list) -> OpCost:
    out_at = ELEMENTWISE_OUT_AT.get(name, len(shapes))
    tensors = [t for t in (_tensor(shapes, dtypes, i) for i in range(min(out_at, len(shapes)))) if t is not None]
    outs = [t for t in (_tensor(shapes, dtypes, i) for i in range(out_at, len(shapes))) if t is not None]
    if not tensors:
        raise _Unknown("no recorded tensor")
    out = _broadcast([s for s, _ in tensors])
    n = _numel(out) or 0
    if outs:  # the out= tensor says what is written
        out_dtype = outs[0][1]
    elif name.endswith("_"):  # in place: written back in self's dtype
        out_dtype = _need(_tensor(shapes, dtypes, 0), "self")[1]
    elif name in BOOL_OUTPUT:
        out_dtype = "bool"
    else:
        out_dtype = _result_dtype(tensors)
    moved = sum(_bytes(s, t) for s, t in tensors) + n * _bpe(out_dtype)
    # the roof of the dtype the op computes in: where(cond, a, b) and mask * x compute in a's and x's
    return OpCost(float(n), float(moved), "vector", dtype_class(_result_dtype(tensors)), "elementwise")


def _reduce_dims(name: str, dtypes: list, concrete: Any, at: int) -> list[int] | None:
    v = _value(concrete, at)
    if isinstance(v, (list, tuple)) and v:
        return [int(d) for d in v]
    # an int is the dim when keepdim (a bool) follows it: prod(self, dtype) has a dtype code there
    if isinstance(v, int) and not isinstance(v, bool) and name in INT_DIM and isinstance(_value(concrete, at + 1), bool):
        return [v]
    return None  # every dimension


def _reduction(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    x, t = _need(_tensor(shapes, dtypes, 0), "input")
    other = _tensor(shapes, dtypes, 1)
    if name in ("aten::max", "aten::min") and other is not None and other[0]:
        return _elementwise("aten::maximum", shapes, dtypes)  # max(a, b): elementwise
    per_element, dim_at = REDUCTION[name]
    n = _numel(x) or 0
    dims = None
    if name in KEEPS_SHAPE:
        n_out = n
    else:
        dims = _reduce_dims(name, dtypes, concrete, dim_at)
        if dims is None or not x:
            n_out = 1
        else:
            keep = [s for i, s in enumerate(x) if i not in {d % len(x) for d in dims}]
            n_out = _numel(keep) or 1
    out_bpe = 8 if name in ("aten::argmax", "aten::argmin") else _bpe(t)
    if name in ("aten::max", "aten::min") and dims is not None:  # max.dim: values and int64 indices
        out_bpe += 8
    return OpCost(float(per_element * n), float(n * _bpe(t) + n_out * out_bpe), "vector", dtype_class(t), "reduction")


def _norm(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    backward = name in NORM_BACKWARD
    xi = 1 if backward else 0
    x, t = _need(_tensor(shapes, dtypes, xi), "input")
    n = _numel(x) or 0
    params = 0  # weights, biases, running statistics: every other tensor argument, read once
    for i in range(len(shapes)):
        if i != xi and not (backward and i == 0):
            p = _tensor(shapes, dtypes, i)
            if p is not None:
                params += _bytes(*p)
    if backward:  # read grad_out and input, write grad_input (+ the parameter gradients)
        moved = 3 * n * _bpe(t) + 2 * params
        return OpCost(10.0 * n, float(moved), "vector", dtype_class(t), "norm")
    moved = 2 * n * _bpe(t) + params
    return OpCost(8.0 * n, float(moved), "vector", dtype_class(t), "norm")


def _softmax(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    x, t = _need(_tensor(shapes, dtypes, 0), "input")
    n = _numel(x) or 0
    if name in SOFTMAX_BACKWARD:  # grad_output and output read, grad_input written (no recompute)
        return OpCost(4.0 * n, float(3 * n * _bpe(t)), "vector", dtype_class(t), "softmax")
    out_bpe = 4 if _value(concrete, 2) is True else _bpe(t)  # half_to_float
    return OpCost(5.0 * n, float(n * (_bpe(t) + out_bpe)), "vector", dtype_class(t), "softmax")


def _embedding(name: str, shapes: list, dtypes: list, concrete: Any) -> OpCost:
    if name == "aten::embedding_dense_backward":
        g, tg = _need(_tensor(shapes, dtypes, 0), "grad_output")
        idx, ti = _need(_tensor(shapes, dtypes, 1), "indices")
        rows = _value(concrete, 2)
        d = g[-1] if g else 1
        table = (int(rows) * d if isinstance(rows, int) else 0) * _bpe(tg)
        moved = _bytes(g, tg) + _bytes(idx, ti) + table + _bytes(g, tg)  # zero the table, add rows
        return OpCost(float(_numel(g) or 0), float(moved), "vector", dtype_class(tg), "embedding")
    if name == "aten::index_select":  # (self, dim, index)
        w, tw = _need(_tensor(shapes, dtypes, 0), "table")
        idx, ti = _need(_tensor(shapes, dtypes, 2), "indices")
        dim = _value(concrete, 1)
        dim = dim % len(w) if isinstance(dim, int) and w else 0
        row = _numel([s for i, s in enumerate(w) if i != dim]) or 0
        gathered = (_numel(idx) or 0) * row * _bpe(tw)
        return OpCost(0.0, float(_bytes(idx, ti) + 2 * gathered), "vector", dtype_class(tw), "embedding")
    w, tw = _need(_tensor(shapes, dtypes, 0), "weight")
    idx, ti = _need(_tensor(shapes, dtypes, 1), "indices")
    d = _numel(w[1:]) or 0
    gathered = (_numel(idx) or 0) * d * _bpe(tw)
    if name == "aten::_embedding_bag":  # rows gathered and pooled into one row per bag
        offsets = _tensor(shapes, dtypes, 2)
        bags = (_numel(offsets[0]) or 0) if offsets else 1
        moved = _bytes(idx, ti) + gathered + bags * d * _bpe(tw)
        return OpCost(float((_numel(idx) or 0) * d), float(moved), "vector", dtype_class(tw), "embedding")
    return OpCost(0.0, float(_bytes(idx, ti) + 2 * gathered), "vector", dtype_class(tw), "embedding")
