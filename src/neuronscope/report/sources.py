"""What a report describes: a run directory, a Kineto trace file, or an in-memory Run/Summary.

:func:`open_source` turns a path the user typed into a :class:`Source` (what the path holds is
decided by :mod:`neuronscope._paths`, as for every command and ``ns.diagnose``); :func:`as_source`
also accepts the objects the Python API hands out. Every failure is a
:class:`~neuronscope.TraceLoadError` whose message names the path and says what to pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._paths import resolve_profile, trace_files_in
from ..errors import ConfigurationError, TraceLoadError

if TYPE_CHECKING:
    from .._run import Run
    from ..analysis.diff import RunExtent
    from ..analysis.summary import Summary
    from ..trace.model import Trace

__all__ = ["Source", "as_source", "find_trace_file", "open_source", "run_extent"]


@dataclass
class Source:
    """One profile, however it was obtained. ``trace`` is loaded on first use (it can be big)."""

    label: str  #: short human name: the run name or the file name
    kind: Literal["run", "trace", "memory"]
    summary: Summary
    path: Path | None = None  #: run directory or trace file
    manifest: dict[str, Any] = field(default_factory=dict)
    _trace: Trace | None = None
    _trace_loader: Callable[[], Trace | None] | None = None
    _diagnosis: Any = None
    _diagnosis_tried: bool = False
    _memory: Any = None
    _memory_tried: bool = False
    _memory_findings: list[Any] = field(default_factory=list)
    #: why the saved trace could not be read (a truncated or damaged file), None when it was
    trace_error: str | None = None
    #: what the trace is when it is not the whole run's: a run in windows keeps its first and
    #: slowest windows' traces (``"window 4 of 9, the slowest kept"``)
    trace_label: str | None = None

    @property
    def diagnosis(self) -> Any:
        """The :class:`~neuronscope.Diagnosis`: the run's saved one, else computed from the
        trace (None when there is neither)."""
        if self._diagnosis is None and not self._diagnosis_tried:
            self._diagnosis_tried = True
            trace = self.trace
            if trace is not None:
                from ..analysis.diagnosis import diagnose_trace

                d = diagnose_trace(trace, summary=self.summary, facts=dict(self.manifest))
                memory = self.memory
                if memory is not None and self._memory_findings:  # a raw trace with [memory] records
                    from dataclasses import replace

                    d = replace(d, findings=d.findings + tuple(self._memory_findings), memory_line=memory.headline())
                self._diagnosis = d
        return self._diagnosis

    @diagnosis.setter
    def diagnosis(self, value: Any) -> None:
        self._diagnosis, self._diagnosis_tried = value, True

    @property
    def memory(self) -> Any:
        """The :class:`~neuronscope.MemoryReport`: the run's saved one, else computed from a
        trace that holds ``[memory]`` records (None when there is neither)."""
        if self._memory is None and not self._memory_tried:
            self._memory_tried = True
            trace = self.trace
            if trace is not None and trace.memory is not None and (len(trace.memory) or trace.memory.oom):
                from ..analysis.memory import analyse_memory

                self._memory, self._memory_findings = analyse_memory(trace, trace.memory)
        return self._memory

    @property
    def device(self) -> str:
        return self.summary.device

    @property
    def trace(self) -> Trace | None:
        """The event-level trace, or None when the source has none (summary-only run)."""
        if self._trace is None and self._trace_loader is not None:
            loader, self._trace_loader = self._trace_loader, None
            self._trace = loader()
        return self._trace

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
    from ..sinks.rundir import load_run

    where = resolve_profile(path)
    if where.kind == "run":
        return _from_run(load_run(where.path))
    # only a raw trace needs the trace model (numpy); a run directory's summary is JSON
    from ..analysis.summary import summarize
    from ..trace.chrome import load_trace

    p = where.path
    trace = load_trace(p)
    return Source(label=p.name, kind="trace", summary=summarize(trace), path=p, manifest=dict(trace.metadata), _trace=trace)


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

    source = Source(
        label=run.name,
        kind="run" if run.path is not None else "memory",
        summary=run.summary,
        path=run.path,
        manifest=dict(run.manifest),
        _trace_loader=load,
        _diagnosis=run.diagnosis,
        _memory=run.memory,
        _memory_tried=True,  # a run's memory report is the saved one (or none)
    )
    return source


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
    """Accept a :class:`Source`, a ``Run``, a ``Summary``, a ``Trace`` or a path."""
    from .._run import Run
    from ..analysis.summary import Summary, summarize
    from ..trace.model import Trace

    if isinstance(obj, Source):
        return obj
    if isinstance(obj, Run):
        return _from_run(obj)
    if isinstance(obj, Summary):
        return Source(label="summary", kind="memory", summary=obj)
    if isinstance(obj, Trace):
        return Source(label="trace", kind="memory", summary=summarize(obj), manifest=dict(obj.metadata), _trace=obj)
    if isinstance(obj, (str, os.PathLike)):
        return open_source(obj)
    raise ConfigurationError(f"expected a Run, Summary, Trace or path, not {type(obj).__name__}")


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
