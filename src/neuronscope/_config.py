"""Process-wide settings, set with :func:`neuronscope.configure` or ``NEURONSCOPE_*`` variables."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

__all__ = ["Settings", "current", "update"]

DEFAULT_OUTPUT_DIR = "neuronscope-runs"
DEFAULT_MAX_RUNS = 100
DEFAULT_MAX_BYTES = 10 * 1024**3
DEFAULT_MAX_PENDING_BYTES = 256 * 1024**2


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


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
    #: keep Kineto's "USDT: ... profiler_start/stop" stderr lines (None: $NEURONSCOPE_KEEP_USDT)
    keep_usdt_lines: bool | None = None
    #: the per-process control channel that `neuronscope arm PID` talks to (None: on unless NEURONSCOPE_CONTROL=0)
    control: bool | None = None

    def control_enabled(self) -> bool:
        if self.control is not None:
            return self.control
        return os.environ.get("NEURONSCOPE_CONTROL", "").strip().lower() not in ("0", "false", "no", "off")

    def resolved_output_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        if override is not None:
            return Path(override)
        if self.output_dir is not None:
            return self.output_dir
        return Path(os.environ.get("NEURONSCOPE_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR)


    def resolved_max_pending_bytes(self) -> int:
        if self.max_pending_bytes is not None:
            return self.max_pending_bytes
        try:
            return _env_int("NEURONSCOPE_MAX_PENDING_BYTES", DEFAULT_MAX_PENDING_BYTES)
        except ConfigurationError:
            return DEFAULT_MAX_PENDING_BYTES  # a bad variable must not stop profiling (warned at configure)

    def retention(self) -> tuple[int | None, int | None]:
        runs = self.max_runs if self.max_runs is not None else _env_int("NEURONSCOPE_MAX_RUNS", DEFAULT_MAX_RUNS)
        size = self.max_bytes if self.max_bytes is not None else _env_int("NEURONSCOPE_MAX_BYTES", DEFAULT_MAX_BYTES)
        return (runs or None), (size or None)  # 0 means "no limit"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: use a whole number (0 = no limit)") from None
    if value < 0:
        raise ConfigurationError(f"{name}={raw!r}: use a whole number >= 0 (0 = no limit)")
    return value


_lock = threading.Lock()
_settings = Settings(enabled=not _env_flag("NEURONSCOPE_DISABLED"))


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
    """``NEURONSCOPE_DISABLED=1``: the hard kill switch, read when a function is decorated."""
    return _env_flag("NEURONSCOPE_DISABLED")


def is_enabled() -> bool:
    return _settings.enabled
