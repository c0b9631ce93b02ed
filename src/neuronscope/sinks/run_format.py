"""The run directory's format: one :class:`~neuronscope.result.RunResult` written as files and
read back, here and nowhere else.

``manifest.json``  the result's ``manifest``: the common header (``schema_version``, versions,
                   host, pid, program), the run's name, device, status, times, warnings, what
                   the capture and the device added, the diagnosis' verdict, the files
``summary.json``   the Summary, with the Diagnosis (``"diagnosis"``) and the MemoryReport (``"memory"``)
``rank.json``      a rank's profile (``neuronscope ranks``), for a rank of a torchrun job
``trace.json.gz``  the Kineto trace: written by the output stage before any sink (it needs the
                   capture's Kineto results), read on demand (``Run.trace``, ``load_trace``)

:func:`manifest_of` composes the manifest, :class:`RunDirectorySink` writes summary.json and
rank.json (a :class:`~neuronscope.sinks.Sink` like the others), :func:`write_manifest` the
final manifest.json, :func:`read_result` reads them all back. ``schema_version``
(:data:`FORMAT_VERSION`) says which format wrote a directory: a newer one is read as far as this
version understands it, with a warning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._run import RunStatus
from ..errors import TraceLoadError
from ..result import Analysis, Annotation, CaptureFacts, Coverage, RunResult
from .rundir import IN_FLIGHT_STATUSES, MANIFEST_SCHEMA_VERSION, base_manifest, files_of, write_json

if TYPE_CHECKING:
    from .._run import Run

__all__ = [
    "FORMAT_VERSION",
    "RANK_FILE",
    "RUN_DIRECTORY",
    "RunDirectorySink",
    "load_run",
    "manifest_of",
    "read_manifest",
    "read_rank_profile",
    "read_result",
    "write_manifest",
]

#: the format this module writes and reads (manifest.json's ``schema_version``)
FORMAT_VERSION = MANIFEST_SCHEMA_VERSION
#: a rank's profile for ``neuronscope ranks`` (``analysis.ranks.RANK_FILE``, the same name: a test
#: checks). Not imported from there: that module loads numpy, which ``neuronscope show`` must not.
RANK_FILE = "rank.json"


# -- writing ------------------------------------------------------------------------------------
def manifest_of(
    result: RunResult,
    *,
    window: int | None,
    events: int,
    segments: int,
    backend: Mapping[str, Any],
    sampling: Mapping[str, Any],
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """manifest.json's fields for ``result``, with what the capture adds: its window, events,
    segments, backend and sampling, and ``extra`` (rank, job, ...: ``ProcessOptions.extra_manifest``)."""
    analysis = result.analysis
    trigger: dict[str, Any] = {"trigger": result.trigger.to_dict()} if result.trigger is not None else {}
    fields = {k: getattr(result, k) for k in ("name", "device", "status", "start_ns", "end_ns", "error", "error_message")}
    manifest = base_manifest(
        **fields,
        window=window,
        events=events,
        segments=segments,
        backend=backend,
        sampling=sampling,
        warnings=list(result.warnings),
        **extra,
        **(analysis.device.manifest if analysis is not None else {}),
        **trigger,
        **result.annotation.manifest,
    )
    if analysis is None:
        return manifest
    if analysis.diagnosis is not None:
        manifest["bound_by"] = analysis.diagnosis.bound_by
        manifest["device_busy_pct"] = round(analysis.diagnosis.device_busy_pct, 2)
    if analysis.memory is not None:
        manifest["memory_peak_bytes"] = analysis.memory.peak_bytes
    if analysis.coverage is not None:
        manifest["coverage"] = analysis.coverage.to_dict()
        manifest["events"] = analysis.coverage.events
    return manifest


def write_manifest(result: RunResult, *, status: str | None = None) -> RunResult:
    """Write ``result``'s manifest.json (write-then-rename: readable at every instant). With
    ``status`` ("processing"), what the run is while its files land; without, the final one,
    listing the files."""
    assert result.path is not None
    if status is not None:
        write_json(result.path / "manifest.json", {**result.manifest, "status": status})
        return result
    manifest = {**result.manifest, "files": files_of(result.path)}
    write_json(result.path / "manifest.json", manifest)
    return replace(result, manifest=manifest)


class RunDirectorySink:
    """summary.json (with the diagnosis and memory report) and rank.json, in the run directory
    the output stage made and wrote the trace into; nothing for a run without a directory.
    Raises ``OSError`` when the directory cannot be written (contained like any sink's failure)."""

    name = "run directory"

    def export(self, result: RunResult) -> None:
        if result.path is None:
            return
        summary: dict[str, Any] = result.summary.to_dict() if result.summary is not None else {}
        if result.diagnosis is not None:
            summary["diagnosis"] = result.diagnosis.to_dict()
        if result.memory is not None:
            summary["memory"] = result.memory.to_dict()
        write_json(result.path / "summary.json", summary)
        rank = result.analysis.rank_profile if result.analysis is not None else None
        if rank is not None:
            write_json(result.path / RANK_FILE, dict(rank))

    def force_flush(self, timeout_s: float | None) -> bool:
        return True  # every write is done when export returns

    def shutdown(self) -> None:
        pass


#: the one run-directory sink (stateless)
RUN_DIRECTORY = RunDirectorySink()


# -- reading ------------------------------------------------------------------------------------
def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a saved run directory as a completed :class:`~neuronscope.Run`."""
    from .._run import Run

    return Run.from_result(read_result(path))


def read_result(path: str | os.PathLike[str]) -> RunResult:
    """The :class:`~neuronscope.result.RunResult` a run directory holds (its trace is read on
    demand: ``analysis.trace`` is None, unless the directory holds a trace and no summary)."""
    p = Path(path)
    manifest, warnings = read_manifest(p)
    status = str(manifest.get("status", RunStatus.COMPLETE))
    if status in IN_FLIGHT_STATUSES:
        # written by a process that stopped (or has not finished yet): what is here is what it wrote
        warnings.append(
            f"incomplete run: its manifest says {status!r} — the process stopped (killed, out of memory) before the run "
            "was written; what is here is what it wrote"
        )
        status = RunStatus.INCOMPLETE
    device = str(manifest.get("device", "cpu"))
    trigger, annotation = _read_trigger(manifest, warnings)
    analysis = _read_analysis(p, device, warnings)
    coverage = Coverage.from_dict(manifest["coverage"]) if isinstance(manifest.get("coverage"), dict) else None
    return RunResult(
        name=str(manifest.get("name", p.name)),
        device=device,
        status=status,
        start_ns=int(manifest.get("start_ns", 0)),
        end_ns=int(manifest.get("end_ns", 0)),
        error=manifest.get("error"),
        error_message=manifest.get("error_message"),
        warnings=tuple(warnings),
        analysis=replace(analysis, warnings=tuple(warnings), coverage=coverage),
        capture=CaptureFacts(trigger=trigger),
        manifest=manifest,
        path=p,
        annotation=annotation,
    )


def read_manifest(p: Path) -> tuple[dict[str, Any], list[str]]:
    """A run directory's manifest.json and the warnings it holds (plus one when a newer format
    wrote it); :class:`~neuronscope.TraceLoadError` when it is missing, unreadable or not ours.
    What ``neuronscope ranks`` reads of every rank's run (``sinks/jobdir.py``)."""
    manifest_file = p / "manifest.json"
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TraceLoadError(f"{p}: not a neuronscope run directory (no manifest.json)") from exc
    except (OSError, ValueError) as exc:
        raise TraceLoadError(f"{manifest_file}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or "schema_version" not in manifest:
        raise TraceLoadError(f"{manifest_file}: not a neuronscope manifest (no schema_version)")
    warnings = list(manifest.get("warnings", []))
    version = manifest["schema_version"]
    if not isinstance(version, int) or version > FORMAT_VERSION:
        warnings.append(
            f"{manifest_file}: written in run-directory format {version!r}, newer than this neuronscope's "
            f"({FORMAT_VERSION}): read as far as format {FORMAT_VERSION} goes"
        )
    return manifest, warnings


def _read_analysis(p: Path, device: str, warnings: list[str]) -> Analysis:
    """summary.json's Summary, Diagnosis and MemoryReport, and rank.json; a directory with a
    trace and no summary.json (a run that stopped before it was written) is summarised."""
    from ..analysis.summary import Summary

    summary = diagnosis = memory = trace = None
    summary_file = p / "summary.json"
    if summary_file.is_file():
        try:
            data = json.loads(summary_file.read_text(encoding="utf-8"))
            summary = Summary.from_dict(data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise TraceLoadError(f"{summary_file}: unreadable summary: {exc!r}") from exc
        if isinstance(data.get("memory"), dict):
            from ..analysis.memory_model import MemoryReport

            try:
                memory = MemoryReport.from_dict(data["memory"])
            except (ValueError, TypeError, KeyError) as exc:
                warnings.append(f"unreadable memory report in {summary_file}: {exc!r}")
        if isinstance(data.get("diagnosis"), dict):
            from ..analysis.diagnosis.model import Diagnosis

            try:
                diagnosis = Diagnosis.from_dict(data["diagnosis"])
            except (ValueError, TypeError, KeyError) as exc:  # an older or damaged diagnosis: recomputed on demand
                warnings.append(f"unreadable diagnosis in {summary_file}: {exc!r}")
    elif (p / "trace.json.gz").is_file() or (p / "trace.json").is_file():
        from ..analysis.summary import summarize
        from ..trace.chrome import load_trace

        trace = load_trace(p, device=device)
        summary = summarize(trace)
    rank = read_rank_profile(p, strict=False)
    return Analysis(trace=trace, summary=summary, diagnosis=diagnosis, memory=memory, rank_profile=rank)


def read_rank_profile(p: Path, *, strict: bool) -> Any:
    """rank.json: what a rank of a distributed job handed ``neuronscope ranks`` (None: none).
    ``strict``: an unreadable file raises :class:`~neuronscope.TraceLoadError` (comparing the
    ranks needs it) instead of reading as none (showing the run does not)."""
    path = p / RANK_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if strict:
            raise TraceLoadError(f"{path}: unreadable: {exc}") from exc
        return None


def _read_trigger(manifest: dict[str, Any], warnings: list[str]) -> tuple[Any, Annotation]:
    """(trigger, Annotation) of a run captured on demand (issue 18)."""
    if not isinstance(manifest.get("trigger"), dict):
        return None, Annotation()
    from .._trigger import Trigger, explanation_from_dict

    try:
        trigger = Trigger.from_dict(manifest["trigger"])
        baseline = Path(manifest["baseline"]) if isinstance(manifest.get("baseline"), str) else None
        explanation = explanation_from_dict(manifest["explanation"]) if isinstance(manifest.get("explanation"), dict) else None
        return trigger, Annotation(baseline=baseline, explanation=explanation)
    except (ValueError, TypeError, KeyError) as exc:  # a damaged entry must not make the run unreadable
        warnings.append(f"unreadable trigger in the manifest: {exc!r}")
        return None, Annotation()
