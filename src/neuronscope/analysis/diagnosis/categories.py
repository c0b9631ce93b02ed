"""What an event *is*, for the diagnosis: compilation, data loading, a host-device sync,
an elementwise op... decided once per distinct name (names repeat; events are many)."""

from __future__ import annotations

import re
import sys

from ...trace.kinds import POINTWISE_OPS, REDUCTION_OPS
from ..callsite import FRAME

__all__ = [
    "ASYNC_COPY",
    "COMPILE",
    "DATA",
    "ELEMENTWISE",
    "METADATA_OPS",
    "REDUCTIONS",
    "SYNC_OPS",
    "SYNC_RUNTIME",
    "is_compile",
    "is_data",
    "is_sync",
    "user_frame",
]

#: torch.compile (dynamo/inductor/AOT) and Neuron compilation / model loading. dynamo wraps its
#: phases in ``dynamo_timed`` annotations ("_compile.compile_inner (dynamo_timed)", ...).
COMPILE = re.compile(
    r"\(dynamo_timed\)$|^dynamo$|^_compile\.|^compile_fx|^inductor_|^aot_|^PyCodeCache\.|^async_compile|"
    r"^OutputGraph\.|^bytecode_tracing|^build_guards|^compile_attempt|^CachingAutotuner|"
    r"neuronx?[-_]?cc|neuron.*compil|^nrt_load|^model_load|^nrt_(?:model_)?load",
    re.IGNORECASE,
)
#: torch's DataLoader iterator regions (and the python frames of ``__next__`` with stacks), plus
#: the region names users give data loading by convention.
DATA = re.compile(
    r"^enumerate\((?:DataLoader|DataPipe)\)#|torch/utils/data/dataloader\.py\(\d+\): __next__|"
    r"^(?:data|dataloader|data_loading|load_batch|next_batch|get_batch|input_pipeline)$",
    re.IGNORECASE,
)
#: ops that read a device value back to the host (or need its size): they block when the
#: tensor is on a device; on a CPU tensor they are plain reads
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::is_nonzero",
        "aten::equal",
        "aten::allclose",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique2",
        "aten::tolist",
    }
)
#: device runtime calls that block the host until the device is done: ``*Synchronize``, the
#: synchronous copies and memsets, Neuron's waits. Not the polls (``cudaEventQuery``,
#: ``cudaStreamQuery`` return at once) and not ``*Async`` calls (see ASYNC_COPY).
SYNC_RUNTIME = re.compile(
    r"Synchronize|^(?:cuda|hip|cu)Memcpy(?!\w*Async)\w*$|^(?:cuda|hip)Memset(?:2D|3D)?$|"
    r"^nrt_?(?:sync|wait)|^neuron.*synchroni",
    re.IGNORECASE,
)
#: asynchronous copies: they block only when the host has to wait for the copy (a
#: device-to-host copy into pageable memory); the trace shows that as the call lasting until
#: its copy on the device ended
ASYNC_COPY = re.compile(r"^(?:cuda|hip|cu)Memcpy\w*Async", re.IGNORECASE)

#: pointwise ops and the reductions that often sit inside an elementwise chain (RMSNorm's mean,
#: softmax's sum): defined with the trace model, which keeps their input shapes
ELEMENTWISE = POINTWISE_OPS
REDUCTIONS = REDUCTION_OPS
#: ops that launch no compute of their own (views, metadata, allocation)
METADATA_OPS = frozenset(
    "aten::" + n
    for n in (
        "view reshape _reshape_alias as_strided empty empty_like empty_strided zeros_like ones_like size stride "
        "t transpose expand expand_as select slice unsqueeze squeeze permute detach alias lift lift_fresh "
        "resolve_conj resolve_neg result_type _unsafe_view unbind split chunk narrow flatten unflatten "
        "item _local_scalar_dense to _to_copy copy_ contiguous clone set_ resize_ is_nonzero numel dim "
        "broadcast_tensors _has_compatible_shallow_copy_type"
    ).split()
)

_NOT_USER = {"torch", "neuronscope", "torch_neuronx", "torch_xla", "wrapt", "click", "typing_extensions", "_pytest", "pytest"}


def is_compile(name: str) -> bool:
    return bool(COMPILE.search(name))


def is_data(name: str) -> bool:
    return bool(DATA.search(name))


def is_sync(name: str) -> bool:
    return name in SYNC_OPS or bool(SYNC_RUNTIME.search(name))


def user_frame(name: str) -> str | None:
    """``file.py:12 (func)`` for a python_function event of user code (not torch, not the stdlib)."""
    m = FRAME.match(name)
    if m is None:
        return None
    path = m.group("file")
    if path.startswith("<") or "site-packages/" in path or "dist-packages/" in path:
        return None
    # torch shortens paths below sys.path: "torch/nn/modules/linear.py", "logging/__init__.py"
    top = path.split("/", 1)[0].removesuffix(".py")
    if top in _NOT_USER or top in sys.stdlib_module_names:
        return None
    return f"{path}:{m.group('line')} ({m.group('func')})"
