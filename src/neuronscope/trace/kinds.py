"""Event kinds and the name tables of the trace model (no numpy: the CLI imports this cheaply)."""

from __future__ import annotations

import enum

__all__ = [
    "ACTIVITY_KINDS",
    "FILTERED_NAMES",
    "INPUT_OPS",
    "MARKER_CAPTURE",
    "MARKER_CAPTURE_END",
    "MARKER_PREFIX",
    "MARKER_SEGMENT",
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
}

#: Ops whose input shapes/dtypes the trace model keeps (when recorded): the advisor's rules
#: about matmul precision/alignment, convolution bias and copies need them, nothing else does.
INPUT_OPS = frozenset(
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
