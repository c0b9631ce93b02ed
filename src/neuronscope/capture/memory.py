"""The memory stage of a capture: allocator records from its segments, then the report.

Kineto's JSON is the one place that holds every record's address cheaply (see
:mod:`neuronscope.trace.memory`). Kineto writes it once per session, so the memory stage
writes it (to a private temporary file) and the output stage gzips that same file into the
run directory instead of asking Kineto again; with ``save_trace=False`` the file is only
read and removed. The CUDA extras (allocator history snapshot, ``max_memory_*``) and the
Neuron extras (the runtime's OOM table) are gathered here too.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..trace.memory import MEMORY_EVENT, MemoryRecords, records_from_event_tree, records_from_kineto_json

__all__ = ["cuda_memory_facts", "neuron_oom_table", "segment_records", "start_history", "dump_history"]

log = logging.getLogger("neuronscope")


def segment_records(seg: Any, raw_dir: Path | None = None) -> MemoryRecords:
    """The allocator records of one segment (its trace model must be read already)."""
    trace = seg.trace
    ids = [i for i, n in enumerate(trace.names) if n == MEMORY_EVENT]
    rows = np.flatnonzero(np.isin(trace.name_id, ids)) if ids else np.zeros(0, dtype=np.int64)
    if not rows.size and not any(n == "[OutOfMemory]" for n in trace.names):
        return MemoryRecords.empty()
    with seg._lock:
        path = _saved_json(seg, raw_dir)
    if path is not None:
        try:
            raw = Path(path).read_bytes()
            return records_from_kineto_json(raw, trace.start_ns[rows], trace.thread[rows], base_ns=_base_ns(raw, trace))
        except (OSError, ValueError) as exc:
            log.info("neuronscope: memory records not read from %s (%s); reading torch's event tree", path, exc)
    if seg.results is None:
        return MemoryRecords.empty()
    return records_from_event_tree(seg.results)


def _base_ns(raw: bytes, trace: Any) -> int:
    m = re.search(rb'"baseTimeNanoseconds":\s*(\d+)', raw[-4096:]) or re.search(rb'"baseTimeNanoseconds":\s*(\d+)', raw[:4096])
    return int(m.group(1)) if m else int(trace.base_time_ns)


def _saved_json(seg: Any, raw_dir: Path | None) -> str | None:
    if seg.saved_json is not None:
        return seg.saved_json
    if seg.results is None:
        return None
    fd, path = tempfile.mkstemp(prefix="neuronscope-trace-", suffix=".json")  # user-only (0600)
    os.close(fd)
    try:
        seg.results.save(path)
    except RuntimeError as exc:
        os.unlink(path)
        if "already saved" in str(exc) and raw_dir is not None:  # a device exporter saved it into the raw files
            from ..sinks.rundir import _already_saved_trace

            found = _already_saved_trace(raw_dir)
            return str(found) if found is not None else None
        raise
    seg.saved_json = path
    return path


# --- CUDA -----------------------------------------------------------------------------------------
def start_history() -> bool:
    """``memory="history"`` on CUDA: record the allocator's history (stacks included)."""
    import torch

    if not torch.cuda.is_available():
        return False
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    return True


def dump_history(run_dir: Path) -> Path | None:
    """Write the snapshot pytorch.org/memory_viz opens into the run directory, stop recording."""
    import torch

    target = run_dir / "memory_snapshot.pickle"
    try:
        torch.cuda.memory._dump_snapshot(str(target))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return target if target.is_file() else None


def cuda_memory_facts() -> dict[str, Any]:
    """``torch.cuda.max_memory_allocated/reserved`` for the manifest (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {
        "cuda_max_memory_allocated": int(torch.cuda.max_memory_allocated()),
        "cuda_max_memory_reserved": int(torch.cuda.max_memory_reserved()),
    }


# --- Neuron ---------------------------------------------------------------------------------------
#: where the Neuron runtime saves its per-device memory table on an out-of-memory error
NEURON_OOM_TABLE_GLOB = "neuron_mem_table_device_*_hbm_*.log"
_SIZE = re.compile(r"^\s*([A-Za-z][\w .()/-]*?)\s*[:|]\s*([\d.]+)\s*([KMGT]i?B|B|bytes)?\s*$", re.I)
_UNITS = {"b": 1, "bytes": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def neuron_oom_table(since_ns: int = 0, directory: str = "/tmp") -> dict[str, Any] | None:
    """The newest ``/tmp/neuron_mem_table_device_<id>_hbm_<idx>.log`` written since the profile
    started, parsed into ``{"file", "device", "hbm", "categories": {name: bytes}, "text"}``."""
    files = [f for f in glob.glob(os.path.join(directory, NEURON_OOM_TABLE_GLOB)) if os.stat(f).st_mtime_ns >= since_ns]
    if not files:
        return None
    newest = max(files, key=lambda f: os.stat(f).st_mtime_ns)
    try:
        text = Path(newest).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"device_(\d+)_hbm_(\d+)", newest)
    return {
        "file": newest,
        "device": int(m.group(1)) if m else None,
        "hbm": int(m.group(2)) if m else None,
        "categories": parse_neuron_mem_table(text),
        "text": text[:20_000],
    }


def parse_neuron_mem_table(text: str) -> dict[str, int]:
    """``category: size`` rows of the runtime's table (sizes with or without units), summed by
    category. Columns separated by ``|`` take the first name and the last size."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if "|" in line and line.count("|") >= 2:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            size = next((c for c in reversed(cells) if _to_bytes(c) is not None), None)
            name = cells[0] if cells and cells[0] and not cells[0][0].isdigit() else None
            if name and size is not None and not set(name) <= set("-=+ "):
                out[name] = out.get(name, 0) + int(_to_bytes(size) or 0)
            continue
        m = _SIZE.match(line)
        if m:
            value = _to_bytes(m.group(2) + (m.group(3) or ""))
            if value is not None:
                out[m.group(1).strip()] = out.get(m.group(1).strip(), 0) + value
    return out


def _to_bytes(cell: str) -> int | None:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]i?B|B|bytes)?\s*", cell, re.I)
    if not m:
        return None
    unit = (m.group(2) or "b").lower()
    return int(float(m.group(1)) * _UNITS.get(unit, 1))
