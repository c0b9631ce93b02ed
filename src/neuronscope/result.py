"""What the stages hand each other: frozen records, each written by one stage only.

    capture ──CaptureFacts──▶ analysis ──Analysis──▶ output ──RunResult──▶ sinks, reports
                                  │                       │
                                  └─▶ run.summary,        └─▶ run.path, run.wait()
                                      run.diagnosis

* :class:`CaptureFacts` — what the capture knew (the OpenTelemetry context current when the
  profile started, why it was triggered, the device's state at the start and the end).
* :class:`DeviceFacts` — what the device backend adds after a capture (manifest fields,
  notes, warnings, the Neuron system profile); returned by ``DeviceBackend.finish_run``.
* :class:`Analysis` — the product of the one analysis (:func:`neuronscope.analysis.analyse.analyse`):
  trace model, summary, diagnosis, memory report, rank profile. ``run.summary`` and
  ``run.diagnosis`` return as soon as it exists.
* :class:`RunResult` — everything about one finished run; sinks and reports read only this.

:class:`~neuronscope.Run` is the user's handle: it waits for these and reads them; no stage
writes another stage's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# made by the one analysis (analysis/analyse.py), below this layer; re-exported for every stage
from .analysis.analyse import Analysis, Coverage, DeviceFacts

if TYPE_CHECKING:
    from .analysis.diagnosis import Diagnosis
    from .analysis.explain import Explanation
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
