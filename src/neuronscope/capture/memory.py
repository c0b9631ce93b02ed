"""The memory stage of a capture: allocator records from its segments, then the report.

Kineto's JSON is the one place that holds every record's address cheaply (see
:mod:`neuronscope.trace.memory`). Kineto writes it once per session, so the memory stage
writes it (to a private temporary file) and the output stage gzips that same file into the
run directory instead of asking Kineto again; with ``save_trace=False`` the file is only
read and removed. What a device adds (CUDA's allocator history, Neuron's device totals and
OOM table) lives with its backend in :mod:`.devices`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..trace.memory import MEMORY_EVENT, OOM_EVENT, MemoryRecords, records_from_event_tree, records_from_kineto_json

__all__ = ["segment_records"]

log = logging.getLogger("neuronscope")


def segment_records(seg: Any, raw_dir: Path | None = None) -> MemoryRecords:
    """The allocator records of one segment (its trace model must be read already)."""
    trace = seg.trace
    ids = [i for i, n in enumerate(trace.names) if n == MEMORY_EVENT]
    rows = np.flatnonzero(np.isin(trace.name_id, ids)) if ids else np.zeros(0, dtype=np.int64)
    oom_ids = [i for i, n in enumerate(trace.names) if n == OOM_EVENT]
    ooms = int(np.isin(trace.name_id, oom_ids).sum()) if oom_ids else 0
    if not rows.size and not ooms:
        return MemoryRecords.empty()
    with seg.lock:
        path = _saved_json(seg, raw_dir)
    if path is not None:
        try:
            # read in chunks straight from the file: no copy of the whole trace in memory
            return records_from_kineto_json(
                path,
                trace.start_ns[rows],
                trace.thread[rows],
                base_ns=None,
                default_base_ns=int(trace.base_time_ns),
                oom_events=ooms,
            )
        except (OSError, ValueError) as exc:
            log.info("neuronscope: memory records not read from %s (%s); reading torch's event tree", path, exc)
    if seg.results is None:
        return MemoryRecords.empty()
    return records_from_event_tree(seg.results)


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
            from ..sinks.rundir import already_saved_trace

            found = already_saved_trace(raw_dir)
            return str(found) if found is not None else None
        raise
    seg.saved_json = path
    return path
