"""One analysis: the only place a trace becomes a summary, a diagnosis, a memory report and a
rank profile — one frozen :class:`Analysis`.

Every reader of a trace calls :func:`analyse`: the capture's processing (a live run, on the
analysis worker), the reports (a trace file, or a saved run whose diagnosis is missing) and
``ns.diagnose`` / ``ns.diagnose_memory``. What differs between them is only what they know
besides the trace (:class:`AnalyseOptions`: a saved summary, the device's facts, the capture's
allocator records, the run's warnings), never how the trace is analysed. The memory stage's
findings join the diagnosis here, and only here.

The records the analysis hands on (:class:`DeviceFacts`, :class:`Coverage`, :class:`Analysis`)
live here too, below ``neuronscope.result`` (which re-exports them), so that this layer can
build them. Importing this module loads no numpy: a saved run is read without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .. import _stats

if TYPE_CHECKING:
    from ..trace.memory import MemoryRecords
    from ..trace.model import Trace
    from .diagnosis.model import Diagnosis, Finding
    from .memory_model import MemoryReport
    from .roofs import DeviceLimits
    from .summary import Summary

__all__ = [
    "AnalyseOptions",
    "Analysis",
    "Coverage",
    "DeviceFacts",
    "MemoryInput",
    "analyse",
    "memory_input_of",
    "with_device_facts",
]

#: the diagnosis' default (``analysis.diagnosis.DEFAULT_GAP_THRESHOLD_US``; not imported: numpy)
_DEFAULT_GAP_THRESHOLD_US = 50.0


@dataclass(frozen=True)
class DeviceFacts:
    """What a device backend adds to a run once it is captured."""

    manifest: Mapping[str, Any] = field(default_factory=dict)  #: fields for manifest.json
    notes: tuple[str, ...] = ()  #: lines for the end of the summary
    warnings: tuple[str, ...] = ()
    system_profile: Any = None  #: Neuron's system profile (host lanes, memory and CPU samples)
    #: the backend's own state for its later ``enrich`` step (Neuron: the artifacts found); not written anywhere
    handoff: Any = field(default=None, compare=False, repr=False)

    @property
    def system_events(self) -> Any:
        return getattr(self.system_profile, "events", None)

    def plus(self, other: DeviceFacts) -> DeviceFacts:
        """These facts with ``other``'s added (an enrichment that ran later)."""
        return DeviceFacts(
            manifest={**self.manifest, **other.manifest},
            notes=self.notes + other.notes,
            warnings=self.warnings + other.warnings,
            system_profile=other.system_profile if other.system_profile is not None else self.system_profile,
        )


#: what ended a window, in Coverage.line()'s words
_ENDED_BY = {
    "window_steps": "its steps",
    "window_seconds": "its time",
    "window": "its steps or time",
    "budget": "the event budget",
    "duration": "the duration limit",
    "steps": "the step limit",
    "end": "the end of the run",
}


@dataclass(frozen=True)
class Coverage:
    """How much of a run was recorded, and why recording stopped (capture/budget.py)."""

    wall_ns: int  #: the profile's wall time, start to end
    recorded_ns: int  #: time torch.profiler recorded
    events: int  #: events recorded (counted once read)
    windows: int = 1  #: windows the run was profiled in (1: not in windows)
    #: why recording stopped before the end: "budget" | "duration" | "steps"; None: it did not
    stopped: str | None = None
    max_events: int | None = None  #: the event budget (per window in windows), None: none
    budget_source: str = ""  #: where the budget came from ("max_events", "the default, sized from memory (...)")
    steps: int = 0  #: steps timed (``ns.step()`` / optimizer steps), recorded or not
    window_spec: str = ""  #: "10 s", "50 steps or 10 s"
    #: windows whose raw traces are kept (run directory ``windows/``), by number
    kept: tuple[int, ...] = ()
    #: how many windows ended by each reason ("window_steps", "window_seconds", "budget", "end", ...)
    ended_by: Mapping[str, int] = field(default_factory=dict)
    lost: int = 0  #: windows that add nothing to the fold (windows.json says why)
    recorded_steps: int = 0  #: steps inside the recorded windows (``steps`` counts every step timed)
    #: what neuronscope added to the run's wall time (capture/budget.py ``Overhead``), and how it was
    #: measured: "steps" (touched steps against untouched ones) or "stops and analysis" (an estimate: stops plus the analysis's CPU time)
    overhead_ns: int = 0
    overhead_basis: str = ""

    @property
    def pct(self) -> float:
        return 100.0 * self.recorded_ns / self.wall_ns if self.wall_ns > 0 else 100.0

    def line(self) -> str:
        """``recorded 14.2 s of 30.1 s (47%), 120,000 events, 80 of 200 steps, in 6 windows (at most
        10 s each; ended by: its time 5, the end of the profile 1); ...``"""
        rec, wall = self.recorded_ns / 1e9, self.wall_ns / 1e9
        text = f"recorded {rec:.1f} s of {wall:.1f} s ({self.pct:.0f}%), {self.events:,} events"
        if self.recorded_steps and self.steps:
            text += f", {self.recorded_steps:,} of {self.steps:,} steps"
        if self.windows > 1 or self.window_spec:
            text += f", in {self.windows} windows (at most {self.window_spec} each"
            if self.ended_by:
                text += "; ended by: " + ", ".join(
                    f"{_ENDED_BY.get(k, k)} {n}" for k, n in sorted(self.ended_by.items(), key=lambda kv: -kv[1])
                )
            text += "; paused while each was analysed)"
            if self.lost:
                text += f"; {self.lost} window{'s' if self.lost > 1 else ''} lost (windows.json says why)"
        if self.overhead_basis:
            pct = 100.0 * self.overhead_ns / self.wall_ns if self.wall_ns > 0 else 0.0
            how = "from step times" if self.overhead_basis == "steps" else "estimated from its stops and analysis"
            text += f"; neuronscope added {self.overhead_ns / 1e9:.1f} s ({pct:.0f}% of the wall time, {how})"
        if self.stopped == "budget":
            text += f"; recording stopped at the event budget of {self.max_events:,} events ({self.budget_source})"
        elif self.stopped == "duration":
            text += "; recording stopped at the duration limit"
        elif self.stopped == "steps":
            text += f"; recording stopped after {self.steps} steps (the step limit)"
        if self.kept:
            text += "; raw traces kept: window " + ", ".join(str(k) for k in self.kept)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_ns": self.wall_ns,
            "recorded_ns": self.recorded_ns,
            "recorded_pct": round(self.pct, 2),
            "events": self.events,
            "windows": self.windows,
            "stopped": self.stopped,
            "max_events": self.max_events,
            "budget_source": self.budget_source,
            "steps": self.steps,
            "window_spec": self.window_spec,
            "kept": list(self.kept),
            "ended_by": dict(self.ended_by),
            "lost": self.lost,
            "recorded_steps": self.recorded_steps,
            "overhead_ns": self.overhead_ns,
            "overhead_basis": self.overhead_basis,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(
            wall_ns=int(d.get("wall_ns", 0)),
            recorded_ns=int(d.get("recorded_ns", 0)),
            events=int(d.get("events", 0)),
            windows=int(d.get("windows", 1)),
            stopped=d.get("stopped"),
            max_events=d.get("max_events"),
            budget_source=str(d.get("budget_source", "")),
            steps=int(d.get("steps", 0)),
            window_spec=str(d.get("window_spec", "")),
            kept=tuple(int(k) for k in d.get("kept", ())),
            ended_by={str(k): int(v) for k, v in (d.get("ended_by") or {}).items()},
            lost=int(d.get("lost", 0)),
            recorded_steps=int(d.get("recorded_steps", 0)),
            overhead_ns=int(d.get("overhead_ns", 0)),
            overhead_basis=str(d.get("overhead_basis", "")),
        )


@dataclass(frozen=True)
class Analysis:
    """The analysis worker's product for one run."""

    trace: Trace | None  #: None only for a run read back from disk (loaded on demand)
    summary: Summary | None
    diagnosis: Diagnosis | None = None
    memory: MemoryReport | None = None
    rank_profile: Mapping[str, Any] | None = None  #: rank.json: what ``neuronscope ranks`` compares
    device: DeviceFacts = field(default_factory=DeviceFacts)
    warnings: tuple[str, ...] = ()  #: the capture's and the analysis' own
    #: how much of the run was recorded (None: all of it, no limit reached)
    coverage: Coverage | None = None


@dataclass(frozen=True)
class MemoryInput:
    """What the memory stage reads besides the trace: the allocator records and what the
    device said of its memory."""

    records: MemoryRecords
    device_facts: Mapping[str, Any] = field(default_factory=dict)  #: ``DeviceBackend.memory_facts``
    error: str | None = None  #: the exception type the profiled code raised (an OOM gets a finding)
    #: the run's device and extent: with no device allocator records, the device's own totals
    #: (and out-of-memory table) make the report
    run_device: str | None = None
    start_ns: int = 0
    end_ns: int = 0
    all_threads: bool = False  #: the profile followed every thread (torch records no allocations then)


def memory_input_of(trace: Trace) -> MemoryInput | None:
    """The memory stage's input from a trace's own ``[memory]`` records (a trace file recorded
    with ``profile_memory=True``); None when it holds none."""
    records = trace.memory
    if records is None or not (len(records) or records.oom):
        return None
    return MemoryInput(records)


@dataclass(frozen=True)
class AnalyseOptions:
    """What the caller knows besides the trace."""

    #: a summary already made (a saved run's): kept as it is, not recomputed from the trace
    summary: Summary | None = None
    #: the diagnosis' facts: a run's manifest, the device's fields (Neuron Explorer), cpu_contention
    facts: Mapping[str, Any] = field(default_factory=dict)
    serial: int | None = None  #: the capture whose markers delimit the window (None: the trace's own)
    gap_threshold_us: float = _DEFAULT_GAP_THRESHOLD_US
    compiled_functions: dict[str, str] | None = None  #: compile id -> function, of this process's graphs
    limits: DeviceLimits | None = None  #: the device's roofs (None: the ones the trace names)
    warnings: tuple[str, ...] = ()  #: the run's warnings so far (the capture's, the coverage line, the device's)
    device: DeviceFacts = field(default_factory=lambda: DeviceFacts())
    coverage: Coverage | None = None
    #: the memory stage's input, or a function that reads it (run inside the contained memory
    #: part: a failure reading the records costs only the memory report); None: no memory stage
    memory: MemoryInput | Callable[[], MemoryInput] | None = None
    rank_profile: bool = False  #: also the rank profile (a rank of a torchrun job)
    #: called with the summary as soon as it exists (``run.summary`` returns before the diagnosis)
    on_summary: Callable[[Summary], None] | None = None
    #: the run's name when a failing diagnosis, memory report or rank profile is to be contained
    #: (counted, logged, noted in the warnings; the part is None); None: the failure is raised
    contain_for: str | None = None


def analyse(trace: Trace, options: AnalyseOptions | None = None) -> Analysis:
    """The summary, the diagnosis (with the memory findings), the memory report and the rank
    profile of ``trace``: the one analysis every reader of a trace runs."""
    options = options or AnalyseOptions()
    warnings = list(options.warnings)
    summary = options.summary
    if summary is None:
        from .summary import summarize

        summary = summarize(trace, compiled_functions=options.compiled_functions, limits=options.limits)
        summary = replace(summary, warnings=tuple(warnings), notes=options.device.notes)
    if options.on_summary is not None:
        options.on_summary(summary)
    diagnosis = _part("diagnosis", lambda: _diagnose(trace, summary, options), options, warnings)
    memory = None
    if options.memory is not None:
        given = options.memory
        found = _part(
            "memory report", lambda: _memory(trace, diagnosis, given() if callable(given) else given), options, warnings
        )
        if found is not None:
            memory, findings = found
            if diagnosis is not None:  # the one place the memory findings join the diagnosis
                diagnosis = replace(
                    diagnosis, findings=tuple(diagnosis.findings) + tuple(findings), memory_line=memory.headline()
                )
    rank_profile = None
    if options.rank_profile:
        rank_profile = _part("cross-rank profile", lambda: _rank_profile(trace, options), options, warnings)
    return Analysis(
        trace=trace,
        summary=summary,
        diagnosis=None if diagnosis is None else diagnosis.as_saved(),
        memory=memory,
        rank_profile=rank_profile,
        device=options.device,
        warnings=tuple(warnings),
        coverage=options.coverage,
    )


def with_device_facts(analysis: Analysis, extra: DeviceFacts, *, warnings: tuple[str, ...]) -> Analysis:
    """The analysis with what a device found later added (Neuron Explorer, on the output
    worker): the summary's notes and warnings, the diagnosis' Explorer findings."""
    from .diagnosis import with_device_facts as diagnosis_with_facts

    device = analysis.device.plus(extra)
    summary = analysis.summary
    if summary is not None:
        summary = replace(summary, notes=summary.notes + extra.notes, warnings=warnings)
    diagnosis = analysis.diagnosis
    if diagnosis is not None:
        diagnosis = diagnosis_with_facts(diagnosis, device.manifest).as_saved()  # Explorer's insights
    return replace(analysis, summary=summary, diagnosis=diagnosis, device=device, warnings=warnings)


def _part(what: str, compute: Callable[[], Any], options: AnalyseOptions, warnings: list[str]) -> Any:
    """One part of the analysis; a failure costs only that part when the caller contains them."""
    if options.contain_for is None:
        return compute()
    try:
        return compute()
    except Exception as exc:  # noqa: BLE001 - a bug in one part must not cost the summary (or the run)
        _stats.contain(what, exc, name=options.contain_for, warnings=warnings)
        return None


def _diagnose(trace: Trace, summary: Summary, options: AnalyseOptions) -> Diagnosis:
    from .diagnosis import diagnose_trace

    return diagnose_trace(
        trace, summary=summary, facts=dict(options.facts), serial=options.serial, gap_threshold_us=options.gap_threshold_us
    )


def _memory(trace: Trace, diagnosis: Diagnosis | None, given: MemoryInput) -> tuple[MemoryReport, list[Finding]]:
    """The memory report and its findings, over the diagnosis' steps."""
    from .memory import analyse_memory, neuron_device_report

    facts = dict(given.device_facts)
    report, findings = analyse_memory(trace, given.records, steps=_step_bounds(diagnosis), error=given.error, device_facts=facts)
    if report.device != given.run_device and facts:
        # no device allocator records: the device's own totals (and OOM table) make the report
        report, findings = neuron_device_report(
            report, findings, facts, error=given.error, start_ns=given.start_ns, end_ns=given.end_ns
        )
    if not len(given.records) and given.all_threads:
        # torch (2.x) records no [memory] events in a profile_all_threads session
        report = replace(
            report,
            notes=(
                "no allocator records: torch records none when it profiles every thread "
                "(all_threads=True); profile one thread to record memory",
            ),
        )
    return report, findings


def _step_bounds(diagnosis: Diagnosis | None) -> Any:
    """(source, starts, ends) of the diagnosis' steps for the per-step memory, or None."""
    if diagnosis is None or diagnosis.steps is None or diagnosis.steps.count != len(diagnosis.steps.per_step):
        return None
    import numpy as np

    per = diagnosis.steps.per_step
    starts = np.array([s.start_ns for s in per], dtype=np.int64)
    return diagnosis.steps.source, starts, starts + np.array([round(s.duration_us * 1e3) for s in per], dtype=np.int64)


def _rank_profile(trace: Trace, options: AnalyseOptions) -> dict[str, Any]:
    """What ``neuronscope ranks`` compares (collectives, time outside them): rank.json."""
    from .ranks import rank_profile

    return rank_profile(trace, serial=options.serial)
