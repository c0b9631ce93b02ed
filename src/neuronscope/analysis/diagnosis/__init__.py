"""Diagnosis: why a run is slow — device busy/idle, classified gaps, steps, a verdict, advice.

A pure stage over the trace model (:func:`diagnose_trace`); the result is plain data
(:mod:`.model`). Online it runs right after the summary on every run (``run.diagnosis``);
offline ``neuronscope.diagnose(path_or_run_or_trace)`` does the same for any Kineto trace.

    timeline.py   busy intervals, gaps, the class of every gap
    steps.py      the repeated unit of work and its wall time
    rules/        the advisor: one module per family of rules
    model.py      the result
"""

from __future__ import annotations

from typing import Any

from .model import (
    BOUND_BY,
    DIAGNOSIS_SCHEMA_VERSION,
    GAP_CLASSES,
    CollectiveStats,
    Communication,
    CpuContention,
    Diagnosis,
    Finding,
    Gap,
    Gaps,
    Step,
    Steps,
    Timeline,
    without_waiting,
)

__all__ = [
    "BOUND_BY",
    "DEFAULT_GAP_THRESHOLD_US",
    "DEVICE_BOUND_PCT",
    "DIAGNOSIS_SCHEMA_VERSION",
    "GAP_CLASSES",
    "CollectiveStats",
    "Communication",
    "CpuContention",
    "Diagnosis",
    "Finding",
    "Gap",
    "Gaps",
    "Step",
    "Steps",
    "Timeline",
    "cause_first",
    "diagnose_trace",
]

DEFAULT_GAP_THRESHOLD_US = 50.0
DEVICE_BOUND_PCT = 80.0
TOP_GAPS = 5
TIMELINE_BINS = 600
TIMELINE_GAPS = 2000
MAX_STEPS_SAVED = 1000
_VERDICT_OF = {
    "host_wait": "host",
    "launch": "launch",
    "sync": "sync",
    "data": "data",
    "compile": "compile",
    "stream_wait": "stream_wait",
}


def judged_verdict(busy_us: float, idle_by_class: dict[str, float], contention: Any = None) -> str:
    """The verdict, judged without the time the thread waited for a CPU (:func:`.model.without_waiting`):
    under contention the ops and the Python between them took longer while the waits (a
    DataLoader's sleep, a sync) did not, which would tilt any run towards device-bound."""
    busy_us, idle_by_class = without_waiting(busy_us, idle_by_class, contention)
    window = busy_us + sum(idle_by_class.values())
    return _verdict(100.0 * busy_us / window if window else 0.0, idle_by_class)


def _verdict(busy_pct: float, idle_by_class: dict[str, float]) -> str:
    if busy_pct >= DEVICE_BOUND_PCT or not any(idle_by_class.values()):
        return "device"
    top = max(GAP_CLASSES, key=lambda c: (idle_by_class.get(c, 0.0), -GAP_CLASSES.index(c)))
    return _VERDICT_OF[top]


def diagnose_trace(
    trace: Any,
    *,
    summary: Any = None,
    facts: dict[str, Any] | None = None,
    serial: int | None = None,
    gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US,
    window: Any = None,  # accepted for compatibility; the trace's own markers/extent are used
) -> Diagnosis:
    """Diagnose one trace model. ``facts``: the run's manifest (device facts such as Neuron
    Explorer metrics; ``cpu_contention``, a :class:`CpuContention` or its dict, when the capture
    measured it); ``serial``: the capture whose markers delimit the window."""
    import numpy as np

    from .communication import measure as measure_communication
    from .rules import Context, run_rules
    from .steps import find_steps
    from .timeline import CLASSES, build_timeline

    facts = dict(facts or {})
    if serial is None:
        serial = facts.get("_serial")
    tl = build_timeline(trace, serial=serial, threshold_us=gap_threshold_us, facts=facts)
    window_ns = tl.window_ns
    busy_pct = 100.0 * tl.busy_ns / window_ns if window_ns else 0.0
    glen = tl.gap_ns()
    idle_by = np.bincount(tl.gap_cls, weights=glen, minlength=len(CLASSES)) if glen.size else np.zeros(len(CLASSES))
    idle_by_class = {c: float(idle_by[i]) / 1e3 for i, c in enumerate(CLASSES)}
    big = np.flatnonzero(glen >= tl.threshold_ns)  # the gaps at or above the threshold

    # steps
    found = find_steps(trace, tl.lo, tl.hi, tl.main_thread)
    gaps = _gaps(tl, big, glen, gap_threshold_us, found[2] if found is not None else np.empty(0, dtype=np.int64))

    # the verdict: none over an empty window ("device-bound" over nothing is a guess)
    recorded = window_ns > 0 and _has_work(trace, tl.lo, tl.hi)
    comm, xs, xe = measure_communication(trace, tl.lo, tl.hi, tl.busy_s, tl.busy_e) if recorded else (None, None, None)
    contention = _contention(facts.get("cpu_contention"))
    steps = _steps(tl, *found, contention=contention) if found is not None else None
    bound_by = judged_verdict(tl.busy_ns / 1e3, idle_by_class, contention) if recorded else "none"
    if comm is not None and _communication_bound(comm, tl, xs, xe):
        bound_by = "communication"

    # the advice
    ctx = Context(
        trace=trace,
        timeline=tl,
        summary=summary,
        steps=steps.count if steps is not None else 0,
        facts=facts,
        communication=comm,
        contention=contention,
    )
    _notes(ctx, trace, tl, recorded)
    findings = cause_first(run_rules(ctx), bound_by) if recorded else []
    return Diagnosis(
        device=trace.device,
        timeline=tl.mode,
        window_start_ns=tl.lo,
        window_end_ns=tl.hi,
        device_busy_us=tl.busy_ns / 1e3,
        device_idle_us=max(window_ns - tl.busy_ns, 0) / 1e3,
        device_busy_pct=busy_pct,
        idle_us_by_class=idle_by_class,
        gaps=gaps,
        steps=steps,
        bound_by=bound_by,
        evidence=_evidence(trace, tl, busy_pct, idle_by_class, gap_threshold_us),
        findings=tuple(findings),
        notes=tuple(ctx.notes),
        timeline_data=_timeline_data(tl, big, glen),
        communication=comm,
        contention=contention,
    )


def _contention(value: Any) -> CpuContention | None:
    if value is None or isinstance(value, CpuContention):
        return value
    try:
        return CpuContention.from_dict(value)
    except (KeyError, TypeError, ValueError):
        return None


def _gaps(tl: Any, big: Any, glen: Any, threshold_us: float, step_starts: Any) -> Gaps:
    """The gaps at or above the threshold: counts and time per class, the longest in detail."""
    import numpy as np

    from .timeline import CLASSES, gap_details

    big_cls = tl.gap_cls[big]
    us_by = np.bincount(big_cls, weights=glen[big], minlength=len(CLASSES)) if big.size else np.zeros(len(CLASSES))
    n_by = np.bincount(big_cls, minlength=len(CLASSES)) if big.size else np.zeros(len(CLASSES), dtype=np.int64)
    top: list[Gap] = []
    for k in big[np.argsort(-glen[big], kind="stable")][:TOP_GAPS].tolist():
        host, source, before, after = gap_details(tl, k)
        wait = _wait_text(tl, int(tl.gap_wait[k])) if tl.gap_wait.size and tl.gap_wait[k] >= 0 else None
        step = int(np.searchsorted(step_starts, tl.gap_s[k], side="right") - 1) if step_starts.size else None
        top.append(
            Gap(
                start_ns=int(tl.gap_s[k]),
                duration_us=float(glen[k]) / 1e3,
                cls=CLASSES[int(tl.gap_cls[k])],
                host=host,
                source=source,
                before=before,
                after=after,
                step=step if step is not None and step >= 0 else None,
                wait=wait,
            )
        )
    return Gaps(
        threshold_us=threshold_us,
        count=int(big.size),
        total_us=float(glen[big].sum()) / 1e3,
        us_by_class={c: float(us_by[i]) / 1e3 for i, c in enumerate(CLASSES)},
        count_by_class={c: int(n_by[i]) for i, c in enumerate(CLASSES)},
        top=tuple(top),
    )


def _evidence(trace: Any, tl: Any, busy_pct: float, idle_by_class: dict[str, float], threshold_us: float) -> dict[str, Any]:
    import numpy as np

    from .timeline import graph_launches

    idle_total = sum(idle_by_class.values())
    evidence: dict[str, Any] = {
        "device_busy_pct": round(busy_pct, 2),
        "device_bound_at_pct": DEVICE_BOUND_PCT,
        "idle_share_pct": {c: round(100 * v / idle_total, 2) if idle_total else 0.0 for c, v in idle_by_class.items()},
        "window_us": round(tl.window_ns / 1e3, 3),
        "gap_threshold_us": threshold_us,
    }
    n_graphs, graph_latency = graph_launches(trace, tl.busy_s, tl.busy_e)
    if n_graphs:
        lat = np.asarray(graph_latency) if graph_latency else np.zeros(0)
        evidence["graph_launches"] = n_graphs
        evidence["graph_launch_latency_us"] = (
            {"p50": round(float(np.percentile(lat, 50)), 3), "max": round(float(lat.max()), 3)} if lat.size else None
        )
    return evidence


def _notes(ctx: Any, trace: Any, tl: Any, recorded: bool) -> None:
    """What the reader should know about how the diagnosis was made."""
    if tl.window_ns <= 0:
        ctx.note(
            f"nothing was recorded: {len(trace)} events, none of them ops or device work in a window — the profiler "
            "may have stopped before the work ran, its activities may have left the device out, or the file may be "
            "in a format neuronscope does not read (please report it)"
        )
    elif not recorded:
        ctx.note(
            f"nothing was recorded: no op and no device work ran in the {tl.window_ns / 1e6:.3f} ms profiled — the code "
            "under the profiler ran no torch ops (it failed before them, or returned a generator that was iterated "
            "outside the profile), or the profiler's activities left them out"
        )
    if tl.mode == "cpu_main_thread":
        ctx.note("no accelerator: 'device' is the CPU ops of the main thread, idle is the time between them")
    if not (trace.kind == 6).any():  # EventKind.PYTHON
        ctx.note("no source locations: profile with with_stack=True to get file:line for gaps and findings")
    if ctx.contention is not None and ctx.contention.contended:
        ctx.note(ctx.contention.line())


def _timeline_data(tl: Any, big: Any, glen: Any) -> Timeline:
    """What the HTML timeline draws: busy fraction per bin, the longest gaps."""
    import numpy as np

    from ..intervals import busy_bins
    from .timeline import CLASSES

    span = max(tl.hi - tl.lo, 1)
    bins = busy_bins(tl.busy_s, tl.busy_e, tl.lo, span, TIMELINE_BINS) if tl.window_ns else np.zeros(0)
    drawn = np.sort(big[np.argsort(-glen[big], kind="stable")][:TIMELINE_GAPS])
    return Timeline(
        start_ns=tl.lo,
        end_ns=tl.hi,
        busy_bins=tuple(float(b) for b in bins),
        gaps=tuple((int(tl.gap_s[k]), int(glen[k]), CLASSES[int(tl.gap_cls[k])]) for k in drawn.tolist()),
    )


#: the findings that name each verdict's cause
_CAUSE_RULES = {
    "data": ("sync_dataloader", "data_wait"),
    "sync": ("sync_in_loop",),
    "launch": ("launch_bound_loop", "forloop_indexing"),
    "compile": ("compile_in_window", "neuron_recompilation"),
    "communication": ("exposed_communication",),
}


def with_device_facts(diagnosis: Diagnosis, facts: Any) -> Diagnosis:
    """``diagnosis`` with the findings of device facts that arrived after it (Neuron Explorer's
    insights: the enrichment that runs after the summary is published), in the usual order."""
    from dataclasses import replace

    from .rules.neuron import explorer_findings

    have = {(f.rule, f.message) for f in diagnosis.findings}
    extra = [f for f in explorer_findings(facts) if (f.rule, f.message) not in have]
    if not extra:
        return diagnosis
    merged = sorted([*diagnosis.findings, *extra], key=lambda f: (-f.us_at_stake, f.rule))
    return replace(diagnosis, findings=tuple(cause_first(merged, diagnosis.bound_by)))


def cause_first(findings: list[Finding], bound_by: str) -> list[Finding]:
    """The verdict's cause leads when the trace shows one (data-bound: the data finding first),
    then the rest in their order (by time at stake) — so the top finding never contradicts the
    verdict; the fold of windows' diagnoses (analysis/fold.py) orders its findings by it too."""
    rules = _CAUSE_RULES.get(bound_by, ())
    lead = [f for f in findings if f.rule in rules]
    return lead + [f for f in findings if f.rule not in rules]


def _has_work(trace: Any, lo: int, hi: int) -> bool:
    """Any op or device work in [lo, hi]: else the window holds nothing to judge."""
    import numpy as np

    from ...trace.kinds import EventKind

    work = np.isin(trace.kind, [EventKind.OP, EventKind.DEVICE])
    return bool((work & (trace.start_ns <= hi) & (trace.start_ns + trace.duration_ns >= lo)).any())


def _communication_bound(comm: Communication, tl: Any, xs: Any, xe: Any) -> bool:
    """Exposed collectives are the largest share of the window: larger than the compute beside
    no collective, and than every class of idle time outside them (on a CPU run gloo works on
    its own thread while the main thread idles: that idle time is the collective's, not twice)."""
    from ..intervals import overlap_with
    from .timeline import CLASSES

    exposed_ns = int((xe - xs).sum())
    shares = [tl.busy_ns - int(overlap_with(tl.busy_s, tl.busy_e, xs, xe).sum())]
    for c in range(len(CLASSES)):
        sel = tl.gap_cls == c
        if sel.any():
            gs, ge = tl.gap_s[sel], tl.gap_e[sel]
            shares.append(int((ge - gs).sum()) - int(overlap_with(gs, ge, xs, xe).sum()))
    return exposed_ns > 0 and exposed_ns >= max(shares)


def _wait_text(tl: Any, call: int) -> str:
    """``hipStreamWaitEvent at model.py:12 (f)`` (the source where stacks were recorded, else
    the call's time into the window)."""
    import numpy as np

    from .locations import source_of

    trace = tl.trace
    name = trace.names[int(trace.name_id[call])]
    src = source_of(trace, np.array([call], dtype=np.int64), limit=1)
    where = src[0] if src else f"+{(int(trace.start_ns[call]) - tl.lo) / 1e3:.3f} ms"
    return f"{name} at {where}"


def _steps(tl: Any, source: str, name: str, s_start: Any, s_end: Any, *, contention: Any = None) -> Steps:
    import numpy as np

    from ..intervals import overlap_with
    from .timeline import CLASSES

    dur = (s_end - s_start).astype(np.int64)
    busy = overlap_with(s_start, s_end, tl.busy_s, tl.busy_e)
    # idle per class per step: the overlap of each step with the gaps of each class
    per_class = np.zeros((len(CLASSES), dur.size), dtype=np.int64)
    for c in range(len(CLASSES)):
        sel = tl.gap_cls == c
        if sel.any():
            per_class[c] = overlap_with(s_start, s_end, tl.gap_s[sel], tl.gap_e[sel])
    count = int(dur.size)
    keep = np.arange(count)
    if count > MAX_STEPS_SAVED:  # the slowest ones, in time order
        keep = np.sort(np.argsort(-dur, kind="stable")[:MAX_STEPS_SAVED])
    per_step = []
    for i in keep.tolist():
        d = int(dur[i])
        pct = 100.0 * int(busy[i]) / d if d > 0 else 0.0
        idle = {CLASSES[c]: float(per_class[c, i]) for c in range(len(CLASSES))}
        per_step.append(
            Step(
                index=i,
                start_ns=int(s_start[i]),
                duration_us=d / 1e3,
                device_busy_pct=pct,
                bound_by=judged_verdict(float(busy[i]), idle, contention),
            )
        )
    us = dur / 1e3
    slowest = int(np.argmax(dur)) if count else 0
    percentile = (lambda q: float(np.percentile(us, q))) if count else (lambda q: 0.0)
    return Steps(
        source=source,
        name=name,
        count=count,
        p50_us=percentile(50),
        p90_us=percentile(90),
        p99_us=percentile(99),
        max_us=float(us.max()) if count else 0.0,
        slowest_index=slowest,
        per_step=tuple(per_step),
    )
