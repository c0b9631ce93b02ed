"""Module-level functions of the public API."""

from __future__ import annotations

import atexit
import logging
import os
from pathlib import Path
from typing import Any

from . import _config
from .errors import ConfigurationError
from ._run import Run
from ._worker import get_worker
from .capture.processing import last_run as _last_run
from .sinks.rundir import load_run as _load_run
from .trace.chrome import load_trace as _load_trace
from .trace.model import Trace

__all__ = ["configure", "flush", "last_run", "load_run", "load_trace"]

log = logging.getLogger("neuronscope")

_UNSET: Any = object()


def configure(*, enabled: bool = _UNSET, output_dir: str | os.PathLike[str] | None = _UNSET) -> None:
    """Set process-wide options. Only the arguments given change.

    ``enabled=False`` turns every profile and region into a plain call (as
    ``NEURONSCOPE_DISABLED=1`` does). ``output_dir`` is where run directories go
    (default ``$NEURONSCOPE_OUTPUT_DIR`` or ``./neuronscope-runs``).
    """
    changes: dict[str, Any] = {}
    if enabled is not _UNSET:
        if not isinstance(enabled, bool):
            raise ConfigurationError(f"configure(enabled={enabled!r}): use True or False")
        changes["enabled"] = enabled
    if output_dir is not _UNSET:
        if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
            raise ConfigurationError(f"configure(output_dir={output_dir!r}): use a path or None")
        changes["output_dir"] = Path(output_dir) if output_dir is not None else None
    _config.update(**changes)


def flush(timeout: float | None = 30.0) -> bool:
    """Wait until every finished profile has been processed and exported.

    Returns False if ``timeout`` seconds passed first.
    """
    return get_worker().flush(timeout)


def last_run() -> Run | None:
    """The most recent completed :class:`Run` in this process, or None."""
    return _last_run()


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a Kineto ``trace.json`` / ``.json.gz`` (or a run directory) into a :class:`Trace`."""
    return _load_trace(path)


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a saved run directory as a completed :class:`Run`."""
    return _load_run(path)


def _flush_at_exit() -> None:
    timeout = float(os.environ.get("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", "10"))
    if not get_worker().flush(timeout):
        log.warning("neuronscope: pending profiles not processed within %.0f s at exit", timeout)


atexit.register(_flush_at_exit)
