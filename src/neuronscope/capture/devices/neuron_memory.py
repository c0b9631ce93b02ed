"""Neuron device memory: the allocator's totals and the runtime's out-of-memory table."""

from __future__ import annotations

import glob
import logging
import os
import re
from pathlib import Path
from typing import Any

from ... import _env

log = logging.getLogger("neuronscope")

__all__ = ["NEURON_OOM_TABLE_GLOB", "neuron_memory_stats", "neuron_oom_table", "parse_neuron_mem_table"]

# Source for everything below: the Neuron docs' "Neuron device memory" page
# (aws-neuron-sdk, neuron-runtime/explore/device-memory.rst, section "Out-of-memory (OOM)
# Errors"): on an OOM the runtime logs "Failed to allocate <size> (alignment: ..., usage:
# <category>) on ND <d>:NC <c>", then a table of the current HBM use, one column per category
# (TOTAL, Model Code, Model Constants, Tensors, Shared Scratchpad, Scratchpad, Runtime, DMA Rings
# IO / Spill / Collectives / Runtime, Collectives, XT CC, Profiler Buffers), one row per device
# ("ND 0 Overall", or "ND 0 HBM 0"), NeuronCore ("\_NC 4") and NEFF ("\_NEFF 1001"), followed by
# "NEFF id to name mapping:" lines, and saves it as
# /tmp/neuron_mem_table_device_<device_id>_hbm_<hbm_idx>.log. Older runtimes print
# "Overall HBM usage" with "* <category>: <size>" lines (same page, "Scratchpad" section).
# The page does not say whether KB/MB/GB are powers of 1000 or 1024; the runtime's sizes are
# read as powers of 1024 here (docs/memory.md says so), and the table's text is kept as written.

#: where the Neuron runtime saves its per-device memory table on an out-of-memory error
NEURON_OOM_TABLE_GLOB = "neuron_mem_table_device_*_hbm_*.log"
#: the directory it is saved in (the runtime writes /tmp; tests and the emulator may point elsewhere)
NEURON_OOM_TABLE_DIR_ENV = _env.NEURON_MEM_TABLE_DIR.name
_UNITS = {
    "b": 1,
    "bytes": 1,
    "kb": 1024,
    "mb": 1024**2,
    "gb": 1024**3,
    "tb": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_FAILED = re.compile(r"Failed to allocate\s+([\d.]+\s*[KMGT]?i?B)\s*\(([^)]*)\)\s*on\s+(ND\s*\d+(?::NC\s*\d+)?)", re.I)
_BULLET = re.compile(r"^\s*\*\s*([A-Za-z][\w ]*?)\s*:\s*([\d.]+\s*[KMGT]?i?B)\b", re.I)
_NEFF_NAME = re.compile(r'^\s*(\d+):\s*"(.*)"\s*$')
_ROW_LEVEL = (("NEFF", "neff"), ("NC", "nc"), ("ND", "device"))


def neuron_oom_table(since_ns: int = 0, directory: str | None = None) -> dict[str, Any] | None:
    """The newest ``neuron_mem_table_device_<id>_hbm_<idx>.log`` written since ``since_ns``
    (``/tmp``, or ``$NEURONSCOPE_NEURON_MEM_TABLE_DIR``), parsed by :func:`parse_neuron_mem_table`
    plus ``file``, ``device``, ``hbm`` and the ``text`` itself (first 20,000 characters)."""
    directory = directory or str(_env.NEURON_MEM_TABLE_DIR.get())
    try:
        files = [f for f in glob.glob(os.path.join(directory, NEURON_OOM_TABLE_GLOB)) if os.stat(f).st_mtime_ns >= since_ns]
    except OSError:
        return None
    if not files:
        return None
    newest = max(files, key=lambda f: os.stat(f).st_mtime_ns)
    try:
        text = Path(newest).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"device_(\d+)_hbm_(\d+)", os.path.basename(newest))
    out: dict[str, Any] = {"file": newest, "device": int(m.group(1)) if m else None, "hbm": int(m.group(2)) if m else None}
    out.update(parse_neuron_mem_table(text))
    out["text"] = text[:20_000]
    return out


def parse_neuron_mem_table(text: str) -> dict[str, Any]:
    """The runtime's OOM memory table as data::

    {"categories": {"Tensors": 21474836480, "Model Code": ..., ...},   # the first device row, TOTAL excluded
     "total_bytes": int | None,                                       # its TOTAL
     "rows": [{"name": "ND 0 Overall", "level": "device"|"nc"|"neff",
               "total_bytes": int | None, "categories": {...}}, ...],  # "n/a" cells left out
     "neffs": {"1001": "1.0.41235.0+df4a714bb-/local/out-test0_meta_dense", ...},
     "failed_allocation": {"bytes": int, "usage": "tensors", "where": "ND 0:NC 4"} | None}
    """
    lines = text.splitlines()
    header: list[list[str]] = []
    rows: list[dict[str, Any]] = []
    neffs: dict[str, str] = {}
    bullets: dict[str, int] = {}
    failed = None
    in_names = False
    for line in lines:
        fm = _FAILED.search(line)
        if fm and failed is None:
            opts = dict(kv.split(":", 1) for kv in fm.group(2).split(",") if ":" in kv)
            failed = {
                "bytes": _to_bytes(fm.group(1)),
                "usage": (opts.get(" usage") or opts.get("usage") or "").strip() or None,
                "where": re.sub(r"\s+", " ", fm.group(3)),
            }
            continue
        if "NEFF id to name mapping" in line:
            in_names = True
            continue
        if in_names:
            nm = _NEFF_NAME.match(line)
            if nm:
                neffs[nm.group(1)] = nm.group(2)
                continue
        bm = _BULLET.match(line)
        if bm:
            value = _to_bytes(bm.group(2))
            if value is not None:
                bullets[_category(bm.group(1))] = value
            continue
        if line.count("|") < 2:
            continue
        cells = line.split("|")
        label, values = cells[0].strip(), [c.strip() for c in cells[1:]]
        if values and not values[-1]:
            values = values[:-1]
        if not label:  # a header line: its cells stack into column names
            header.append(values)
            continue
        level = next((lv for key, lv in _ROW_LEVEL if re.match(rf"^[\\_\s]*{key}\b", label)), None)
        if level is None:
            continue
        names = _columns(header, len(values))
        row_cats: dict[str, int] = {}
        total = None
        for name, cell in zip(names, values):
            value = _to_bytes(cell)
            if value is None:
                continue  # "n/a"
            if name.upper() == "TOTAL":
                total = value
            else:
                row_cats[name] = value
        rows.append({"name": re.sub(r"^[\\_\s]+", "", label), "level": level, "total_bytes": total, "categories": row_cats})
    first = next((r for r in rows if r["level"] == "device"), rows[0] if rows else None)
    categories = dict(first["categories"]) if first else {k: v for k, v in bullets.items() if k.lower() != "total"}
    total = first["total_bytes"] if first else bullets.get("Total")
    return {"categories": categories, "total_bytes": total, "rows": rows, "neffs": neffs, "failed_allocation": failed}


def _columns(header: list[list[str]], n: int) -> list[str]:
    """Column names from the stacked header lines ("Model" over "Code" -> "Model Code")."""
    out = []
    for i in range(n):
        parts = [h[i] for h in header if i < len(h) and h[i]]
        out.append(_category(" ".join(parts)) if parts else f"column {i}")
    return out


def _category(name: str) -> str:
    return " ".join(w if w.isupper() and len(w) <= 3 else w.capitalize() for w in name.split())


def _to_bytes(cell: str) -> int | None:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B|bytes)?\s*", cell, re.I)
    if not m:
        return None
    unit = (m.group(2) or "b").lower()
    return int(round(float(m.group(1)) * _UNITS.get(unit, 1)))


def neuron_memory_stats() -> dict[str, int]:
    """The device allocator's totals from torch-neuronx, where it has them.

    The Neuron docs' "How to profile memory usage in torch-neuronx" guide
    (torch/guides/memory-profiling-guide) documents ``memory_stats`` / ``memory_allocated``
    style APIs and says to call ``torch.neuron.synchronize()`` before reading any of them (the
    allocator is asynchronous). The keys read here are PyTorch's accelerator allocator keys
    (``allocated_bytes.all.current`` / ``.peak``, ``reserved_bytes.all.current`` / ``.peak``;
    ``torch.accelerator.memory_stats``); the guide's own key list is not restated in the
    parts of the docs this was written from, so other keys are ignored. Empty when there
    is no ``torch.neuron`` module or it has no ``memory_stats``."""
    import torch

    mod = getattr(torch, "neuron", None)
    stats_fn = getattr(mod, "memory_stats", None)
    if stats_fn is None:
        return {}
    try:
        sync = getattr(mod, "synchronize", None)
        if sync is not None:
            sync()
        raw = stats_fn()
    except Exception as exc:  # noqa: BLE001 - the stats are extra: never fail the run for them
        log.info("neuronscope: torch.neuron.memory_stats() failed: %s", exc)
        return {}
    keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current", "reserved_bytes.all.peak")
    return {k: int(raw[k]) for k in keys if isinstance(raw, dict) and isinstance(raw.get(k), (int, float))}
