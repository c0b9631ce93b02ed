"""Readable names for ops whose raw names are machine-made.

torch.compile runs show up as ``## Call CompiledFxGraph fydwk3x7...cgq ##`` inside a
``Torch-Compiled Region: 0/0`` annotation. Tables show them as ``compiled graph fydwk3x7``
plus, when the compile id can be mapped (torch._dynamo's compilation metrics, recorded in
the profiling process), the Python function that was compiled. The full name stays the key
everywhere (summary.json, ``--json``, diffs).

Kernels launched outside any op (graph replays, communication threads, custom extensions)
are rows named after themselves; a mangled C++/HIP symbol (``_ZN5aiter24add_rmsnorm…``) is
shown demangled and without its parameter list (``aiter::add_rmsnorm_quant_kernel<float, 128>``).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import TYPE_CHECKING

from ..trace.kinds import COMPILED_GRAPH_CALL as _COMPILED_GRAPH

if TYPE_CHECKING:
    from ..trace.model import Trace

__all__ = ["compiled_functions", "compiled_graph_labels", "demangle", "display_name", "kernel_labels"]

_COMPILED_REGION = re.compile(r"^Torch-Compiled Region: (\d+/\d+)")
SHORT_HASH = 8


def display_name(name: str, labels: dict[str, str] | None = None) -> str:
    """The label tables show for ``name`` (``name`` itself for ordinary ops)."""
    if labels and name in labels:
        return labels[name]
    if name.startswith("_Z"):
        return demangle(name)
    m = _COMPILED_GRAPH.match(name)
    return f"compiled graph {m.group(1)[:SHORT_HASH]}" if m else name


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A readable C++/HIP kernel name: demangled (the C++ ABI's own demangler, through
    ``cxxfilt``), without the return type and the parameter list. ``name`` when it is not a
    mangled symbol or cannot be demangled here."""
    if not name.startswith("_Z"):
        return name
    try:
        import cxxfilt

        full = cxxfilt.demangle(name)
    except Exception:  # noqa: BLE001 - no C++ runtime here, or a mangling it does not know (DF16b: bf16)
        return _nested_name(name) or name
    short = _without_signature(full) or full
    return _fold_templates(short) if len(short) > _MAX_LABEL else short


_SOURCE_NAME = re.compile(r"(\d+)")


def _nested_name(name: str) -> str | None:
    """The qualified name at the front of a mangled symbol, for what the runtime's demangler
    cannot read (older C++ runtimes reject ``DF16b``, the bf16 type of current HIP kernels):
    ``_ZN5aiter24add_rmsnorm_quant_kernelIDF16b…`` -> ``aiter::add_rmsnorm_quant_kernel<…>``."""
    i = 3 if name.startswith("_ZN") else 2
    parts: list[str] = []
    while i < len(name) and name[i] in "KVr" and name.startswith("_ZN"):  # cv-qualifiers of a method
        i += 1
    while i < len(name):
        m = _SOURCE_NAME.match(name, i)
        if m is None:
            break
        n = int(m.group(1))
        start = m.end()
        ident = name[start : start + n]
        if len(ident) < n:
            return None
        parts.append("(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident)
        i = start + n
        if not name.startswith("_ZN"):
            break
    if not parts:
        return None
    qualified = "::".join(parts)
    return qualified + ("<…>" if name[i : i + 1] == "I" else "")


_MAX_LABEL = 100


def _fold_templates(name: str) -> str:
    """``ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<…>>`` -> ``ck_tile::kentry<…>``: a template's
    arguments folded where the whole would not fit a table row (JSON keeps the full name)."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            if depth == 0:
                out.append("<…")
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _without_signature(full: str) -> str:
    """``void ns::k<float, 128>(float*, int)`` -> ``ns::k<float, 128>``."""
    depth = 0
    cut = len(full)
    for i, ch in enumerate(full):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = full[:cut].strip()
    if head.startswith("void "):
        head = head[5:]
    return head


def kernel_labels(names: "list[str] | tuple[str, ...]") -> dict[str, str]:
    """Labels for the mangled names among ``names``; two kernels whose readable names coincide
    (template instances folded to ``<…>``) keep them apart with a short digest of the symbol."""
    import hashlib

    labels = {n: d for n in names if n.startswith("_Z") and (d := demangle(n)) != n}
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    return {n: (f"{d} #{hashlib.sha1(n.encode()).hexdigest()[:6]}" if seen[d] > 1 else d) for n, d in labels.items()}


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
