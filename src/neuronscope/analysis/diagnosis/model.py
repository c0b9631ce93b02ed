"""The diagnosis of one run: why it is slow, as plain, serialisable data.

``run.diagnosis`` / ``neuronscope.diagnose(...)`` return a :class:`Diagnosis`. Every time is
in microseconds (floats from int64 ns data), every instant in Unix-epoch nanoseconds. The
field names are part of the public contract (summary.json, ``neuronscope show --json``,
OpenTelemetry attributes and metrics read them); new fields may be added, existing ones
keep their meaning within a ``schema_version``.

This module imports nothing heavy: the CLI reads a saved diagnosis without numpy or torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..units import format_us

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


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


@dataclass(frozen=True)
class Gap:
    """One device idle interval at or above the gap threshold."""

    start_ns: int
    duration_us: float
    cls: str  #: one of GAP_CLASSES
    #: what the host was doing meanwhile: (CPU op / region / python function, us inside the gap), most first
    host: tuple[tuple[str, float], ...] = ()
    source: str | None = None  #: ``file.py:123`` where the host was, when stacks were recorded
    before: str | None = None  #: the device op that ended the busy period before the gap
    after: str | None = None  #: the device op that ended the gap
    step: int | None = None  #: index into ``Diagnosis.steps.per_step`` when steps are known
    #: ``stream_wait`` gaps: the call that made the stream wait (``hipStreamWaitEvent at file:line``)
    wait: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["duration_us"] = _r(self.duration_us)
        d["host"] = [[name, _r(us)] for name, us in self.host]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Gap":
        return cls(
            start_ns=int(d["start_ns"]),
            duration_us=float(d["duration_us"]),
            cls=str(d["cls"]),
            host=tuple((str(n), float(us)) for n, us in d.get("host", ())),
            source=d.get("source"),
            before=d.get("before"),
            after=d.get("after"),
            step=d.get("step"),
            wait=d.get("wait"),
        )


@dataclass(frozen=True)
class Gaps:
    """Device idle intervals ``>= threshold_us``, classified. ``top``: the longest (at most 5)."""

    threshold_us: float
    count: int
    total_us: float
    us_by_class: dict[str, float]
    count_by_class: dict[str, int]
    top: tuple[Gap, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold_us": self.threshold_us,
            "count": self.count,
            "total_us": _r(self.total_us),
            "us_by_class": {k: _r(v) for k, v in self.us_by_class.items()},
            "count_by_class": dict(self.count_by_class),
            "top": [g.to_dict() for g in self.top],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Gaps":
        return cls(
            threshold_us=float(d["threshold_us"]),
            count=int(d["count"]),
            total_us=float(d["total_us"]),
            us_by_class={str(k): float(v) for k, v in d.get("us_by_class", {}).items()},
            count_by_class={str(k): int(v) for k, v in d.get("count_by_class", {}).items()},
            top=tuple(Gap.from_dict(g) for g in d.get("top", ())),
        )


@dataclass(frozen=True)
class Step:
    """One step (a repeated top-level region, decorated call, ``ProfilerStep#N`` or ``ns.step()``)."""

    index: int
    start_ns: int
    duration_us: float
    device_busy_pct: float
    bound_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start_ns": self.start_ns,
            "duration_us": _r(self.duration_us),
            "device_busy_pct": _r(self.device_busy_pct, 2),
            "bound_by": self.bound_by,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        return cls(int(d["index"]), int(d["start_ns"]), float(d["duration_us"]), float(d["device_busy_pct"]), str(d["bound_by"]))


@dataclass(frozen=True)
class Steps:
    """Per-step wall time. ``source``: ``profiler_step`` | ``ns.step`` | ``region`` | ``calls``."""

    source: str
    name: str  #: the region / function the steps are, or ``ProfilerStep`` / ``ns.step``
    count: int
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    slowest_index: int
    #: every step (a run with more than ``MAX_STEPS_SAVED`` keeps the slowest ones and says so in ``count``)
    per_step: tuple[Step, ...] = ()

    @property
    def slowest(self) -> Step | None:
        for s in self.per_step:
            if s.index == self.slowest_index:
                return s
        return None

    def durations_us(self) -> list[float]:
        return [s.duration_us for s in self.per_step]

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "name": self.name,
            "count": self.count,
            "p50_us": _r(self.p50_us),
            "p90_us": _r(self.p90_us),
            "p99_us": _r(self.p99_us),
            "max_us": _r(self.max_us),
            "slowest_index": self.slowest_index,
            "per_step": [s.to_dict() for s in self.per_step],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Steps":
        return cls(
            source=str(d["source"]),
            name=str(d["name"]),
            count=int(d["count"]),
            p50_us=float(d["p50_us"]),
            p90_us=float(d["p90_us"]),
            p99_us=float(d["p99_us"]),
            max_us=float(d["max_us"]),
            slowest_index=int(d["slowest_index"]),
            per_step=tuple(Step.from_dict(s) for s in d.get("per_step", ())),
        )


@dataclass(frozen=True)
class Finding:
    """One piece of advice. ``rule`` is a stable id (``elementwise_chain``, ``sync_in_loop``, ...).

    ``us_at_stake`` is what the proposed fix is expected to save (``evidence["at_stake_model"]``
    says how it was estimated); where a rule also measures the distance to the hardware's limit
    (``below_roof``), that gap is ``us_to_limit``: shown beside it, never ranked by."""

    rule: str
    message: str  #: what to change, in one line
    us_at_stake: float  #: the time the fix is expected to save over the whole run (recorded time)
    evidence: dict[str, Any] = field(default_factory=dict)  #: ops, regions, ``file:line``, the numbers
    severity: str = "medium"  #: ``high`` | ``medium`` | ``low`` | ``info``
    us_per_step: float | None = None  #: ``us_at_stake`` per recorded step, when the run has steps
    #: what the finding is about (the op, the chain, the optimizer, ...; "" = the run as a whole):
    #: a long run's windows fold into one finding per (rule, subject)
    subject: str = ""
    #: the time above the hardware's limit for the same work (a kernel at the roof), where known
    us_to_limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject,
            "message": self.message,
            "us_at_stake": _r(self.us_at_stake),
            "us_per_step": None if self.us_per_step is None else _r(self.us_per_step),
            "us_to_limit": None if self.us_to_limit is None else _r(self.us_to_limit),
            "severity": self.severity,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        per_step = d.get("us_per_step")
        to_limit = d.get("us_to_limit")
        return cls(
            rule=str(d["rule"]),
            message=str(d["message"]),
            us_at_stake=float(d.get("us_at_stake", 0.0)),
            evidence=dict(d.get("evidence") or {}),
            severity=str(d.get("severity", "medium")),
            us_per_step=None if per_step is None else float(per_step),
            subject=str(d.get("subject") or ""),
            us_to_limit=None if to_limit is None else float(to_limit),
        )


@dataclass(frozen=True)
class CpuContention:
    """Whether the profiled thread had a CPU while it ran: what Linux counted for it
    (``/proc/<tid>/schedstat``: time on a CPU, time runnable but waiting for one) and what the
    other processes used (``/proc/stat`` less this process), over the recorded time.

    The time the thread waited for a core is time the recording lasted only because the CPU was
    shared: what it spent running (ops, Python, dispatch) took ``(run + wait) / run`` times as
    long as alone, and the claims built on such time are scaled back by :attr:`runnable_share`.
    Time it slept or blocked (I/O, ``time.sleep``, a device sync) is not lengthened by contention:
    claims about such waits are marked, not scaled."""

    wall_us: float  #: the recorded time these figures cover
    run_us: float  #: the profiled thread on a CPU
    wait_us: float  #: the profiled thread runnable, waiting for a CPU (the run queue)
    others_cpu_us: float | None = None  #: CPU time of every other process meanwhile (None: not Linux)
    cpus: int = 1

    #: the thread waited for a core at least this share of the recorded time: the window was contended
    CONTENDED_WAIT_PCT = 10.0

    @property
    def wait_pct(self) -> float:
        """Share of the recorded time the thread spent waiting for a CPU."""
        return 100.0 * self.wait_us / self.wall_us if self.wall_us > 0 else 0.0

    @property
    def others_cpus(self) -> float | None:
        """CPUs the other processes kept busy on average (of ``cpus``)."""
        return None if self.others_cpu_us is None or self.wall_us <= 0 else self.others_cpu_us / self.wall_us

    @property
    def contended(self) -> bool:
        return self.wait_pct >= self.CONTENDED_WAIT_PCT

    @property
    def runnable_share(self) -> float:
        """The share of its runnable time the thread really ran (1: uncontended): what an op, or
        the Python between ops, took alone as a share of its time here."""
        wanted = self.run_us + self.wait_us
        return max(self.run_us / wanted, 0.05) if wanted > 0 and self.contended else 1.0

    def line(self) -> str:
        """``CPU contended: the profiled thread waited for a core 38% of the recorded time (other
        processes kept 1.6 of 2 CPUs busy): ...``"""
        others = self.others_cpus
        who = f" (other processes kept {others:.1f} of {self.cpus} CPUs busy)" if others is not None else ""
        return (
            f"CPU contended: the profiled thread waited for a core {self.wait_pct:.0f}% of the recorded time{who}: what it "
            f"ran took {1 / self.runnable_share:.1f}x as long as alone; the time at stake of findings about CPU work leaves "
            "that waiting out — profile on a quiet machine for figures to compare"
        )

    def plus(self, other: "CpuContention") -> "CpuContention":
        """Two windows' figures together."""
        others = None if self.others_cpu_us is None or other.others_cpu_us is None else self.others_cpu_us + other.others_cpu_us
        return CpuContention(
            self.wall_us + other.wall_us,
            self.run_us + other.run_us,
            self.wait_us + other.wait_us,
            others,
            max(self.cpus, other.cpus),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_us": _r(self.wall_us),
            "run_us": _r(self.run_us),
            "wait_us": _r(self.wait_us),
            "wait_pct": _r(self.wait_pct, 2),
            "others_cpu_us": None if self.others_cpu_us is None else _r(self.others_cpu_us),
            "cpus": self.cpus,
            "contended": self.contended,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CpuContention":
        others = d.get("others_cpu_us")
        return cls(
            float(d["wall_us"]),
            float(d["run_us"]),
            float(d["wait_us"]),
            None if others is None else float(others),
            int(d.get("cpus", 1)),
        )


@dataclass(frozen=True)
class Timeline:
    """What the HTML report draws: busy fraction in equal bins, and the classified gaps."""

    start_ns: int
    end_ns: int
    busy_bins: tuple[float, ...] = ()  #: fraction of each bin the device was busy, 0..1
    gaps: tuple[tuple[int, int, str], ...] = ()  #: (start_ns, duration_ns, cls), the longest gaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "busy_bins": [round(b, 4) for b in self.busy_bins],
            "gaps": [list(g) for g in self.gaps],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Timeline":
        return cls(
            start_ns=int(d["start_ns"]),
            end_ns=int(d["end_ns"]),
            busy_bins=tuple(float(b) for b in d.get("busy_bins", ())),
            gaps=tuple((int(s), int(n), str(c)) for s, n, c in d.get("gaps", ())),
        )


@dataclass(frozen=True)
class CollectiveStats:
    """One kind of collective (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
    ``send``/``recv``/``send_recv``, ``broadcast``...) over the window."""

    kind: str
    calls: int  #: collective events (kernels, or gloo ops on a CPU run)
    time_us: float  #: union of their intervals
    bytes: int | None = None  #: message bytes, where the trace records sizes and dtypes
    group_size: int | None = None  #: ranks in the process group, where the trace records it

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "calls": self.calls,
            "time_us": _r(self.time_us),
            "bytes": self.bytes,
            "group_size": self.group_size,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CollectiveStats":
        return cls(str(d["kind"]), int(d["calls"]), float(d["time_us"]), d.get("bytes"), d.get("group_size"))


@dataclass(frozen=True)
class Communication:
    """Collectives in the window: their time, and how much of it no compute overlapped."""

    backend: str  #: ``nccl`` | ``rccl`` | ``gloo`` | the device's name (collectives named by their kernels)
    collective_us: float  #: union of collective time (it counts as device busy time too)
    exposed_us: float  #: collective time while no compute ran on any stream: what overlap could win
    overlap_pct: float  #: share of collective time hidden under compute
    exposed_pct_of_window: float
    by_kind: tuple[CollectiveStats, ...] = ()  #: most time first

    def line(self) -> str:
        """``communication 85.0ms (all_reduce 80.1ms ×17): 64.2ms exposed, 24% overlapped with compute``"""
        kinds = ", ".join(f"{c.kind} {format_us(c.time_us)} ×{c.calls}" for c in self.by_kind[:3])
        return (
            f"communication ({self.backend}) {format_us(self.collective_us)} ({kinds}): {format_us(self.exposed_us)} "
            f"exposed ({self.exposed_pct_of_window:.0f}% of the window), {self.overlap_pct:.0f}% overlapped with compute"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "collective_us": _r(self.collective_us),
            "exposed_us": _r(self.exposed_us),
            "overlap_pct": _r(self.overlap_pct, 2),
            "exposed_pct_of_window": _r(self.exposed_pct_of_window, 2),
            "by_kind": [c.to_dict() for c in self.by_kind],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Communication":
        return cls(
            backend=str(d.get("backend", "")),
            collective_us=float(d["collective_us"]),
            exposed_us=float(d["exposed_us"]),
            overlap_pct=float(d["overlap_pct"]),
            exposed_pct_of_window=float(d.get("exposed_pct_of_window", 0.0)),
            by_kind=tuple(CollectiveStats.from_dict(c) for c in d.get("by_kind", ())),
        )


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
            "device_busy_us": _r(self.device_busy_us),
            "device_idle_us": _r(self.device_idle_us),
            "device_busy_pct": _r(self.device_busy_pct, 2),
            "idle_us_by_class": {k: _r(v) for k, v in self.idle_us_by_class.items()},
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
