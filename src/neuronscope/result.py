"""What the stages hand each other: frozen records, each written by one stage only.

    capture ──CaptureFacts──▶ analysis ──Analysis──▶ output ──RunResult──▶ sinks, reports
                                  │                       │
                                  └─▶ run.summary,        └─▶ run.path, run.wait()
                                      run.diagnosis

* :class:`CaptureFacts` — what the capture knew (the OpenTelemetry context current when the
  profile started, why it was triggered, the device's state at the start and the end).
* :class:`DeviceFacts` — what the device backend adds after a capture (manifest fields,
  notes, warnings, the Neuron system profile); returned by ``DeviceBackend.finish_run``.
* :class:`Analysis` — the analysis worker's product: trace model, summary, diagnosis, memory
  report, rank profile. ``run.summary`` and ``run.diagnosis`` return as soon as it exists.
* :class:`RunResult` — everything about one finished run; sinks and reports read only this.

:class:`~neuronscope.Run` is the user's handle: it waits for these and reads them; no stage
writes another stage's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis.diagnosis import Diagnosis
    from .analysis.diff import Explanation
    from .analysis.memory_model import MemoryReport
    from .analysis.summary import Summary
    from ._trigger import Trigger
    from .trace.model import Trace

__all__ = ["Analysis", "Annotation", "CaptureFacts", "Coverage", "DeviceFacts", "RunResult"]


@dataclass(frozen=True)
class CaptureFacts:
    """Written by the capture (on the user's thread), read by processing and the sinks."""

    otel_parent: Any = None  #: the OpenTelemetry context current when the profile started
    trigger: Trigger | None = None  #: why the call was profiled on demand
    #: device state sampled at the start and the end of the capture (e.g. "neuron_memory_stats")
    device_start: Mapping[str, Any] = field(default_factory=dict)
    device_end: Mapping[str, Any] = field(default_factory=dict)
    #: whether the profiled thread had a CPU over the recorded time (``_system.cpu_contention``;
    #: the diagnosis' ``CpuContention``); None where it was not measured
    cpu_contention: Mapping[str, Any] | None = None


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
    #: measured: "steps" (touched steps against untouched ones) or "stops and analysis" (a floor)
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
class Annotation:
    """What a trigger's hook adds to a run profiled on demand (see capture/triggers.py)."""

    manifest: Mapping[str, Any] = field(default_factory=dict)
    baseline: Path | None = None  #: the run directory of the normal call it is compared with
    explanation: Explanation | None = None


@dataclass(frozen=True)
class RunResult:
    """One finished run, as the sinks and reports see it."""

    name: str
    device: str
    status: str
    start_ns: int
    end_ns: int
    error: str | None = None  #: type name of the exception the profiled code raised
    error_message: str | None = None
    warnings: tuple[str, ...] = ()
    analysis: Analysis | None = None  #: None when processing failed before it
    capture: CaptureFacts = field(default_factory=CaptureFacts)
    manifest: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None  #: the run directory, once written
    annotation: Annotation = field(default_factory=Annotation)

    # the parts every reader wants, by name
    @property
    def trace(self) -> Trace | None:
        return self.analysis.trace if self.analysis is not None else None

    @property
    def summary(self) -> Summary | None:
        return self.analysis.summary if self.analysis is not None else None

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self.analysis.diagnosis if self.analysis is not None else None

    @property
    def memory(self) -> MemoryReport | None:
        return self.analysis.memory if self.analysis is not None else None

    @property
    def device_facts(self) -> DeviceFacts:
        return self.analysis.device if self.analysis is not None else DeviceFacts()

    @property
    def trigger(self) -> Trigger | None:
        return self.capture.trigger

    @property
    def otel_parent(self) -> Any:
        return self.capture.otel_parent

    @property
    def baseline(self) -> Path | None:
        return self.annotation.baseline

    @property
    def explanation(self) -> Explanation | None:
        return self.annotation.explanation
