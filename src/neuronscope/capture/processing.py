"""Turning a stopped capture into a complete Run, in two background stages.

1. **analysis** (:func:`analyse`, analysis worker): the trace model from the capture's
   segments, the summary — ``run.summary`` returns now — then the diagnosis.
2. **output** (:func:`write_out`, output worker): the run directory (summary.json,
   trace.json.gz, manifest.json), the sinks (OpenTelemetry), retention; then the Kineto
   results are released and ``run.path`` / ``ns.flush()`` return.

Every failure here is logged and counted; the user's call finished long ago and never sees it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import _config, _stats, _worker
from .._run import Run, RunStatus
from ..analysis.summary import summarize
from ..sinks.rundir import base_manifest, files_of, mark_complete, write_json, write_trace, write_trace_model
from ..trace.kineto import trace_from_kineto

__all__ = ["ProcessOptions", "add_sink", "analyse", "last_run", "set_last_run", "submit"]

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
    serial: int = 0  #: the capture's serial (its markers in the trace)
    only_own_thread: bool = False
    extra_manifest: dict[str, Any] = field(default_factory=dict)  #: rank, job, ... (added by the caller)
    #: called on the output worker before the manifest is written: more manifest fields (a trigger's baseline, explanation)
    annotate: Callable[[Run], dict[str, Any]] | None = None
    memory: str | None = None  #: "on" | "history": the memory stage runs (profile_neuron(memory=...))


def add_sink(sink: Callable[[Run], None]) -> None:
    if sink not in _sinks:
        _sinks.append(sink)


def remove_sink(sink: Callable[[Run], None]) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


def last_run() -> Run | None:
    """The most recent profiled Run in this process (None before the first)."""
    return _last_run


def set_last_run(run: Run) -> None:
    """Called when a capture ends, before processing: ``ns.last_run()`` has it at once."""
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


def submit(run: Run, segments: list[Any], run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions) -> None:
    """Queue a stopped capture for processing (never blocks, never drops)."""
    _worker.get_worker().submit(lambda: analyse(run, segments, run_dir, options))


def _segment_trace(seg: Any, device: str) -> Any:
    with seg._lock:
        if seg.trace is None:
            seg.trace = trace_from_kineto(seg.results, device=device)
            _worker.backlog.measured(id(seg), len(seg.trace), seg.stop_ns - seg.start_ns, getattr(seg.owner, "name", None))
        return seg.trace


def release_segments(segments: list[Any]) -> None:
    """Drop this run's hold on its segments; the last holder frees their events and backlog bytes."""
    for seg in segments:
        if seg.release():
            _worker.backlog.remove(id(seg))


def analyse(run: Run, segments: list[Any], run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions) -> None:
    """Stage 1: trace model, summary (then ``run.summary`` returns), diagnosis."""
    try:
        from .merge import merge_segments

        traces = [_segment_trace(seg, run.device) for seg in segments]
        trace = merge_segments(
            traces,
            [seg.continued for seg in segments],
            own_serial=options.serial,
            only_own_thread=options.only_own_thread and any(seg.all_threads for seg in segments),
        )
        if options.window is not None and len(trace):
            run.start_ns = trace.start_time_ns  # a schedule window starts at its first event
        from ..analysis.names import compiled_functions

        summary = summarize(trace, compiled_functions=compiled_functions())
        run.manifest = {}
        notes: list[str] = []
        if options.backend is not None:
            notes = options.backend.finish_run(run, options.raw_dir, first_call=options.first_call)
        summary = replace(summary, warnings=tuple(run.warnings), notes=tuple(notes))
        run._set_summary(summary, trace)
        diagnosis = _diagnose(run, trace, summary, options)
        if options.memory:
            diagnosis = _memory(run, trace, segments, diagnosis, options)
        run._set_diagnosis(diagnosis)
        if "rank" in options.extra_manifest:  # a rank of a distributed job
            run._rank_profile = _rank_profile(run, trace, options)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001
        _fail(run, exc, segments, run_dir)
        return
    _worker.output_worker().submit(lambda: write_out(run, segments, trace, run_dir, options))


def _diagnose(run: Run, trace: Any, summary: Any, options: ProcessOptions) -> Any:
    try:
        from ..analysis.diagnosis import diagnose_trace
    except ImportError:  # pragma: no cover - during development only
        return None
    try:
        return diagnose_trace(trace, summary=summary, facts=run.manifest, serial=options.serial)
    except Exception as exc:  # noqa: BLE001 - a diagnosis bug must not cost the summary
        _stats.record("errors")
        log.warning("neuronscope: diagnosing %r failed: %s", run.name, exc, exc_info=True)
        run.warnings.append(f"diagnosis failed: {exc!r}")
        return None


def _memory(run: Run, trace: Any, segments: list[Any], diagnosis: Any, options: ProcessOptions) -> Any:
    """The memory stage: ``run.memory`` and its findings appended to the diagnosis'."""
    try:
        from dataclasses import replace as _replace

        from ..analysis.memory import analyse_memory
        from ..trace.memory import MemoryRecords
        from .memory import neuron_oom_table, segment_records

        records = MemoryRecords.concat([segment_records(seg, options.raw_dir) for seg in segments])
        lo, hi = trace.start_time_ns, trace.end_time_ns
        if len(records) and (records.time_ns[0] < lo or records.time_ns[-1] > hi):
            records = records.select((records.time_ns >= lo) & (records.time_ns <= hi))
        facts: dict[str, Any] = {}
        if run.device == "neuron":
            # the runtime's OOM table, when the profiled code failed and the runtime wrote one
            table = neuron_oom_table(since_ns=run.start_ns - 1_000_000_000) if run.error else None
            if table is not None:
                facts["neuron_oom_table"] = table
            stats = getattr(run, "_neuron_memory", None)
            if stats and len(stats) == 2 and stats[1]:
                facts["neuron_memory_stats"] = {"start": stats[0], "end": stats[1]}
        steps = None
        if diagnosis is not None and diagnosis.steps is not None and diagnosis.steps.count == len(diagnosis.steps.per_step):
            import numpy as np

            per = diagnosis.steps.per_step
            starts = np.array([s.start_ns for s in per], dtype=np.int64)
            steps = (diagnosis.steps.source, starts, starts + np.array([round(s.duration_us * 1e3) for s in per], dtype=np.int64))
        report, findings = analyse_memory(trace, records, steps=steps, error=run.error, device_facts=facts)
        if run.device == "neuron" and report.device != "neuron" and ("neuron_memory_stats" in facts or "neuron_oom_table" in facts):
            from ..analysis.memory import neuron_device_report

            # no device allocator records: the device's own totals (and OOM table) make the report
            report, findings = neuron_device_report(report, findings, facts, error=run.error, start_ns=run.start_ns, end_ns=run.end_ns)
        if not len(records) and any(seg.all_threads for seg in segments):
            # torch (2.x) records no [memory] events in a profile_all_threads session
            report = _replace(report, notes=("no allocator records: torch records none when it profiles every thread "
                                             "(all_threads=True); profile one thread to record memory",))
        run._memory = report
        if diagnosis is not None:
            diagnosis = _replace(diagnosis, findings=tuple(diagnosis.findings) + tuple(findings), memory_line=report.headline())
    except Exception as exc:  # noqa: BLE001 - a memory-stage bug must not cost the run
        _stats.record("errors")
        log.warning("neuronscope: the memory report of %r failed: %s", run.name, exc, exc_info=True)
        run.warnings.append(f"memory report failed: {exc!r}")
    return diagnosis


def _rank_profile(run: Run, trace: Any, options: ProcessOptions) -> dict[str, Any] | None:
    """What ``neuronscope ranks`` compares (collectives, time outside them): rank.json."""
    try:
        from ..analysis.ranks import rank_profile

        return rank_profile(trace, serial=options.serial)
    except Exception as exc:  # noqa: BLE001 - the cross-rank view is extra; the run is not lost
        _stats.record("errors")
        log.warning("neuronscope: the cross-rank profile of %r failed: %s", run.name, exc, exc_info=True)
        run.warnings.append(f"cross-rank profile failed: {exc!r}")
        return None


def write_out(run: Run, segments: list[Any], trace: Any, run_dir: Path | Callable[[], Path | None] | None, options: ProcessOptions) -> None:
    """Stage 2: run directory, sinks, manifest; then the Kineto results are released."""
    where: Path | None = None
    try:
        try:
            where = run_dir() if callable(run_dir) else run_dir
        except Exception as exc:  # noqa: BLE001 - no directory, but the run still completes in memory
            _stats.record("errors")
            log.warning("neuronscope: could not create the run directory of %r: %s", run.name, exc)
        device_facts = run.manifest
        run.manifest = base_manifest(
            name=run.name,
            device=run.device,
            status=RunStatus.ERROR if run.error else RunStatus.COMPLETE,
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            error=run.error,
            error_message=run.error_message,
            window=options.window,
            events=len(trace),
            segments=len(segments),
            backend=options.backend_info,
            sampling=options.sampling,
            warnings=run.warnings,
            **options.extra_manifest,
            **device_facts,
            **_annotations(run, options),
        )
        if run._diagnosis is not None:
            run.manifest["bound_by"] = run._diagnosis.bound_by
            run.manifest["device_busy_pct"] = round(run._diagnosis.device_busy_pct, 2)
        if run._memory is not None:
            run.manifest["memory_peak_bytes"] = run._memory.peak_bytes
            if run.device == "cuda":
                from .memory import cuda_memory_facts

                run.manifest.update(cuda_memory_facts())
        if where is not None:
            _write_run_dir(run, segments, trace, where, options)
            if options.memory == "history" and run.device == "cuda":
                _dump_history(run, where)
        for sink in list(_sinks):
            try:
                sink(run)
            except Exception as exc:  # noqa: BLE001 - a sink must never break the others
                _stats.record("errors")
                log.warning("neuronscope: sink %r failed: %s", sink, exc)
        if where is not None and run._path is not None:
            run.manifest["files"] = files_of(where)
            write_json(where / "manifest.json", run.manifest)
        _stats.record("profiled")
        if where is not None:
            mark_complete(where, max_bytes=_retention_bytes())
        run._finish(RunStatus.ERROR if run.error else RunStatus.COMPLETE)
    except Exception as exc:  # noqa: BLE001
        _fail(run, exc, [], where)
    finally:
        release_segments(segments)


def _annotations(run: Run, options: ProcessOptions) -> dict[str, Any]:
    """``trigger`` (and what the trigger's hook adds) for a run captured on demand."""
    out: dict[str, Any] = {}
    if run.trigger is not None:
        out["trigger"] = run.trigger.to_dict()
    if options.annotate is not None:
        try:
            out.update(options.annotate(run))
        except Exception as exc:  # noqa: BLE001 - the run is kept without its explanation
            _stats.record("errors")
            log.warning("neuronscope: explaining the triggered run %r failed: %s", run.name, exc, exc_info=True)
            run.warnings.append(f"trigger explanation failed: {exc!r}")
    return out
def _dump_history(run: Run, where: Path) -> None:
    try:
        from .memory import cuda_memory_facts, dump_history

        snap = dump_history(where)
        if snap is not None:
            run.manifest["memory_snapshot"] = snap.name  # open it at https://pytorch.org/memory_viz
        run.manifest.update(cuda_memory_facts())
    except Exception as exc:  # noqa: BLE001 - the snapshot is extra
        _stats.record("errors")
        log.warning("neuronscope: the CUDA memory snapshot of %r failed: %s", run.name, exc)
        run.warnings.append(f"memory snapshot failed: {exc!r}")


def _fail(run: Run, exc: BaseException, segments: list[Any], run_dir: Any) -> None:
    _stats.record("errors")
    log.warning("neuronscope: processing the profile of %r failed: %s", run.name, exc, exc_info=exc)
    run.warnings.append(f"processing failed: {exc!r}")
    if isinstance(run_dir, Path):
        mark_complete(run_dir)
    release_segments(segments)
    run._finish(RunStatus.FAILED)


def _write_run_dir(run: Run, segments: list[Any], trace: Any, run_dir: Path, options: ProcessOptions) -> None:
    try:
        summary = run._summary.to_dict()  # type: ignore[union-attr]
        if run._diagnosis is not None:
            summary["diagnosis"] = run._diagnosis.to_dict()
        if run._memory is not None:
            summary["memory"] = run._memory.to_dict()
        write_json(run_dir / "summary.json", summary)
        rank_facts = getattr(run, "_rank_profile", None)
        if rank_facts is not None:
            from ..analysis.ranks import RANK_FILE

            write_json(run_dir / RANK_FILE, rank_facts)
        if options.save_trace:
            meta = {"neuronscope_device": run.device}
            if options.extra_manifest:
                meta["neuronscope"] = dict(options.extra_manifest)
            single = len(segments) == 1 and segments[0].trace is trace and segments[0].results is not None
            t0 = time.perf_counter()
            if single:
                write_trace(segments[0].results, run_dir / "trace.json.gz", meta, saved=segments[0].saved_json)
            else:  # several segments (a capture that nested others): written from the merged model
                write_trace_model(trace, run_dir / "trace.json.gz", meta)
            log.debug("trace written in %.2f s", time.perf_counter() - t0)
        run._path = run_dir
    except OSError as exc:
        _stats.record("errors")
        msg = f"could not write the run directory {run_dir}: {exc.strerror or exc}"
        run.warnings.append(msg)
        log.warning("neuronscope: %s; the summary stays in memory", msg)
