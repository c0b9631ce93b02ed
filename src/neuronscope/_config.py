"""Process-wide settings, set with :func:`neuronscope.configure` or ``NEURONSCOPE_*`` variables
(read through :mod:`._env`; a malformed one is warned about once and its default used here)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import _env
from .errors import ConfigurationError

__all__ = ["Settings", "current", "update"]

DEFAULT_OUTPUT_DIR = str(_env.OUTPUT_DIR.default)
DEFAULT_MAX_RUNS = _env.MAX_RUNS.default
DEFAULT_MAX_BYTES = _env.MAX_BYTES.default
DEFAULT_MAX_PENDING_BYTES = _env.MAX_PENDING_BYTES.default


@dataclass(frozen=True)
class Settings:
    enabled: bool = True
    output_dir: Path | None = None  #: None: $NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs, read per run
    #: memory the backlog of stopped-but-unwritten captures may hold before new samples are
    #: skipped (None: $NEURONSCOPE_MAX_PENDING_BYTES or 256 MiB; 0: no limit)
    max_pending_bytes: int | None = None
    #: retention of run directories in the output dir (oldest removed first; None = no limit)
    max_runs: int | None = None  # None: $NEURONSCOPE_MAX_RUNS or DEFAULT_MAX_RUNS
    max_bytes: int | None = None  # None: $NEURONSCOPE_MAX_BYTES or DEFAULT_MAX_BYTES
    #: how far below the program's the priority (nice) of the thread that analyses windows is,
    #: read when it starts (None: $NEURONSCOPE_WORKER_NICE or 5; 0: the program's priority)
    worker_nice: int | None = None
    #: keep Kineto's "USDT: ... profiler_start/stop" stderr lines (None: $NEURONSCOPE_KEEP_USDT)
    keep_usdt_lines: bool | None = None
    #: the per-process control channel that `neuronscope arm PID` talks to (None: on unless NEURONSCOPE_CONTROL=0)
    control: bool | None = None
    #: the device's roofs for the roofline (an analysis.roofs.DeviceLimits); None: the device's own
    #: (a CPU measured once per host, a GPU or NeuronCore from the vendor table)
    device_limits: Any = None

    def control_enabled(self) -> bool:
        if self.control is not None:
            return self.control
        return _env.CONTROL.get(lenient=True)

    def resolved_output_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        if override is not None:
            return Path(override)
        if self.output_dir is not None:
            return self.output_dir
        return _env.OUTPUT_DIR.get()

    def resolved_max_pending_bytes(self) -> int:
        if self.max_pending_bytes is not None:
            return self.max_pending_bytes
        return _env.MAX_PENDING_BYTES.get(lenient=True)  # read per call: a typo must not stop profiling

    def resolved_worker_nice(self) -> int:
        if self.worker_nice is not None:
            return self.worker_nice
        return _env.WORKER_NICE.get(lenient=True)  # read on the worker: a typo must not stop its work

    def retention(self) -> tuple[int | None, int | None]:
        """(max runs, max bytes) of the output dir, None = no limit. Read per run, on the
        workers too: a malformed variable is warned about once and its default used."""
        runs = self.max_runs if self.max_runs is not None else _env.MAX_RUNS.get(lenient=True)
        size = self.max_bytes if self.max_bytes is not None else _env.MAX_BYTES.get(lenient=True)
        return (runs or None), (size or None)  # 0 means "no limit"


_lock = threading.Lock()
_settings = Settings(enabled=not _env.DISABLED.get(lenient=True))  # at import: never raise


def current() -> Settings:
    return _settings


def update(**changes: Any) -> Settings:
    global _settings
    unknown = set(changes) - set(Settings.__dataclass_fields__)
    if unknown:
        raise ConfigurationError(f"unknown setting(s): {sorted(unknown)}")
    if "output_dir" in changes and changes["output_dir"] is not None:
        changes["output_dir"] = Path(changes["output_dir"])
    with _lock:
        _settings = replace(_settings, **changes)
        return _settings


def disabled_by_environment() -> bool:
    """``NEURONSCOPE_DISABLED=1``: the hard kill switch, read when a function is decorated.
    Lenient: it is read at import too, and a kill switch must never break the application."""
    return _env.DISABLED.get(lenient=True)


def is_enabled() -> bool:
    return _settings.enabled
