"""The diagnosis of one run: why it is slow, as plain, serialisable data.

``run.diagnosis`` / ``neuronscope.diagnose(...)`` return a :class:`Diagnosis`. Every time is
in microseconds (floats from int64 ns data), every instant in Unix-epoch nanoseconds. The
field names are part of the public contract (summary.json, ``neuronscope show --json``,
OpenTelemetry attributes and metrics read them); new fields may be added, existing ones
keep their meaning within a ``schema_version``. Its pieces (:class:`Finding`, :class:`Gaps`,
:class:`Steps`...) are :mod:`.parts`', re-exported here; the diagnosis in words is at the end.

This module imports nothing heavy: the CLI reads a saved diagnosis without numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..units import format_us
from .parts import (
    CollectiveStats,
    Communication,
    CpuContention,
    Finding,
    Gap,
    Gaps,
    Step,
    Steps,
    Timeline,
    rounded,
)

__all__ = [
    "BOUND_BY",
    "CLASS_WORDS",
    "CollectiveStats",
    "Communication",
    "CpuContention",
    "DIAGNOSIS_SCHEMA_VERSION",
    "GAP_CLASSES",
    "Diagnosis",
    "Finding",
    "Gap",
    "Gaps",
    "Step",
    "Steps",
    "Timeline",
    "VERDICT_WORDS",
    "finding_line",
]

DIAGNOSIS_SCHEMA_VERSION = 1

#: Why the device was idle, finest first. Every idle nanosecond of the run window gets one.
#: ``host_wait``, ``sync``, ``data``, ``compile`` are host-side (before the next work was
#: launched); ``stream_wait`` is device-side (work queued, the stream waiting on an event or
#: another stream); ``launch`` is either (dispatch between short ops, kernel/graph launch latency).
#: Diagnoses saved before ``stream_wait`` existed may hold ``other`` (device waiting, queued).
GAP_CLASSES = ("host_wait", "launch", "sync", "data", "compile", "stream_wait")
#: The verdicts: ``communication`` when collectives that no compute overlaps hold the largest
#: share of the window, else ``device`` when the device was busy >= 80 % of it, else the idle
#: class that held most of the idle time.
BOUND_BY = (
    "device",
    "communication",
    "host",
    "launch",
    "sync",
    "data",
    "compile",
    "stream_wait",
    "none",
)  # none: nothing recorded


@dataclass(frozen=True)
class Diagnosis:
    """Why a run is slow: device busy/idle, classified gaps, steps, a verdict and advice."""

    device: str  #: "cpu" | "cuda" | "neuron"
    #: what "busy" means: ``device`` (device-op intervals on the device lanes) or
    #: ``cpu_main_thread`` (no accelerator: the CPU ops of the busiest thread)
    timeline: str
    window_start_ns: int
    window_end_ns: int
    device_busy_us: float
    device_idle_us: float
    device_busy_pct: float
    idle_us_by_class: dict[str, float]  #: every idle microsecond of the window, by class (sums to device_idle_us)
    gaps: Gaps
    steps: Steps | None
    bound_by: str  #: one of BOUND_BY
    evidence: dict[str, Any]  #: the numbers behind ``bound_by``
    findings: tuple[Finding, ...] = ()  #: most time at stake first
    notes: tuple[str, ...] = ()  #: what could not be diagnosed and how to enable it
    timeline_data: Timeline | None = None
    #: the memory verdict (``memory peak 1.2 GiB at aten::mm in forward/attn; +30 MiB per step``)
    #: when the run recorded memory; the last line of :meth:`headline`
    memory_line: str | None = None
    #: collectives (NCCL, RCCL, gloo): None when none ran in the window
    communication: Communication | None = None
    #: whether the profiled thread had a CPU while it ran (None: not measured, e.g. a saved trace)
    contention: CpuContention | None = None

    @property
    def window_us(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e3

    @property
    def top_finding(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def finding(self, rule: str) -> Finding | None:
        """The finding of ``rule``, or None."""
        return next((f for f in self.findings if f.rule == rule), None)

    def headline(self) -> list[str]:
        """The 3-5 line verdict the terminal summary starts with."""
        return headline_lines(self)

    def text(self, findings: int | None = 0) -> str:
        """The diagnosis in words: the 3-5 headline lines (the top finding among them), then the
        first ``findings`` findings, one a line, most time at stake first; ``findings=None``: every
        one. ``print(diagnosis)`` is ``text()``: the headline alone, whose top-finding line says
        how many more there are and how to list them (``print(run.diagnosis.text(findings=None))``;
        ``diagnosis.findings`` holds them)."""
        if findings is not None and (not isinstance(findings, int) or isinstance(findings, bool) or findings < 0):
            from ...errors import ConfigurationError

            raise ConfigurationError(f"Diagnosis.text(findings=...): a non-negative int or None, got {findings!r}")
        listed = list(self.findings if findings is None else self.findings[:findings])
        hint = "" if len(listed) >= len(self.findings) else f"; {_ALL_FINDINGS_HINT} lists them"
        lines = headline_lines(self, more_hint=hint)
        if listed:
            lines.append(f"findings ({len(listed)} of {len(self.findings)}, most time at stake first):")
            lines += [f"  {i}. {finding_line(f)} [{f.severity}]" for i, f in enumerate(listed, 1)]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return (
            f"<neuronscope.Diagnosis device={self.device!r} bound_by={self.bound_by!r} "
            f"busy={self.device_busy_pct:.0f}% window={format_us(self.window_us)} findings={len(self.findings)}>"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's terminal: what print() shows
        p.text(repr(self) if cycle else self.text())

    def _repr_html_(self) -> str:
        """What Jupyter shows: the headline, then every finding in a table, then the notes."""
        from ..notebook import diagnosis_html

        return diagnosis_html(self)

    def to_pandas(self, what: str = "findings") -> Any:
        """One of the diagnosis' tables as a pandas DataFrame:

        - ``"findings"``: one row per finding, most time at stake first (``rule``, ``severity``,
          ``message``, ``us_at_stake``, ``us_per_step``, ``evidence``);
        - ``"steps"``: one row per step kept (``index``, ``start_ns``, ``duration_us``,
          ``device_busy_pct``, ``bound_by``);
        - ``"gaps"``: the device idle intervals at or above the gap threshold, in time order
          (``start_ns``, ``offset_us`` from the window's start, ``duration_us``, ``cls``; the
          longest five also ``step``, ``before``, ``after``, ``host``, ``source``, ``wait``).

        Needs pandas (``pip install "neuronscope[notebook]"``)."""
        from ..notebook import diagnosis_frame

        return diagnosis_frame(self, what)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": DIAGNOSIS_SCHEMA_VERSION,
            "device": self.device,
            "timeline": self.timeline,
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "device_busy_us": rounded(self.device_busy_us),
            "device_idle_us": rounded(self.device_idle_us),
            "device_busy_pct": rounded(self.device_busy_pct, 2),
            "idle_us_by_class": {k: rounded(v) for k, v in self.idle_us_by_class.items()},
            "gaps": self.gaps.to_dict(),
            "steps": None if self.steps is None else self.steps.to_dict(),
            "bound_by": self.bound_by,
            "evidence": self.evidence,
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "timeline_data": None if self.timeline_data is None else self.timeline_data.to_dict(),
            **({"memory_line": self.memory_line} if self.memory_line else {}),
            "communication": None if self.communication is None else self.communication.to_dict(),
            "contention": None if self.contention is None else self.contention.to_dict(),
        }

    def as_saved(self) -> "Diagnosis":
        """This diagnosis as summary.json holds it (its figures rounded as the JSON writes them).
        The analysis hands out this one, so that what ``print(run.diagnosis)`` says is what a
        report of the saved run says (a busy share of 94.5049 % read "95%" live and "94%" from
        the saved 94.5)."""
        return type(self).from_dict(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Diagnosis":
        steps = d.get("steps")
        tl = d.get("timeline_data")
        return cls(
            device=str(d["device"]),
            timeline=str(d["timeline"]),
            window_start_ns=int(d["window_start_ns"]),
            window_end_ns=int(d["window_end_ns"]),
            device_busy_us=float(d["device_busy_us"]),
            device_idle_us=float(d["device_idle_us"]),
            device_busy_pct=float(d["device_busy_pct"]),
            idle_us_by_class={str(k): float(v) for k, v in d.get("idle_us_by_class", {}).items()},
            gaps=Gaps.from_dict(d["gaps"]),
            steps=None if steps is None else Steps.from_dict(steps),
            bound_by=str(d["bound_by"]),
            evidence=dict(d.get("evidence") or {}),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            notes=tuple(str(n) for n in d.get("notes", ())),
            timeline_data=None if tl is None else Timeline.from_dict(tl),
            memory_line=d.get("memory_line"),
            communication=None if not d.get("communication") else Communication.from_dict(d["communication"]),
            contention=None if not d.get("contention") else CpuContention.from_dict(d["contention"]),
        )


# --- the diagnosis in words: the 3-5 lines every summary starts with (print(run.diagnosis)) ---

VERDICT_WORDS = {
    "device": "device-bound",
    "host": "host-bound",
    "launch": "launch-bound",
    "sync": "sync-bound",
    "data": "data-bound",
    "compile": "compile-bound",
    "stream_wait": "stream-wait-bound",
    "communication": "communication-bound",
    "none": "no verdict",
}
#: what each idle class means, in the words of the verdict line
CLASS_WORDS = {
    "host_wait": "the host busy elsewhere between ops (Python, other ops)",
    "launch": "launch/dispatch time between short ops",
    "sync": "host-device syncs (.item(), .cpu(), synchronize) draining the queue",
    "data": "waiting for data loading",
    "compile": "compilation inside the profile",
    "stream_wait": "the device waiting on an event or another stream with work queued",
    "other": "the device waiting with work already queued",
}


def _what(d: "Diagnosis") -> str:
    return "CPU ops busy" if d.timeline == "cpu_main_thread" else f"{d.device} busy"


def finding_line(f: "Finding") -> str:
    """``[rule] message (~1.2ms, 61us/step at stake; 3.4ms above the roof)``: the expected saving,
    then the gap to the hardware's limit where the rule measured one."""
    said: list[str] = []
    if f.us_at_stake > 0:
        per = f", {format_us(f.us_per_step)}/step" if f.us_per_step is not None else ""
        said.append(f"~{format_us(f.us_at_stake)}{per} at stake")
    if f.us_to_limit:
        said.append(f"{format_us(f.us_to_limit)} above the roof")
    contended = f.evidence.get("contended")
    if contended == "marked":
        said.append("measured while the CPU was contended")
    elif contended:
        said.append("CPU contended: its waiting for a core left out")
    return f"[{f.rule}] {f.message}" + (f" ({'; '.join(said)})" if said else "")


def _stream_wait_why(d: "Diagnosis") -> str:
    """``the device idled 463 ms with work queued, waiting on an event (hipStreamWaitEvent at
    …); meanwhile the host blocked in aten::copy_ at file:line``"""
    waited = d.idle_us_by_class.get("stream_wait", 0.0)
    gap = next((g for g in d.gaps.top if g.cls == "stream_wait"), None)
    text = f"the device idled {format_us(waited)} with work queued, waiting on an event or another stream"
    if gap is not None and gap.wait:
        text += f" ({gap.wait})"
    if gap is not None and gap.host:
        verb = (
            "blocked in"
            if d.idle_us_by_class.get("sync", 0.0)
            or any(n.startswith(("aten::copy_", "aten::item", "aten::_local_scalar_dense", "aten::to")) for n, _ in gap.host[:1])
            else "was in"
        )
        text += f"; meanwhile the host {verb} {gap.host[0][0]}" + (f" at {gap.source}" if gap.source else "")
    return text


#: the idle classes that are the thread running (Python, dispatch): contention lengthens them as it
#: lengthens ops; the others are waits (data, syncs, queued device work), which it does not
RUNNABLE_IDLE = ("host_wait", "launch")


def waited_us(busy_us: float, idle_by_class: dict[str, float], contention: Any) -> float:
    """How long of the recorded time (busy plus idle) the thread waited for a core: its
    run-queue wait over the recorded share of the time it covers, at most what it ran (its ops
    and the Python between them). 0 when not contended."""
    if contention is None or not contention.contended:
        return 0.0
    ran = busy_us + sum(v for c, v in idle_by_class.items() if c in RUNNABLE_IDLE)
    return float(min(contention.wait_us * (busy_us + sum(idle_by_class.values())) / max(contention.wall_us, 1e-9), ran))


def without_waiting(busy_us: float, idle_by_class: dict[str, float], contention: Any) -> tuple[float, dict[str, float]]:
    """Busy time and idle time by class as they would have been without the time the thread waited
    for a core: that wait landed in what it ran — its ops, and the Python between them, where a
    preemption shows as a long ``host_wait`` gap — in proportion to their time; waits (data,
    syncs, queued device work) were not lengthened. (Unchanged when not contended.)"""
    wait = waited_us(busy_us, idle_by_class, contention)
    if wait <= 0:
        return busy_us, dict(idle_by_class)
    runnable_gaps = sum(v for c, v in idle_by_class.items() if c in RUNNABLE_IDLE)
    ran = busy_us + runnable_gaps
    in_gaps = wait * runnable_gaps / ran if ran > 0 else 0.0
    idle = dict(idle_by_class)
    idle["host_wait"] = max(idle.get("host_wait", 0.0) - in_gaps, 0.0)
    return max(busy_us - (wait - in_gaps), 0.0), idle


def judged_busy_pct(d: "Diagnosis") -> float:
    """The busy share the verdict is judged on (:func:`without_waiting`)."""
    busy, idle = without_waiting(d.device_busy_us, d.idle_us_by_class, d.contention)
    total = busy + sum(idle.values())
    return 100.0 * busy / total if total > 0 else 0.0


#: how ``print(diagnosis)`` says to list every finding
_ALL_FINDINGS_HINT = "print(run.diagnosis.text(findings=None))"


def headline_lines(d: "Diagnosis", *, more_hint: str = "") -> list[str]:
    """The headline; ``more_hint`` follows the "+N more" count of the top-finding line."""
    lines: list[str] = []
    where = " of the main thread (no accelerator)" if d.timeline == "cpu_main_thread" else ""
    verdict = VERDICT_WORDS.get(d.bound_by, d.bound_by)
    idle_total = sum(d.idle_us_by_class.values())
    if d.bound_by == "none":
        lines.append(d.notes[0] if d.notes else "nothing was recorded: no ops or device work in the window")
        return lines
    if d.bound_by == "communication" and d.communication is not None:
        c = d.communication
        why = (
            f"collectives ran with no compute beside them for {format_us(c.exposed_us)} "
            f"({c.exposed_pct_of_window:.0f}% of the window)"
        )
    elif d.bound_by == "device":
        why = f"busy >= {d.evidence.get('device_bound_at_pct', 80):.0f}% of the window"
    elif d.bound_by == "stream_wait":
        why = _stream_wait_why(d)
    else:
        top = max(d.idle_us_by_class, key=lambda c: d.idle_us_by_class[c])
        share = 100 * d.idle_us_by_class[top] / idle_total if idle_total else 0.0
        why = f"{share:.0f}% of idle time is {CLASS_WORDS.get(top, top)}"
    # a run profiled in windows: the time recorded, not the wall time from the first window to the last
    over = float(d.evidence.get("recorded_us", d.window_us))
    contended = ""
    if d.contention is not None and d.contention.contended:
        contended = (
            f"; the CPU was contended (the profiled thread waited for a core {d.contention.wait_pct:.0f}% of the recorded "
            f"time: without that waiting, busy {judged_busy_pct(d):.0f}%, the verdict's basis)"
        )
    lines.append(f"{_what(d)} {d.device_busy_pct:.0f}%{where} over {format_us(over)} — {verdict}: {why}{contended}")
    parts = [(c, us) for c, us in sorted(d.idle_us_by_class.items(), key=lambda kv: -kv[1]) if us > 0]
    if parts:
        shown = " · ".join(f"{c} {format_us(us)}" for c, us in parts[:4])
        lines.append(f"idle {format_us(d.device_idle_us)}: {shown}; {d.gaps.count} gaps >= {d.gaps.threshold_us:g}us")
    if d.steps is not None and d.steps.count:
        s = d.steps
        slow = s.slowest
        slow_txt = f", slowest #{s.slowest_index} {format_us(s.max_us)}" + (
            f" ({VERDICT_WORDS.get(slow.bound_by, slow.bound_by)})" if slow else ""
        )
        lines.append(
            f"{s.count} steps ({s.name}): p50 {format_us(s.p50_us)}, p90 {format_us(s.p90_us)}, p99 {format_us(s.p99_us)}{slow_txt}"
        )
    if d.communication is not None:
        lines.append(d.communication.line())
    if d.findings:
        more = f" (+{len(d.findings) - 1} more{more_hint})" if len(d.findings) > 1 else ""
        lines.append("top finding: " + finding_line(d.findings[0]) + more)
    elif d.gaps.top:
        g = d.gaps.top[0]
        src = f" at {g.source}" if g.source else ""
        lines.append(f"longest gap {format_us(g.duration_us)} ({g.cls}){src}")
    # the memory verdict comes last, whatever the time verdict took
    return lines[:5] + ([d.memory_line] if d.memory_line else [])
