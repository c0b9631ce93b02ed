"""What a report renders: one :class:`~neuronscope.result.RunResult` — a saved run, a live
:class:`~neuronscope.Run`, or a Kineto trace file analysed once — and its label.

:func:`open_source` turns a path the user typed into a :class:`Source` (what the path holds is
decided by :mod:`neuronscope._paths`, as for every command and ``ns.diagnose``); :func:`as_source`
also accepts the objects the Python API hands out. A trace is analysed here by the one analysis
(:func:`neuronscope.analysis.analyse.analyse`), and so is a saved run whose diagnosis is missing;
the renderers read the result and never diagnose. Every failure is a
:class:`~neuronscope.TraceLoadError` whose message names the path and says what to pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._paths import resolve_profile, trace_files_in
from .._run import RunStatus
from ..errors import ConfigurationError, TraceLoadError
from ..result import Analysis, RunResult

if TYPE_CHECKING:
    from .._run import Run
    from ..analysis.diagnosis import Diagnosis
    from ..analysis.diff import RunExtent
    from ..analysis.memory_model import MemoryReport
    from ..analysis.summary import Summary
    from ..trace.model import Trace

__all__ = ["Source", "as_source", "find_trace_file", "open_source", "result_of", "run_extent"]


@dataclass
class Source:
    """One profile as the reports render it: its :class:`~neuronscope.result.RunResult` (with
    a summary), and how to name it. ``trace`` is loaded on first use (it can be big)."""

    label: str  #: short human name: the run name or the file name
    kind: Literal["run", "trace", "memory"]
    result: RunResult
    _trace_loader: Callable[[], Trace | None] | None = None
    #: why the saved trace could not be read (a truncated or damaged file), None when it was
    trace_error: str | None = None
    #: what the trace is when it is not the whole run's: a run in windows keeps its first and
    #: slowest windows' traces (``"window 4 of 9, the slowest kept"``)
    trace_label: str | None = None

    @property
    def summary(self) -> Summary:
        summary = self.result.summary
        assert summary is not None  # a Source is made only of a result with a summary
        return summary

    @property
    def diagnosis(self) -> Diagnosis | None:
        """The :class:`~neuronscope.Diagnosis` (None when there is none: no trace to diagnose)."""
        return self.result.diagnosis

    @property
    def memory(self) -> MemoryReport | None:
        """The :class:`~neuronscope.MemoryReport` (None unless memory was recorded)."""
        return self.result.memory

    @property
    def path(self) -> Path | None:
        """The run directory or trace file (None for a profile in memory)."""
        return self.result.path

    @property
    def manifest(self) -> dict[str, Any]:
        """A run's manifest.json fields; a trace file's own metadata."""
        return dict(self.result.manifest)

    @property
    def device(self) -> str:
        return self.summary.device

    @property
    def trace(self) -> Trace | None:
        """The event-level trace, or None when the source has none (summary-only run)."""
        if self.result.trace is None and self._trace_loader is not None:
            loader, self._trace_loader = self._trace_loader, None
            trace = loader()
            if trace is not None and self.result.analysis is not None:
                self.result = replace(self.result, analysis=replace(self.result.analysis, trace=trace))
        return self.result.trace

    def files(self) -> list[tuple[Path, int]]:
        """The files of a run directory (or the trace file itself), with their sizes in bytes."""
        if self.path is None:
            return []
        if self.path.is_file():
            return [(self.path, self.path.stat().st_size)]
        return [(p, p.stat().st_size) for p in sorted(self.path.rglob("*")) if p.is_file()]


def find_trace_file(directory: Path) -> Path | None:
    """The one Kineto trace ``directory`` holds (see :func:`neuronscope._paths.trace_files_in`), else None."""
    found = trace_files_in(directory)
    return found[0] if len(found) == 1 else None


def open_source(path: str | os.PathLike[str]) -> Source:
    """Load a run directory or a trace file, or the one trace a directory holds (what
    ``neuronscope show PATH`` and ``ns.diagnose(PATH)`` accept: :func:`neuronscope._paths.resolve_profile`)."""
    from ..sinks.run_format import load_run

    where = resolve_profile(path)
    if where.kind == "run":
        return _from_run(load_run(where.path))
    # only a raw trace needs the trace model (numpy); a run directory's summary is JSON
    from ..trace.chrome import load_trace

    p = where.path
    return _from_trace(load_trace(p), label=p.name, kind="trace", path=p)


def _from_trace(trace: Trace, *, label: str, kind: Literal["trace", "memory"], path: Path | None) -> Source:
    """A trace as a result of its own: the one analysis, told what the trace says of itself (its
    metadata, its ``[memory]`` records)."""
    from ..analysis.analyse import AnalyseOptions, analyse, memory_input_of

    analysis = analyse(trace, AnalyseOptions(facts=dict(trace.metadata), memory=memory_input_of(trace)))
    result = RunResult(
        name=label,
        device=trace.device,
        status=RunStatus.COMPLETE,
        start_ns=trace.start_time_ns if len(trace) else 0,
        end_ns=trace.end_time_ns if len(trace) else 0,
        analysis=analysis,
        manifest=dict(trace.metadata),
        path=path,
    )
    return Source(label=label, kind=kind, result=result)


def _from_run(run: Run) -> Source:
    if run.summary is None:
        where = run.path or run.name
        raise TraceLoadError(f"{where}: the run has no summary (status {run.status}); nothing to show")

    def load() -> Trace | None:
        try:
            trace = run.trace
            if trace is None and run.path is not None:
                trace, source.trace_label = _kept_window_trace(run.path, run.device)
            return trace
        except TraceLoadError as exc:
            source.trace_error = str(exc)
            return None  # a damaged trace must not hide the summary we already have

    result = result_of(run)
    source = Source(label=run.name, kind="run" if run.path is not None else "memory", result=result, _trace_loader=load)
    if result.diagnosis is None:
        source.result = _with_diagnosis(source)
    return source


def result_of(run: Run) -> RunResult:
    """The result a report renders of ``run``: its own once written; for a handle without one
    (a region of an enclosing run, a run whose processing failed after its summary), what the
    handle has."""
    if run.result is not None and run.result.summary is not None:
        return run.result
    analysis = Analysis(trace=None, summary=run.summary, diagnosis=run.diagnosis, memory=run.memory)
    return RunResult(
        name=run.name,
        device=run.device,
        status=run.status,
        start_ns=run.start_ns,
        end_ns=run.end_ns,
        analysis=analysis,
        manifest=run.manifest,
        path=run.path,
    )


def _with_diagnosis(source: Source) -> RunResult:
    """A run saved without a diagnosis (an older run, a damaged one, one whose diagnosis
    failed): the one analysis of its trace, with its saved summary and manifest. Its saved
    memory report stays as it is (nothing is merged into the new diagnosis)."""
    from ..analysis.analyse import AnalyseOptions, analyse

    result, trace = source.result, source.trace
    if trace is None or result.analysis is None:
        return source.result
    fresh = analyse(trace, AnalyseOptions(summary=result.summary, facts=dict(result.manifest)))
    return replace(result, analysis=replace(result.analysis, trace=trace, diagnosis=fresh.diagnosis))


def _kept_window_trace(run_dir: Path, device: str) -> tuple[Trace | None, str | None]:
    """A run in windows has no trace of its own: the trace of its slowest kept window (by the
    windows index's score), else its first, and what it is."""
    import json

    try:
        index = json.loads((run_dir / "windows.json").read_text())
    except (OSError, ValueError):
        return None, None
    rows = [r for r in index.get("windows", ()) if isinstance(r, dict)]
    kept = [r for r in rows if r.get("kept") and (run_dir / "windows" / f"{int(r['window']):04d}" / "trace.json.gz").is_file()]
    if not kept:
        return None, None
    slowest = max(kept, key=lambda r: float(r.get("score") or 0.0))
    from ..trace.chrome import load_trace

    trace = load_trace(run_dir / "windows" / f"{int(slowest['window']):04d}" / "trace.json.gz", device=device)
    which = "the slowest kept" if len(kept) > 1 else "the only one kept"
    return trace, f"window {slowest['window']} of {len(rows)} ({which}; the run was profiled in windows)"


def as_source(obj: Any) -> Source:
    """Accept a :class:`Source`, a ``Run``, a ``RunResult``, a ``Summary``, a ``Trace`` or a path."""
    from .._run import Run
    from ..analysis.summary import Summary
    from ..trace.model import Trace

    if isinstance(obj, Source):
        return obj
    if isinstance(obj, Run):
        return _from_run(obj)
    if isinstance(obj, RunResult) and obj.summary is not None:
        return Source(label=obj.name, kind="run" if obj.path is not None else "memory", result=obj)
    if isinstance(obj, Summary):
        result = RunResult(
            name="summary",
            device=obj.device,
            status=RunStatus.COMPLETE,
            start_ns=0,
            end_ns=0,
            analysis=Analysis(trace=None, summary=obj),
        )
        return Source(label="summary", kind="memory", result=result)
    if isinstance(obj, Trace):
        return _from_trace(obj, label="trace", kind="memory", path=None)
    if isinstance(obj, (str, os.PathLike)):
        return open_source(obj)
    raise ConfigurationError(f"expected a Run, Summary, Trace or path (or a RunResult), not {type(obj).__name__}")


def run_extent(source: Source) -> RunExtent | None:
    """How much of its run ``source``'s summary holds (what ``diff`` divides by): the coverage
    from the manifest, the recorded steps (a windowed run's ``windows.json`` rows; otherwise
    the diagnosis' steps, which are the recorded ones), the median step. None for a bare
    summary (no diagnosis, no manifest): nothing to normalise by."""
    from ..analysis.diff import RunExtent

    d = source.diagnosis
    coverage = source.manifest.get("coverage")
    coverage = coverage if isinstance(coverage, dict) else None
    if d is None and coverage is None:
        return None
    recorded_us = float(d.evidence.get("recorded_us", d.window_us)) if d is not None else 0.0
    wall_us = recorded_us
    windows = 1
    if coverage is not None:
        recorded_us = float(coverage.get("recorded_ns", 0)) / 1e3 or recorded_us
        wall_us = float(coverage.get("wall_ns", 0)) / 1e3 or recorded_us
        windows = int(coverage.get("windows", 1))
    steps = d.steps if d is not None and d.steps is not None and d.steps.count else None
    window_steps = _window_steps(source.path)
    if window_steps is not None:
        recorded_steps = window_steps  # the fold's step count is every step timed, recorded or not
    elif windows > 1:
        recorded_steps = 0  # windows without their index: how many steps they hold is not known
    else:
        recorded_steps = steps.count if steps is not None else 0
    return RunExtent(
        recorded_us=recorded_us,
        wall_us=wall_us,
        windows=windows,
        steps_recorded=recorded_steps,
        steps_timed=steps.count if steps is not None else 0,
        p50_step_us=steps.p50_us if steps is not None else None,
    )


def _window_steps(path: Path | None) -> int | None:
    """The steps a windowed run recorded: the sum of its ``windows.json`` rows' steps (None: not windowed)."""
    import json

    index = path / "windows.json" if path is not None and path.is_dir() else None
    if index is None or not index.is_file():
        return None
    try:
        rows = json.loads(index.read_text()).get("windows", [])
        return sum(int(r.get("steps", 0)) for r in rows)
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # a damaged index: the steps are not known, the rest of the run still compares
