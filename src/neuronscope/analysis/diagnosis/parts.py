"""The pieces of a diagnosis (:class:`~.model.Diagnosis`), as plain, serialisable data: the
classified gaps, the steps, a finding, the CPU contention, the busy/idle timeline, the collectives.

The same contract as :mod:`.model`: times in microseconds, instants in Unix-epoch nanoseconds,
field names kept within a ``schema_version``; imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..units import format_us

__all__ = [
    "CollectiveStats",
    "Communication",
    "CpuContention",
    "Finding",
    "Gap",
    "Gaps",
    "Step",
    "Steps",
    "Timeline",
    "rounded",
]


def rounded(x: float, nd: int = 3) -> float:
    """``x`` as a float rounded to ``nd`` places: how the JSON writes times."""
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
        d["duration_us"] = rounded(self.duration_us)
        d["host"] = [[name, rounded(us)] for name, us in self.host]
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
            "total_us": rounded(self.total_us),
            "us_by_class": {k: rounded(v) for k, v in self.us_by_class.items()},
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
            "duration_us": rounded(self.duration_us),
            "device_busy_pct": rounded(self.device_busy_pct, 2),
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
            "p50_us": rounded(self.p50_us),
            "p90_us": rounded(self.p90_us),
            "p99_us": rounded(self.p99_us),
            "max_us": rounded(self.max_us),
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
            "us_at_stake": rounded(self.us_at_stake),
            "us_per_step": None if self.us_per_step is None else rounded(self.us_per_step),
            "us_to_limit": None if self.us_to_limit is None else rounded(self.us_to_limit),
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
            "wall_us": rounded(self.wall_us),
            "run_us": rounded(self.run_us),
            "wait_us": rounded(self.wait_us),
            "wait_pct": rounded(self.wait_pct, 2),
            "others_cpu_us": None if self.others_cpu_us is None else rounded(self.others_cpu_us),
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
            "time_us": rounded(self.time_us),
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
            "collective_us": rounded(self.collective_us),
            "exposed_us": rounded(self.exposed_us),
            "overlap_pct": rounded(self.overlap_pct, 2),
            "exposed_pct_of_window": rounded(self.exposed_pct_of_window, 2),
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
