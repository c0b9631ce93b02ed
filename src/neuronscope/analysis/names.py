"""Readable names for ops whose raw names are machine-made.

torch.compile runs show up as ``## Call CompiledFxGraph fydwk3x7...cgq ##`` inside a
``Torch-Compiled Region: 0/0`` annotation. Tables show them as ``compiled graph fydwk3x7``
plus, when the compile id can be mapped (torch._dynamo's compilation metrics, recorded in
the profiling process), the Python function that was compiled. The full name stays the key
everywhere (summary.json, ``--json``, diffs).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..trace.model import Trace

__all__ = ["compiled_functions", "compiled_graph_labels", "display_name"]

_COMPILED_GRAPH = re.compile(r"^## Call CompiledFxGraph (\w+) ##$")
_COMPILED_REGION = re.compile(r"^Torch-Compiled Region: (\d+/\d+)")
SHORT_HASH = 8


def display_name(name: str, labels: dict[str, str] | None = None) -> str:
    """The label tables show for ``name`` (``name`` itself for ordinary ops)."""
    if labels and name in labels:
        return labels[name]
    m = _COMPILED_GRAPH.match(name)
    return f"compiled graph {m.group(1)[:SHORT_HASH]}" if m else name


def compiled_functions() -> dict[str, str]:
    """compile id (``"0/0"``) -> ``function (file:line)``, from torch._dynamo in this process
    (empty when nothing was compiled here: never imports torch itself)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    try:
        from torch._dynamo.utils import get_compilation_metrics

        out = {}
        for m in get_compilation_metrics():
            cid, name = getattr(m, "compile_id", None), getattr(m, "co_name", None)
            if cid and name:
                filename = str(getattr(m, "co_filename", "?")).replace("\\", "/").rsplit("/", 1)[-1]
                where = f"{filename}:{getattr(m, 'co_firstlineno', '?')}"
                out[str(cid)] = f"{name} ({where})"
        return out
    except Exception:  # noqa: BLE001 - an internal torch API: names are a nicety
        return {}


def compiled_graph_labels(trace: "Trace", functions: dict[str, str] | None = None) -> dict[str, str]:
    """Labels for the compiled graphs of ``trace``: the short hash, and the compiled function
    when the enclosing ``Torch-Compiled Region`` id is in ``functions``."""
    import numpy as np

    graphs = {i: m.group(1) for i, n in enumerate(trace.names) if (m := _COMPILED_GRAPH.match(n))}
    if not graphs:
        return {}
    regions = {i: m.group(1) for i, n in enumerate(trace.names) if (m := _COMPILED_REGION.match(n))}
    end = trace.start_ns + trace.duration_ns
    region_pos = np.flatnonzero(np.isin(trace.name_id, list(regions))) if regions else np.empty(0, dtype=np.int64)
    labels: dict[str, str] = {}
    for name_id, digest in graphs.items():
        label = f"compiled graph {digest[:SHORT_HASH]}"
        first = np.flatnonzero(trace.name_id == name_id)
        if functions and first.size and region_pos.size:
            i = int(first[0])
            inside = region_pos[
                (trace.thread[region_pos] == trace.thread[i])
                & (trace.start_ns[region_pos] <= trace.start_ns[i])
                & (end[region_pos] >= end[i])
            ]
            if inside.size:
                innermost = int(inside[np.argmax(trace.start_ns[inside])])
                fn = functions.get(regions[int(trace.name_id[innermost])])
                if fn:
                    label += f" · {fn}"
        labels[trace.names[name_id]] = label
    return labels
