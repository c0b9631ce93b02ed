"""Turning a stopped capture into a finished run, in two background stages.

1. **analysis** (:func:`analyse`, analysis worker): the trace model from the capture's
   segments, the summary — ``run.summary`` returns now — then the diagnosis, the memory
   report and the rank profile: one frozen :class:`~neuronscope.result.Analysis`.
2. **output** (:func:`write_out`, output worker): slow device enrichment (Neuron Explorer),
   the manifest, the files only the capture can write (the trace from the Kineto results, the
   device's memory files), then :func:`neuronscope.sinks.export`: every sink in order (the run
   directory's summary, OpenTelemetry, Prometheus) with one :class:`~neuronscope.result.RunResult`;
   then the final manifest.json, the Kineto results are released and ``run.path`` /
   ``ns.flush()`` return.

Each stage reads the previous one's frozen product and publishes its own through the
:class:`~neuronscope.Run` handle. Every failure is contained here (``_stats.contain``): the
user's call finished long ago and never sees it, and a failing part costs only itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import _config, _stats, _worker
from .._run import Run, RunStatus
from ..analysis.analyse import AnalyseOptions, MemoryInput, with_device_facts
from ..analysis.analyse import analyse as analyse_trace
from ..result import Analysis, Annotation, Coverage, DeviceFacts, RunResult
from .. import sinks
from ..sinks.run_format import manifest_of, write_manifest
from ..sinks.rundir import mark_complete, write_trace, write_trace_model
from ..trace.kineto import trace_from_kineto

__all__ = [
    "ProcessOptions",
    "analyse",
    "analyse_segments",
    "finish_windows",
    "last_run",
    "release_segments",
    "set_last_run",
    "submit",
    "write_out",
]

_last_run: Run | None = None
_last_lock = threading.Lock()


@dataclass(frozen=True)
class ProcessOptions:
    save_trace: bool = True
    backend_info: dict[str, Any] = field(default_factory=dict)
    window: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    backend: Any = None  #: the DeviceBackend: its finish_run, enrich and memory hooks
    raw_dir: Path | None = None
    first_call: bool = False
    serial: int = 0  #: the capture's serial (its markers in the trace)
    only_own_thread: bool = False
    extra_manifest: dict[str, Any] = field(default_factory=dict)  #: rank, job, ... (added by the caller)
    #: called on the output worker with the analysis: what a trigger adds (baseline, explanation)
    annotate: Callable[[Analysis], Annotation] | None = None
    memory: str | None = None  #: "on" | "history": the memory stage runs (profile_neuron(memory=...))
    #: a profile that stopped recording at a limit (capture/budget.py): what it covers, events counted here
    coverage: Coverage | None = None
    #: the device's roofs for the roofline (analysis/roofs.py DeviceLimits); None: the trace's own, if any
    limits: Any = None


def last_run() -> Run | None:
    """The most recent profiled Run in this process (None before the first)."""
    return _last_run


def set_last_run(run: Run) -> None:
    """Called when a capture ends, before processing: ``ns.last_run()`` has it at once."""
    global _last_run
    with _last_lock:
        if _last_run is None or run.end_ns >= _last_run.end_ns:
            _last_run = run


def submit(run: Run, segments: list[Any], run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions) -> None:
    """Queue a stopped capture for processing (never blocks, never drops)."""
    _worker.get_worker().submit(lambda: analyse(run, segments, run_dir, options))


def release_segments(segments: list[Any]) -> None:
    """Drop this run's hold on its segments; the last holder frees their events and backlog bytes."""
    for seg in segments:
        if seg.release():
            _worker.backlog.remove(id(seg))


# -- stage 1: analysis ----------------------------------------------------------------------------
def analyse(run: Run, segments: list[Any], run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions) -> None:
    """Trace model, summary (then ``run.summary`` returns), diagnosis, memory, rank profile."""
    try:
        analysis = analyse_segments(run, segments, options)
    except Exception as exc:  # noqa: BLE001
        _fail(run, exc, segments, run_dir)
        return
    _worker.output_worker().submit(lambda: write_out(run, segments, analysis, run_dir, options))


def analyse_segments(run: Run, segments: list[Any], options: ProcessOptions) -> Analysis:
    """The capture's part (the segments merged, the window, the device's facts), then the one
    analysis (analysis/analyse.py) with what the capture knows: :func:`analyse` here, and each
    window of a windowed run (capture/windows.py)."""
    from ..analysis.names import compiled_functions
    from .merge import merge_segments

    trace = merge_segments(
        [_segment_trace(seg, run.device) for seg in segments],
        [seg.continued for seg in segments],
        own_serial=options.serial,
        only_own_thread=options.only_own_thread and any(seg.all_threads for seg in segments),
    )
    if options.window is not None and len(trace):
        run.start_ns = trace.start_time_ns  # a schedule window starts at its first event
    warnings = list(run.capture_warnings())
    coverage = None
    if options.coverage is not None and options.window is None:
        coverage = replace(options.coverage, events=len(trace))
        warnings.append(coverage.line() + ": the summary and diagnosis cover what was recorded")
    device = DeviceFacts()
    if options.backend is not None:
        device = options.backend.finish_run(run.name, trace, options.raw_dir, first_call=options.first_call)
        warnings += device.warnings
    facts = dict(device.manifest)
    if run.capture.cpu_contention is not None:
        facts["cpu_contention"] = run.capture.cpu_contention
    analysis = analyse_trace(
        trace,
        AnalyseOptions(
            facts=facts,
            serial=options.serial,
            compiled_functions=compiled_functions(),
            limits=options.limits,
            warnings=tuple(warnings),
            device=device,
            coverage=coverage,
            memory=(lambda: _memory_input(run, trace, segments, options)) if options.memory else None,
            rank_profile="rank" in options.extra_manifest,
            on_summary=lambda summary: run.publish_summary(summary, trace),
            contain_for=run.name,
        ),
    )
    run.publish_analysis(analysis)
    return analysis


def finish_windows(run: Run, windowed: Any, stopped: str | None, run_dir: Any, options: ProcessOptions) -> None:
    """A profile in windows ended (analysis worker, after its last window): the fold of its
    windows becomes the run's analysis, written like any run's."""
    try:
        analysis = windowed.folded(stopped, start_ns=run.start_ns, end_ns=run.end_ns)
        if analysis is None:
            run.warn("no window was recorded: nothing to summarise")
            _stats.record("failed")
            run.finish(RunStatus.FAILED)
            return
        warnings = [*run.capture_warnings(), *analysis.warnings]
        analysis = replace(analysis, warnings=tuple(dict.fromkeys(warnings)))
        run.publish_analysis(analysis)
    except Exception as exc:  # noqa: BLE001
        _fail(run, exc, [], run_dir)
        return
    options = replace(options, save_trace=False, coverage=None)
    _worker.output_worker().submit(windowed.write_final_index)  # before the run's summary.json
    _worker.output_worker().submit(lambda: write_out(run, [], analysis, run_dir, options))


def _segment_trace(seg: Any, device: str) -> Any:
    with seg.lock:
        if seg.trace is None:
            seg.trace = trace_from_kineto(seg.results, device=device)
            _worker.backlog.measured(id(seg), len(seg.trace), seg.stop_ns - seg.start_ns, getattr(seg.owner, "name", None))
        return seg.trace


def _memory_input(run: Run, trace: Any, segments: list[Any], options: ProcessOptions) -> MemoryInput:
    """The memory stage's input: the allocator records of the capture's segments (within the
    trace's window) and what the device says of its memory. Called inside the analysis' memory
    part, so a failure here costs only the memory report."""
    from ..trace.memory import MemoryRecords
    from .memory import segment_records

    records = MemoryRecords.concat([segment_records(seg, options.raw_dir) for seg in segments])
    lo, hi = trace.start_time_ns, trace.end_time_ns
    if len(records) and (records.time_ns[0] < lo or records.time_ns[-1] > hi):
        records = records.select((records.time_ns >= lo) & (records.time_ns <= hi))
    facts: dict[str, Any] = {}
    if options.backend is not None:
        facts = options.backend.memory_facts(run.capture, error=run.error, start_ns=run.start_ns)
    return MemoryInput(
        records,
        device_facts=facts,
        error=run.error,
        run_device=run.device,
        start_ns=run.start_ns,
        end_ns=run.end_ns,
        all_threads=any(seg.all_threads for seg in segments),
    )


# -- stage 2: output --------------------------------------------------------------------------------
def write_out(
    run: Run, segments: list[Any], analysis: Analysis, run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions
) -> None:
    """Enrichment, the run directory and every sink; then the Kineto results are released."""
    where: Path | None = None
    try:
        warnings = list(analysis.warnings)
        analysis = _enriched(run, analysis, options, warnings)
        try:
            where = run_dir() if callable(run_dir) else run_dir
        except Exception as exc:  # noqa: BLE001 - no directory, but the run still completes in memory
            _stats.contain("creating the run directory", exc, name=run.name, exc_info=False)
        annotation = _annotation(run, analysis, options, warnings)
        status = RunStatus.ERROR if run.error else RunStatus.COMPLETE
        result = RunResult(
            name=run.name,
            device=run.device,
            status=status,
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            error=run.error,
            error_message=run.error_message,
            analysis=analysis,
            capture=run.capture,
            path=where,
            annotation=annotation,
            warnings=tuple(warnings),
        )
        result = replace(result, manifest=_manifest(result, segments, options))
        result = _write_files(result, segments, options)
        result = sinks.export(result)
        if result.path is not None:
            result = write_manifest(result)  # the final manifest.json, listing the files
        _stats.record("profiled")
        if result.path is not None:
            mark_complete(result.path, max_bytes=_retention_bytes())
        run.complete(result)
    except Exception as exc:  # noqa: BLE001
        _fail(run, exc, [], where)
    finally:
        release_segments(segments)


def _enriched(run: Run, analysis: Analysis, options: ProcessOptions, warnings: list[str]) -> Analysis:
    """The analysis with the device's slow enrichment added (after ``run.summary`` was published)."""
    if options.backend is None:
        return analysis
    try:
        extra = options.backend.enrich(run.name, options.raw_dir, analysis.device)
    except Exception as exc:  # noqa: BLE001 - Explorer is extra; the run is kept without it
        _stats.contain("device enrichment", exc, name=run.name, warnings=warnings)
        return analysis
    if not (extra.manifest or extra.notes or extra.warnings or extra.system_profile is not None):
        return analysis
    warnings += extra.warnings
    return with_device_facts(analysis, extra, warnings=tuple(warnings))


def _annotation(run: Run, analysis: Analysis, options: ProcessOptions, warnings: list[str]) -> Annotation:
    """What a trigger's hook adds to a run captured on demand (its baseline, explanation)."""
    if options.annotate is None:
        return Annotation()
    try:
        return options.annotate(analysis)
    except Exception as exc:  # noqa: BLE001 - the run is kept without its explanation
        _stats.contain("trigger explanation", exc, name=run.name, warnings=warnings)
        return Annotation()


def _manifest(result: RunResult, segments: list[Any], options: ProcessOptions) -> dict[str, Any]:
    """manifest.json's fields for ``result`` (the run directory's format: sinks/run_format.py)."""
    trace = result.trace
    return manifest_of(
        result,
        window=options.window,
        events=len(trace) if trace is not None else 0,
        segments=len(segments),
        backend=options.backend_info,
        sampling=options.sampling,
        extra=options.extra_manifest,
    )


def _write_files(result: RunResult, segments: list[Any], options: ProcessOptions) -> RunResult:
    """What only the capture can write, before any sink: manifest.json saying "processing"
    (readable at every instant), the trace from the Kineto results, the device's memory files.
    An unwritable directory: the run completes without a path, and the sinks still run."""
    if result.path is None:
        return result
    added: Mapping[str, Any] = {}
    try:
        write_manifest(result, status="processing")
        if options.save_trace and result.trace is not None:
            _write_trace(result, segments, options)
        if options.memory and options.backend is not None and result.memory is not None:
            added = options.backend.write_memory_files(result.path, options.memory)
    except OSError as exc:
        warnings = (*result.warnings, f"could not write the run directory {result.path}: {exc.strerror or exc}")
        _stats.contain("writing the run directory", exc, name=result.name, exc_info=False)
        return replace(result, path=None, warnings=warnings, manifest={**result.manifest, "warnings": list(warnings)})
    except Exception as exc:  # noqa: BLE001 - a trace the writer refuses: the run keeps its other files
        _stats.contain("writing the run's files", exc, name=result.name, exc_info=False)
    return replace(result, manifest={**result.manifest, **added}) if added else result


def _write_trace(result: RunResult, segments: list[Any], options: ProcessOptions) -> None:
    """trace.json.gz: Kineto's own writer when the capture is one segment (faster than from
    the model), else the merged trace model (a capture that nested others)."""
    assert result.path is not None and result.trace is not None
    meta: dict[str, Any] = {"neuronscope_device": result.device}
    if options.extra_manifest:
        meta["neuronscope"] = dict(options.extra_manifest)
    target = result.path / "trace.json.gz"
    if len(segments) == 1 and segments[0].trace is result.trace and segments[0].results is not None:
        write_trace(segments[0].results, target, meta, saved=segments[0].saved_json)
    else:
        write_trace_model(result.trace, target, meta)


def _retention_bytes() -> int | None:
    return _config.current().retention()[1]  # a malformed NEURONSCOPE_MAX_BYTES: warned, default used


def _fail(run: Run, exc: BaseException, segments: list[Any], run_dir: Any) -> None:
    _stats.contain("processing the profile", exc, name=run.name)
    _stats.record("failed")
    run.warn(f"processing failed: {exc!r}")
    if isinstance(run_dir, Path):
        mark_complete(run_dir)
    release_segments(segments)
    run.finish(RunStatus.FAILED)
