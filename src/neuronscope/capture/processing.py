"""Turning a stopped capture into a complete Run: trace model, summary, run directory, sinks.

Runs on the background worker. Every failure here is logged and counted; the user's call
finished long ago and never sees it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import _config, _stats
from .._run import Run, RunStatus
from ..analysis.summary import summarize
from ..sinks.rundir import base_manifest, files_of, mark_complete, write_json, write_trace
from ..trace.kineto import trace_from_kineto

__all__ = ["ProcessOptions", "add_sink", "last_run", "process_capture"]

log = logging.getLogger("neuronscope")

#: Callables ``sink(run)`` called for every completed run (OpenTelemetry export registers here).
_sinks: list[Callable[[Run], None]] = []
_last_run: Run | None = None
_last_lock = threading.Lock()


@dataclass(frozen=True)
class ProcessOptions:
    save_trace: bool = True
    backend_info: dict[str, Any] = field(default_factory=dict)
    window: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    backend: Any = None  #: the DeviceBackend, for its finish_run hook
    raw_dir: Path | None = None
    first_call: bool = False


def add_sink(sink: Callable[[Run], None]) -> None:
    if sink not in _sinks:
        _sinks.append(sink)


def remove_sink(sink: Callable[[Run], None]) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


def last_run() -> Run | None:
    """The most recent completed Run in this process (None before the first)."""
    return _last_run


def _set_last(run: Run) -> None:
    global _last_run
    with _last_lock:
        if _last_run is None or run.end_ns >= _last_run.end_ns:
            _last_run = run


def _retention_bytes() -> int | None:
    try:
        return _config.current().retention()[1]
    except Exception:  # noqa: BLE001 - bad env var: already warned when the directory was made
        log.debug("retention settings unreadable", exc_info=True)
        return None


def process_capture(run: Run, kineto_results: Any, run_dir: Path | None, options: ProcessOptions) -> None:
    try:
        trace = trace_from_kineto(kineto_results, device=run.device)
        if options.window is not None and len(trace):
            run.start_ns = trace.start_time_ns  # a schedule window starts at its first event
        summary = summarize(trace)
        run._trace = trace
        run.manifest = {}
        notes: list[str] = []
        if options.backend is not None:
            notes = options.backend.finish_run(run, options.raw_dir, first_call=options.first_call)
        device_facts = run.manifest
        summary = replace(summary, warnings=tuple(run.warnings), notes=tuple(notes))
        run._summary = summary
        run.manifest = base_manifest(
            name=run.name,
            device=run.device,
            status=RunStatus.COMPLETE,
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            error=run.error,
            error_message=run.error_message,
            window=options.window,
            events=len(trace),
            backend=options.backend_info,
            sampling=options.sampling,
            warnings=run.warnings,
            **device_facts,
        )
        if run_dir is not None:
            _write_run_dir(run, kineto_results, run_dir, options)
        for sink in list(_sinks):
            try:
                sink(run)
            except Exception as exc:  # noqa: BLE001 - a sink must never break the others
                _stats.record("errors")
                log.warning("neuronscope: sink %r failed: %s", sink, exc)
        if run_dir is not None and run._path is not None:
            run.manifest["files"] = files_of(run_dir)
            write_json(run_dir / "manifest.json", run.manifest)
        _stats.record("profiled")
        if run_dir is not None:
            mark_complete(run_dir, max_bytes=_retention_bytes())
        run._finish(RunStatus.COMPLETE)
        _set_last(run)
    except Exception as exc:  # noqa: BLE001
        _stats.record("errors")
        log.warning("neuronscope: processing the profile of %r failed: %s", run.name, exc, exc_info=True)
        run.warnings.append(f"processing failed: {exc!r}")
        if run_dir is not None:
            mark_complete(run_dir)
        run._finish(RunStatus.FAILED)


def _write_run_dir(run: Run, kineto_results: Any, run_dir: Path, options: ProcessOptions) -> None:
    try:
        write_json(run_dir / "summary.json", run._summary.to_dict())  # type: ignore[union-attr]
        if options.save_trace:
            write_trace(kineto_results, run_dir / "trace.json.gz", {"neuronscope_device": run.device})
        run._path = run_dir
    except OSError as exc:
        _stats.record("errors")
        msg = f"could not write the run directory {run_dir}: {exc.strerror or exc}"
        run.warnings.append(msg)
        log.warning("neuronscope: %s; the summary stays in memory", msg)
