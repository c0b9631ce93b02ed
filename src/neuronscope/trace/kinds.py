"""Event kinds and the name tables of the trace model (no numpy: the CLI imports this cheaply)."""

from __future__ import annotations

import enum
import re

from .op_families import CONCRETE_OPS, MODELLED_OPS

__all__ = [
    "ACTIVITY_KINDS",
    "activity_kind",
    "COMPILED_GRAPH_CALL",
    "compiled_graph_call_ids",
    "device_label",
    "FILTERED_NAMES",
    "CONCRETE_OPS",
    "INPUT_OPS",
    "POINTWISE_OPS",
    "REDUCTION_OPS",
    "MARKER_CAPTURE",
    "MARKER_CAPTURE_END",
    "MARKER_PREFIX",
    "MARKER_SEGMENT",
    "MARKER_OPTIMIZER_STEP",
    "MARKER_STEP",
    "EventKind",
]


class EventKind(enum.IntEnum):
    """What an event is, independent of the device that produced it."""

    OP = 0  #: a framework op on a CPU thread (``aten::mul``), also runtime API calls
    REGION = 1  #: a ``record_function`` / ``neuronscope.region`` annotation
    DEVICE = 2  #: work executed on the accelerator (kernel, memcpy, NeuronCore execution)
    DEVICE_ANNOTATION = 3  #: a device-side marker (e.g. Neuron ``nc_exec_running``); not device time
    RUNTIME = 4  #: device runtime/driver call on a CPU thread (``cudaLaunchKernel``, ``nrta_execute_schedule``)
    OTHER = 5  #: anything else (instant events, memory records, markers)
    PYTHON = 6  #: a Python function call (``with_stack=True``): ``file.py(12): name``


# Kineto activity type names (``_KinetoEvent.activity_type()`` / chrome-trace ``cat``) -> kind.
ACTIVITY_KINDS: dict[str, EventKind] = {
    "cpu_op": EventKind.OP,
    "operator": EventKind.OP,
    "user_annotation": EventKind.REGION,
    "kernel": EventKind.DEVICE,
    "gpu_memcpy": EventKind.DEVICE,
    "gpu_memset": EventKind.DEVICE,
    "concurrent_kernel": EventKind.DEVICE,
    "gpu_user_annotation": EventKind.DEVICE_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "privateuse1_driver": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
    "python_function": EventKind.PYTHON,
    # the CUPTI range profiler's per-kernel ranges (CUPTI_PROFILER activity): device work
    "cuda_profiler_range": EventKind.DEVICE,
}
#: Kineto's first chrome-trace format (torch 1.8-1.10) named categories differently; the
#: lookup is case-insensitive, so these cover "Operator", "Kernel", "Runtime", "Memcpy",
#: "Memset", "User" (a GPU user annotation lane) and "gpu_user_Annotation".
_LEGACY_KINDS: dict[str, EventKind] = {
    "operator": EventKind.OP,
    "kernel": EventKind.DEVICE,
    "memcpy": EventKind.DEVICE,
    "memset": EventKind.DEVICE,
    "runtime": EventKind.RUNTIME,
    "driver": EventKind.RUNTIME,
    "user": EventKind.DEVICE_ANNOTATION,
    "gpu_user_annotation": EventKind.DEVICE_ANNOTATION,
    "python": EventKind.PYTHON,
}
#: categories that are never work on a lane, even when written on a device's lanes
#: (``cuda_sync``: CUPTI's record of a stream/event wait; ``Trace``: the profiling span)
_NOT_WORK = frozenset({"cuda_sync", "trace", "cpu_instant_event", "external_correlation", "overhead", "ac2g", "async"})


def activity_kind(category: str | None, *, on_device_lane: bool = False) -> EventKind:
    """The kind of a chrome-trace event from its ``cat`` (any Kineto format since torch 1.8).

    A category we do not know by name is a runtime call when it names one (``mtia_runtime``,
    ``<backend>_runtime``), device work when the event sits on a device's lane (its pid is a
    device's: a ``deviceProperties`` id, or a process named like ``MTIA 9``), and ``OTHER``
    otherwise.
    """
    if not category:
        return EventKind.OTHER
    kind = ACTIVITY_KINDS.get(category)
    if kind is not None:
        return kind
    low = category.lower()
    kind = ACTIVITY_KINDS.get(low) or _LEGACY_KINDS.get(low)
    if kind is not None:
        return kind
    if low in _NOT_WORK:
        return EventKind.OTHER
    if low.endswith(("_runtime", "_driver")):
        return EventKind.RUNTIME
    if on_device_lane:
        return EventKind.DEVICE
    return EventKind.OTHER


#: torch.compile's call of one compiled graph (Inductor's ``CompiledFxGraph.__call__``). Inductor
#: records it with ``keyword_values={"scope": "user_scope"}``; torch 2.13's Kineto writes it as a
#: ``cpu_op`` without ``record_shapes`` and as a ``user_annotation`` (a region) with it. On a CPU it runs Inductor's C++ kernels itself, so both readers make it an op on a
#: CPU-only trace (:func:`.model.compiled_graph_calls_as_ops`); on an accelerator its kernels are
#: device events of their own and it stays what Kineto says.
COMPILED_GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph (\w+) ##$")


def compiled_graph_call_ids(names: "tuple[str, ...] | list[str]") -> list[int]:
    """Positions in the string table ``names`` of compiled graphs' calls."""
    return [i for i, n in enumerate(names) if n.startswith("## Call CompiledFxGraph") and COMPILED_GRAPH_CALL.match(n)]


#: Kineto names a device's process "<KIND> <id>" ("GPU 0", "MTIA 9"); the host's is the program
DEVICE_PROCESS = re.compile(r"^[A-Za-z][A-Za-z0-9]* \d+$")

_KNOWN_PREFIXES = ("cuda", "gpu", "privateuse1", "cpu", "user", "python", "kernel", "concurrent", "xpu")


def device_label(
    *,
    saw_device: bool,
    saw_neuron: bool,
    categories: "set[str] | frozenset[str]" = frozenset(),
    runtime_names: "set[str] | frozenset[str]" = frozenset(),
    device_names: "list[str] | tuple[str, ...]" = (),
) -> str:
    """What the device lanes of a saved trace are, from what the trace says: ``neuron``,
    ``rocm`` (HIP runtime calls or an AMD device), ``cuda``, another accelerator's own name
    (``mtia`` from ``mtia_runtime``), or ``cpu`` when no event ran on a device."""
    if not saw_device:
        return "cpu"
    if saw_neuron:
        return "neuron"
    if any(n.startswith("hip") for n in runtime_names) or any(
        w in n for n in device_names for w in ("AMD", "Radeon", "Instinct")
    ):
        return "rocm"
    for cat in sorted(categories):
        prefix = cat.lower().split("_", 1)[0]
        if prefix and prefix not in _KNOWN_PREFIXES and prefix not in _LEGACY_KINDS:
            return prefix
    return "cuda"


#: pointwise ops: a chain of them reads and writes the whole tensor once each, unfused
POINTWISE_OPS = frozenset(
    "aten::" + n
    for n in (
        "mul mul_ add add_ sub sub_ div div_ pow pow_ rsqrt rsqrt_ sqrt sqrt_ exp exp_ log log_ neg neg_ "
        "reciprocal reciprocal_ abs abs_ sigmoid sigmoid_ tanh tanh_ relu relu_ gelu gelu_ silu silu_ "
        "clamp clamp_ clamp_min clamp_min_ clamp_max where maximum minimum square erf erf_ sin cos "
        "softplus hardswish leaky_relu elu addcmul addcdiv lerp"
    ).split()
)
#: reductions
REDUCTION_OPS = frozenset({"aten::mean", "aten::sum", "aten::amax", "aten::max", "aten::var", "aten::std", "aten::norm"})

#: Ops whose input shapes/dtypes the trace model keeps (when recorded): the rules about matmul
#: precision/alignment, convolution bias and copies, and the bytes an elementwise chain moves.
INPUT_OPS = (
    POINTWISE_OPS
    | REDUCTION_OPS
    | MODELLED_OPS
    | frozenset(
        {
            "aten::mm",
            "aten::bmm",
            "aten::addmm",
            "aten::baddbmm",
            "aten::matmul",
            "aten::linear",
            "aten::conv1d",
            "aten::conv2d",
            "aten::conv3d",
            "aten::convolution",
            "aten::_convolution",
            "aten::copy_",
            "aten::to",
            "aten::_to_copy",
        }
    )
)

#: Markers neuronscope itself writes into a trace (capture boundaries, ``ns.step()``):
#: read by the analysis, never shown as ops or regions.
MARKER_PREFIX = "neuronscope::"

# Names torch's own post-processing drops (torch.autograd.profiler_util._filter_name);
# dropping the same ones keeps our call counts equal to key_averages().
FILTERED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)
#: ``neuronscope::capture#<serial>:<name>`` at a capture's start, ``..._end#...`` at its end
MARKER_CAPTURE = MARKER_PREFIX + "capture"
MARKER_CAPTURE_END = MARKER_PREFIX + "capture_end"
#: at every start of the shared torch session (capture/session.py), on the starting thread
MARKER_SEGMENT = MARKER_PREFIX + "segment"
#: ``neuronscope.step()``
MARKER_STEP = MARKER_PREFIX + "step"
#: the end of an optimizer's ``step()`` (torch's optimizer step hook): the steps of code that
#: marks none itself
MARKER_OPTIMIZER_STEP = MARKER_PREFIX + "optimizer_step"
