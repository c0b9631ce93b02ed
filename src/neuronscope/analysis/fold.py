"""Folding the windows of a long run into one summary and one diagnosis.

A long run is profiled in windows (``profile_neuron(windows=...)``, ``neuronscope run``):
each window is summarised and diagnosed as it ends and its events are freed, so memory is
bounded by one window whatever the length of the run. What the user reads is the fold of
all of them:

* the summary adds each op's calls and times over the windows (every field of a row is a
  sum, a min or a max, so folding is exact), and the regions likewise;
* the diagnosis adds busy and idle time per class over the recorded time, keeps the longest
  gaps, takes step-time percentiles over every step the run timed (recorded or not), and
  records the verdict of each window (``evidence["windows"]``);
* findings fold per rule **and subject** (the op, chain, optimizer... a finding is about): the
  amounts of their evidence add up, and the message is rendered again from that evidence, so a
  folded finding's message, evidence and time at stake are the run's; per-step figures are per
  *recorded* step. A rule whose findings follow from the summary (``below_roof``) runs again
  over the folded summary instead, so it never claims more than the folded table holds;
* notes fold into one line per kind (the text before its first colon), the ones with figures
  recomputed for the run (the ops at the limit, CPU contention).

Pure functions of the window results: no torch, no trace.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .diagnosis.model import (
    CollectiveStats,
    Communication,
    CpuContention,
    Diagnosis,
    Finding,
    Gaps,
    Step,
    Steps,
)
from .roofline import attach_roofline
from .summary import OpStats, RegionStats, Summary, build_summary

__all__ = ["TimedSteps", "fold_diagnoses", "fold_summaries"]

_SEVERITY = ("info", "low", "medium", "high")


@dataclass(frozen=True)
class TimedSteps:
    """Every step a run timed, recorded or not: a uniform sample of their wall times (all of
    them up to a cap, then every 2nd, 4th...: capture/budget.py keeps it bounded), whether
    neuronscope's own analysis ran beside each, and the slowest one exactly."""

    count: int
    sample_us: Sequence[float]
    sample_overlapped: Sequence[bool]
    slowest_index: int
    slowest_us: float
    slowest_overlapped: bool = False

    @classmethod
    def of(cls, durations_us: Sequence[float], overlapped: Sequence[bool] | None = None) -> TimedSteps:
        """All of ``durations_us`` (tests; short runs)."""
        flags = list(overlapped) if overlapped is not None else [False] * len(durations_us)
        slowest = max(range(len(durations_us)), key=lambda i: durations_us[i]) if durations_us else 0
        return cls(
            count=len(durations_us),
            sample_us=list(durations_us),
            sample_overlapped=flags,
            slowest_index=slowest,
            slowest_us=float(durations_us[slowest]) if durations_us else 0.0,
            slowest_overlapped=bool(flags[slowest]) if durations_us else False,
        )


def _row_tuple(r: OpStats) -> tuple:
    ns = 1000.0
    return (
        r.name,
        r.calls,
        round(r.device_time_us * ns),
        round(r.self_device_time_us * ns),
        round(r.cpu_time_us * ns),
        round(r.self_cpu_time_us * ns),
        r.first_start_ns,
        r.last_end_ns,
        round(r.compile_time_us * ns),
        r.calls if r.compile else 0,
        r.work,
    )


def _unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def fold_summaries(parts: Sequence[Summary]) -> Summary:
    """One summary of all ``parts`` (the windows of one run): each op's calls and times added."""
    if not parts:
        raise ValueError("fold_summaries: no summaries to fold")
    device = parts[0].device
    root = build_summary([_row_tuple(r) for s in parts for r in s.rows], device)
    total_ns = root.total_device_time_us * 1000.0
    paths = _unique([p for s in parts for p in s.regions])
    regions: dict[str, Summary] = {}
    for path in paths:
        pieces = [s.regions[path] for s in parts if path in s.regions]
        stats = [p.region_stats for p in pieces if p.region_stats is not None]
        region = build_summary([_row_tuple(r) for p in pieces for r in p.rows], device)
        regions[path] = replace(
            region,
            region_stats=RegionStats(
                path=path,
                occurrences=sum(st.occurrences for st in stats),
                wall_time_us=sum(st.wall_time_us for st in stats),
                first_start_ns=min((st.first_start_ns for st in stats), default=0),
                last_end_ns=max((st.last_end_ns for st in stats), default=0),
            )
            if stats
            else None,
            direct_rows=build_summary([_row_tuple(r) for p in pieces for r in p.direct_rows], device, total_ns).rows,
        )
    labels: dict[str, str] = {}
    for s in parts:
        labels.update(s.labels)
    if labels:
        regions = {p: replace(r, labels=labels) for p, r in regions.items()}
    folded = replace(
        root,
        regions=regions,
        direct_rows=build_summary([_row_tuple(r) for s in parts for r in s.direct_rows], device, total_ns).rows,
        warnings=_unique([w for s in parts for w in s.warnings]),
        notes=_unique([n for s in parts for n in s.notes]),
        labels=labels,
        device_classes=_fold_classes(parts),
    )
    limits = next((s.limits for s in parts if s.limits is not None), None)
    if limits is None and not any(r.work is not None for r in folded.rows):
        return folded
    return attach_roofline(folded, limits)  # the work adds up; the rooflines are of the sums


def _fold_classes(parts: Sequence[Summary]) -> Any:
    """The windows' device time by class, added (None when no window has one: saved before them)."""
    found = [s.device_classes for s in parts if s.device_classes is not None]
    return functools.reduce(lambda a, b: a.combine(b), found) if found else None


def _fold_gaps(parts: Sequence[Diagnosis], top_n: int = 5) -> Gaps:
    us_by: dict[str, float] = {}
    n_by: dict[str, int] = {}
    for d in parts:
        for c, v in d.gaps.us_by_class.items():
            us_by[c] = us_by.get(c, 0.0) + v
        for c, n in d.gaps.count_by_class.items():
            n_by[c] = n_by.get(c, 0) + n
    top = sorted((g for d in parts for g in d.gaps.top), key=lambda g: -g.duration_us)[:top_n]
    # a gap's step index is its window's: it no longer points into the folded steps
    return Gaps(
        threshold_us=parts[0].gaps.threshold_us,
        count=sum(d.gaps.count for d in parts),
        total_us=sum(d.gaps.total_us for d in parts),
        us_by_class=us_by,
        count_by_class=n_by,
        top=tuple(replace(g, step=None) for g in top),
    )


def _percentile(sorted_us: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile of an already sorted list."""
    if not sorted_us:
        return 0.0
    pos = (len(sorted_us) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_us) - 1)
    return sorted_us[lo] + (sorted_us[hi] - sorted_us[lo]) * (pos - lo)


def _fold_steps(parts: Sequence[Diagnosis], timed: TimedSteps | None, max_saved: int = 1000) -> Steps | None:
    windows = [d.steps for d in parts if d.steps is not None and d.steps.count]
    if not windows and not (timed and timed.count):
        return None
    per_step: list[Step] = []
    offset = 0
    for s in windows:
        per_step += [replace(p, index=p.index + offset) for p in s.per_step] if offset else s.per_step
        offset += s.count
    if len(per_step) > max_saved:  # the slowest ones, in time order
        keep = sorted(sorted(per_step, key=lambda p: -p.duration_us)[:max_saved], key=lambda p: p.start_ns)
        per_step = keep
    if timed and timed.count:
        # the percentiles leave out the steps neuronscope's own analysis ran beside, when others
        # remain; the slowest is over all of them (a slow step of yours is never hidden)
        clean = [float(x) for x, o in zip(timed.sample_us, timed.sample_overlapped) if not o]
        durations = sorted(clean or (float(x) for x in timed.sample_us))
        count = timed.count
        slowest = timed.slowest_index
        max_us = timed.slowest_us
        source, name = (windows[0].source, windows[0].name) if windows else ("ns.step", "ns.step")
    else:
        durations = sorted(p.duration_us for p in per_step)
        count = offset
        slow = max(per_step, key=lambda p: p.duration_us, default=None)
        slowest = slow.index if slow is not None else 0
        max_us = durations[-1] if durations else 0.0
        source, name = windows[0].source, windows[0].name
    return Steps(
        source=source,
        name=name,
        count=count,
        p50_us=_percentile(durations, 50),
        p90_us=_percentile(durations, 90),
        p99_us=_percentile(durations, 99),
        max_us=max_us,
        slowest_index=slowest,
        per_step=tuple(per_step),
    )


def _add(values: list[Any]) -> Any:
    """The run's amount from the windows': numbers add, dicts add per key, lists unite."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        total = sum(present)
        return round(total, 3) if isinstance(total, float) else total
    if all(isinstance(v, dict) for v in present):
        keys = dict.fromkeys(k for v in present for k in v)
        return {k: _add([v.get(k) for v in present]) for k in keys}
    if all(isinstance(v, (list, tuple)) for v in present):
        return sorted({x for v in present for x in v}, key=str)
    return present[0]


def _fold_one(rule: str, found: list[Finding], spec: Any, ctx: Any, windows_total: int) -> Finding:
    """One (rule, subject)'s findings over the windows where they fired, as the run's finding."""
    from .diagnosis.rules import severity_of

    lead = max(found, key=lambda f: f.us_at_stake)
    us = sum(f.us_at_stake for f in found)
    evidence = dict(lead.evidence)
    for key in spec.adds if spec is not None else ():
        evidence[key] = _add([f.evidence.get(key) for f in found])
    share = us / max(ctx.words.window_us, 1e-9)
    evidence["pct_of_window"] = round(100 * share, 2)
    evidence["windows"] = sum(int(f.evidence.get("windows", 1)) for f in found)
    evidence["windows_total"] = windows_total
    marks = [f.evidence.get("contended") for f in found if f.evidence.get("contended")]
    if marks:
        evidence["contended"] = "scaled" if "scaled" in marks else marks[0]
    message = spec.message(evidence, ctx.words) if spec is not None and spec.message is not None else lead.message
    lead_share = float(lead.evidence.get("pct_of_window", 0.0)) / 100
    # a severity the rule set itself (not from the share of time) is kept
    severity = severity_of(share) if lead.severity == severity_of(lead_share) else lead.severity
    limits = [f.us_to_limit for f in found if f.us_to_limit is not None]
    return Finding(
        rule=rule,
        message=message,
        us_at_stake=us,
        evidence=evidence,
        severity=severity,
        us_per_step=ctx.words.per_step(us) if any(f.us_per_step is not None for f in found) else None,
        subject=lead.subject,
        us_to_limit=sum(limits) if limits else None,
    )


def _fold_findings(parts: Sequence[Diagnosis], ctx: Any, summary: Summary | None, windows_total: int) -> list[Finding]:
    from .diagnosis.rules import load_rules

    specs = load_rules()
    groups: dict[tuple[str, str], list[Finding]] = {}
    for d in parts:
        for f in d.findings:
            groups.setdefault((f.rule, f.subject), []).append(f)
    folded: list[Finding] = []
    refolded = {rule for rule, spec in specs.items() if spec.refold is not None and summary is not None}
    for rule in sorted(refolded):
        for f in specs[rule].refold(summary, ctx):  # type: ignore[misc]
            fired = sum(int(g.evidence.get("windows", 1)) for g in groups.get((rule, f.subject), ()))
            folded.append(replace(f, evidence={**f.evidence, "windows": fired, "windows_total": windows_total}))
    for (rule, _subject), fs in groups.items():
        if rule not in refolded:
            folded.append(_fold_one(rule, fs, specs.get(rule), ctx, windows_total))
    folded.sort(key=lambda f: (-f.us_at_stake, f.rule, f.subject))
    return folded


def _note_kind(note: str) -> str:
    return note.split(":", 1)[0]


def _fold_notes(parts: Sequence[Diagnosis], run_notes: list[str], recorded: bool) -> list[str]:
    """One line per kind, in the windows' order: the run's own line (recomputed: the ops at the
    limit, contention) where it has one, else the first window's."""
    run_by_kind = {_note_kind(n): n for n in run_notes}
    recomputed = ("at the device's limit", "CPU contended")
    out: list[str] = []
    seen: set[str] = set()
    for note in (n for d in parts for n in d.notes):
        kind = _note_kind(note)
        if kind in seen or (recorded and kind == "nothing was recorded"):
            continue
        seen.add(kind)
        if kind in run_by_kind:
            out.append(run_by_kind[kind])
        elif not kind.startswith(recomputed):  # not true of the run as a whole
            out.append(note)
    return out + [n for k, n in run_by_kind.items() if k not in seen]


def _fold_contention(parts: Sequence[Diagnosis]) -> CpuContention | None:
    measured = [d.contention for d in parts if d.contention is not None]
    if not measured:
        return None
    total = measured[0]
    for c in measured[1:]:
        total = total.plus(c)
    return total


def _sum_known(values: list[int | None]) -> int | None:
    """The sum, or None when any is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def _fold_communication(parts: Sequence[Diagnosis], recorded_us: float) -> Communication | None:
    comms = [d.communication for d in parts if d.communication is not None]
    if not comms:
        return None
    collective = sum(c.collective_us for c in comms)
    exposed = sum(c.exposed_us for c in comms)
    kinds: dict[str, list[CollectiveStats]] = {}
    for c in comms:
        for k in c.by_kind:
            kinds.setdefault(k.kind, []).append(k)
    by_kind = [
        CollectiveStats(
            kind=kind,
            calls=sum(k.calls for k in ks),
            time_us=sum(k.time_us for k in ks),
            bytes=_sum_known([k.bytes for k in ks]),
            group_size=ks[0].group_size,
        )
        for kind, ks in kinds.items()
    ]
    by_kind.sort(key=lambda k: -k.time_us)
    return Communication(
        backend=comms[0].backend,
        collective_us=collective,
        exposed_us=exposed,
        overlap_pct=100.0 * (collective - exposed) / collective if collective else 0.0,
        exposed_pct_of_window=100.0 * exposed / recorded_us if recorded_us else 0.0,
        by_kind=tuple(by_kind),
    )


#: a folded diagnosis lists the verdicts of at most this many windows (the latest); the rest are counted
MAX_WINDOW_ROWS = 100


def _windows_of(d: Diagnosis) -> int:
    """How many windows a part stands for: 1, or what an earlier fold folded (a running fold)."""
    return int(d.evidence.get("windows_folded", 1))


def _recorded_steps_of(d: Diagnosis) -> int:
    """The steps recorded in a part: a window's own, or an earlier fold's sum."""
    if "recorded_steps" in d.evidence:
        return int(d.evidence["recorded_steps"])
    return d.steps.count if d.steps is not None else 0


def _window_rows(parts: Sequence[Diagnosis], indexes: Sequence[int]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The verdict and busy share of each window (the latest ``MAX_WINDOW_ROWS``), and how many
    windows had each verdict."""
    rows: list[dict[str, Any]] = []
    verdicts: dict[str, int] = {}
    for i, d in zip(indexes, parts):
        if "windows_folded" in d.evidence:  # an earlier fold: its rows and counts
            rows += list(d.evidence.get("windows", ()))
            for verdict, n in d.evidence.get("windows_by_verdict", {}).items():
                verdicts[verdict] = verdicts.get(verdict, 0) + int(n)
            continue
        rows.append(
            {
                "window": i,
                "start_ns": d.window_start_ns,
                "end_ns": d.window_end_ns,
                "bound_by": d.bound_by,
                "device_busy_pct": round(d.device_busy_pct, 2),
            }
        )
        verdicts[d.bound_by] = verdicts.get(d.bound_by, 0) + 1
    return rows[-MAX_WINDOW_ROWS:], verdicts


def _fold_verdict(parts: Sequence[Diagnosis], recorded: Sequence[Diagnosis], idle_by: dict[str, float], contention: Any) -> str:
    from .diagnosis import judged_verdict

    window_us = sum(d.device_busy_us + d.device_idle_us for d in recorded)
    comm_us = sum(d.window_us for d in recorded if d.bound_by == "communication")
    if not any(d.bound_by != "none" for d in parts):
        return "none"
    if comm_us * 2 >= window_us and comm_us > 0:
        return "communication"
    return judged_verdict(sum(d.device_busy_us for d in recorded), idle_by, contention)


def fold_diagnoses(
    parts: Sequence[Diagnosis],
    *,
    timed: TimedSteps | None = None,
    window_indexes: Sequence[int] | None = None,
    summary: Summary | None = None,
) -> Diagnosis:
    """One diagnosis of all ``parts`` (the windows of one run, in time order).

    The fold is associative: a part may itself be a fold (``evidence["windows_folded"]``), so a
    long run folds each window into a running diagnosis as it ends, in constant time per window.
    ``timed``: every step the run timed, recorded or not (the count, the percentiles — without
    the steps neuronscope's own analysis ran beside, when others remain — and the slowest, with a
    note when ours overlapped it); ``window_indexes``: each part's window number; ``summary``:
    the run's folded summary (the rules that follow from it run again over it).
    """
    from .diagnosis import cause_first
    from .diagnosis.rules import MessageContext, RunContext

    if not parts:
        raise ValueError("fold_diagnoses: no diagnoses to fold")
    recorded = [d for d in parts if d.bound_by != "none"] or list(parts)
    busy = sum(d.device_busy_us for d in recorded)
    idle = sum(d.device_idle_us for d in recorded)
    window_us = busy + idle
    busy_pct = 100.0 * busy / window_us if window_us else 0.0
    idle_by: dict[str, float] = {}
    for d in recorded:
        for c, v in d.idle_us_by_class.items():
            idle_by[c] = idle_by.get(c, 0.0) + v
    contention = _fold_contention(recorded)
    bound_by = _fold_verdict(parts, recorded, idle_by, contention)
    anything = bound_by != "none"
    indexes = list(window_indexes) if window_indexes is not None else list(range(1, len(parts) + 1))
    rows, by_verdict = _window_rows(parts, indexes)
    idle_total = sum(idle_by.values())
    # per-step figures are per *recorded* step: the time at stake was found in the recorded windows
    recorded_steps = sum(_recorded_steps_of(d) for d in recorded)
    windows_total = sum(_windows_of(d) for d in parts)
    evidence: dict[str, Any] = {
        "device_busy_pct": round(busy_pct, 2),
        "device_bound_at_pct": parts[0].evidence.get("device_bound_at_pct", 80.0),
        "idle_share_pct": {c: round(100 * v / idle_total, 2) if idle_total else 0.0 for c, v in idle_by.items()},
        "window_us": round(window_us, 3),
        "recorded_us": round(window_us, 3),
        "gap_threshold_us": parts[0].gaps.threshold_us,
        "windows": rows,
        "windows_by_verdict": by_verdict,
        "windows_folded": windows_total,
        "recorded_steps": recorded_steps,
    }
    ctx = RunContext(device=parts[0].device, words=MessageContext(window_us, recorded_steps), contention=contention)
    findings = _fold_findings(recorded, ctx, summary, windows_total) if anything else []
    findings = cause_first(findings, bound_by)
    if contention is not None and contention.contended:
        ctx.note(contention.line())
    steps = _fold_steps(parts, timed)
    memory_lines = [d.memory_line for d in parts if d.memory_line]
    return Diagnosis(
        device=parts[0].device,
        timeline=parts[0].timeline,
        window_start_ns=min(d.window_start_ns for d in parts),
        window_end_ns=max(d.window_end_ns for d in parts),
        device_busy_us=busy,
        device_idle_us=idle,
        device_busy_pct=busy_pct,
        idle_us_by_class=idle_by,
        gaps=_fold_gaps(recorded),
        steps=steps,
        bound_by=bound_by,
        evidence=evidence,
        findings=tuple(findings),
        notes=tuple(_fold_notes(parts, ctx.notes, anything) + _overlap_note(steps, timed)),
        timeline_data=None,  # the windows' own timelines are in their run directories
        memory_line=memory_lines[-1] if memory_lines else None,
        communication=_fold_communication(recorded, window_us),
        contention=contention,
    )


def _overlap_note(steps: Steps | None, timed: TimedSteps | None) -> list[str]:
    if steps is None or timed is None or not timed.count or not any(timed.sample_overlapped):
        return []
    share = sum(1 for o in timed.sample_overlapped if o) / len(timed.sample_overlapped)
    note = (
        f"{share:.0%} of the {timed.count} steps ran while neuronscope analysed a window (the GIL and the cores are "
        "shared): the step-time percentiles leave them out"
    )
    if timed.slowest_overlapped:
        note += f"; the slowest step (#{timed.slowest_index}) is one of them: part of its time may be neuronscope's"
    return [note]
