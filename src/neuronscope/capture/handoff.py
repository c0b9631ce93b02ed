"""What a capture hands the processing stage besides its segments: the run directory it writes
to (made on the output worker, or at the start for devices that write raw files while recording),
the roofs it is measured against, and a distributed run's manifest facts."""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from .. import _config, _ranks, _stats
from ..sinks.rundir import create_run_dir, mark_complete
from .devices import DeviceBackend

__all__ = ["device_limits", "discard_dir", "make_run_dir", "rank_manifest"]

log = logging.getLogger("neuronscope")

_warned_dirs: set[str] = set()


def make_run_dir(
    output_dir: str | os.PathLike[str] | None,
    name: str,
    start_ns: int,
    rank: _ranks.RankInfo | None = None,
    status: str = "processing",
) -> Path | None:
    """Create the run directory (its manifest saying ``status``) under the profile's
    ``output_dir`` (None: the configured one); on failure warn once per output dir and carry on
    in memory."""
    settings = _config.current()
    root = settings.resolved_output_dir(output_dir)
    if rank is not None:  # <output_dir>/<job id>/rank<N>/: ranks never share a directory
        root = root / rank.job_dir / f"rank{rank.rank}"
    max_runs, max_bytes = settings.retention()  # a malformed NEURONSCOPE_MAX_*: warned once, default used
    try:
        return create_run_dir(root, name, start_ns, max_runs=max_runs, max_bytes=max_bytes, status=status)
    except OSError as exc:
        key = str(root)
        if key not in _warned_dirs:
            _warned_dirs.add(key)
            message = (
                f"neuronscope: cannot write run directories under {root} ({exc.strerror or exc}); "
                "summaries stay in memory (run.summary). Set output_dir= or NEURONSCOPE_OUTPUT_DIR to a writable path."
            )
            # once, as a RuntimeWarning (filterable); no logging line too. It is raised on the
            # output worker, so no frame of the user's is there to point at: one plain line.
            warnings.warn_explicit(message, RuntimeWarning, "neuronscope", 0, module="neuronscope")
        return None


def discard_dir(path: Path) -> None:
    """Remove the directory of a capture that never started (and mark it complete for retention)."""
    shutil.rmtree(path, ignore_errors=True)
    mark_complete(path)


def device_limits(record_shapes: bool, backend: DeviceBackend, name: str, warn: Any = None) -> Any:
    """The roofs a profile with shapes is measured against: configured, else the device's own
    (a CPU's are measured here once per host, 1-3 s, while no profile records; then cached)."""
    if not record_shapes:
        return None
    configured = _config.current().device_limits
    if configured is not None:
        return configured
    try:
        return backend.device_limits()
    except Exception as exc:  # noqa: BLE001 - no roofs is a missing column, never a failed run
        _stats.contain("device limits", exc, name=name, warnings=warn, exc_info=False)
        return None


def rank_manifest(info: _ranks.RankInfo | None, call_index: int, ranks: frozenset[int] | None) -> dict[str, Any]:
    """A distributed run's manifest facts: which rank, which call of the profile, which ranks profile."""
    if info is None:
        return {}  # a single-process run: the manifest is as it always was
    facts = info.manifest()
    facts["distributed"]["call_index"] = call_index
    facts["distributed"]["profiled_ranks"] = sorted(ranks) if ranks is not None else "all"
    return facts
