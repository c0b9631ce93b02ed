"""A profiled call as one OpenTelemetry trace, built after the fact with explicit timestamps.

Modes (``op_spans``):

``summary`` (default)
    one span per distinct region path (``forward/decoder/attn``) aggregating its
    occurrences, and under each region (or the root) one span per distinct op that ran
    directly there. **These spans are aggregates**: a region span starts at its first
    occurrence and ends at its last; an op span starts at the op's first device execution
    there and lasts its summed self device time (cut at its parent's end; the true sum is in
    the attributes). The span count depends on the code's structure, not on loop counts.
``events``
    one span per region occurrence and per op execution (device kernels on an accelerator,
    CPU ops on a CPU), nested as they ran, real timestamps, at most ``max_spans``; the
    number left out is ``neuronscope.spans_dropped`` on the root.
``none``
    the root span only, carrying the top ops as attributes.

All timestamps are Kineto's wall-clock nanoseconds; nothing is "now minus something".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ...analysis.nesting import nest
from ...trace.model import EventKind

if TYPE_CHECKING:
    from ...result import RunResult
    from ...analysis.summary import OpStats, Summary
    from ...trace.model import Trace

__all__ = ["MAX_ATTRIBUTE_CHARS", "emit_run"]

MAX_ATTRIBUTE_CHARS = 256
_TOP_OPS_ON_ROOT = 5
_STEP_MARKER = "ProfilerStep#"


def _cap(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[: MAX_ATTRIBUTE_CHARS - 1] + "…"


def op_attributes(row: "OpStats") -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "neuronscope.op.name": _cap(row.name),
        "neuronscope.op.calls": row.calls,
        "neuronscope.op.device_time_us": row.device_time_us,
        "neuronscope.op.self_device_time_us": row.self_device_time_us,
        "neuronscope.op.device_pct": row.device_pct,
        "neuronscope.op.cpu_time_us": row.cpu_time_us,
        "neuronscope.op.self_cpu_time_us": row.self_cpu_time_us,
    }
    rf = row.roofline  # record_shapes=True on a device with known roofs
    if rf is not None:
        attrs.update(
            {
                "neuronscope.op.flops": rf.flops,
                "neuronscope.op.bytes": rf.bytes,
                "neuronscope.op.achieved_flops_per_s": rf.achieved_flops_per_s,
                "neuronscope.op.achieved_bytes_per_s": rf.achieved_bytes_per_s,
                "neuronscope.op.roof_pct": rf.pct_of_roof,
                "neuronscope.op.bound": rf.bound,
                "neuronscope.op.time_at_roof_us": rf.time_at_roof_us,
            }
        )
    return attrs


def root_attributes(run: "RunResult", mode: str) -> dict[str, Any]:
    summary = run.summary
    attrs: dict[str, Any] = {
        "neuronscope.run.name": _cap(run.name),
        "neuronscope.device": run.device,
        "neuronscope.op_spans": mode,
    }
    if run.path is not None:
        attrs["neuronscope.run.path"] = _cap(str(run.path.resolve()))
    if summary is not None:
        attrs["neuronscope.total_device_time_us"] = summary.total_device_time_us
        attrs["neuronscope.ops"] = len(summary)
        top = summary.top(_TOP_OPS_ON_ROOT)
        if top:
            attrs["neuronscope.top_op.name"] = _cap(top[0].name)
            attrs["neuronscope.top_op.device_pct"] = top[0].device_pct
            attrs["neuronscope.top_ops"] = [_cap(r.name) for r in top]
            attrs["neuronscope.top_ops.device_pct"] = [r.device_pct for r in top]
        from ...analysis.roofline import run_roofline

        fractions = run_roofline(summary)
        if fractions is not None and summary.limits is not None:
            attrs["neuronscope.roofline.device"] = _cap(summary.limits.name)
            attrs["neuronscope.roofline.flops_pct"] = fractions.flops_pct
            attrs["neuronscope.roofline.bytes_pct"] = fractions.bytes_pct
            attrs["neuronscope.roofline.roof_pct"] = fractions.roof_pct
    raw = run.manifest.get("neuron", {}) if isinstance(run.manifest.get("neuron"), dict) else {}
    for key in ("neff", "ntff", "other"):
        files = raw.get(f"{key}_files")
        if files:
            attrs[f"neuronscope.raw.{key}"] = [_cap(str(f)) for f in files[:64]]
    if raw.get("compilation_suspected"):
        attrs["neuronscope.compilation_suspected"] = True
    if raw.get("explorer_command"):
        attrs["neuronscope.raw.explorer_command"] = _cap(raw["explorer_command"])
    attrs.update(neuron_device_attributes(raw))
    attrs.update(diagnosis_attributes(run.diagnosis))
    attrs.update(memory_attributes(run.memory))
    from .distributed import rank_attributes

    attrs.update(rank_attributes(run.manifest))  # a rank of a torchrun job: rank, world size, job id
    if run.warnings:
        attrs["neuronscope.warnings"] = [_cap(w) for w in run.warnings[:16]]
    attrs.update(trigger_attributes(run))
    return attrs


def trigger_attributes(run: "RunResult") -> dict[str, Any]:
    """``neuronscope.trigger.*``: why a run was captured on demand (arming, a slow call), and
    what its baseline comparison found."""
    trig = getattr(run, "trigger", None)
    if trig is None:
        return {}
    attrs: dict[str, Any] = {"neuronscope.trigger.kind": trig.kind, "neuronscope.trigger.reason": _cap(trig.reason)}
    if trig.call_ms is not None:
        attrs["neuronscope.trigger.call_ms"] = float(trig.call_ms)
    if trig.threshold_ms is not None:
        attrs["neuronscope.trigger.threshold_ms"] = float(trig.threshold_ms)
    if trig.key is not None:
        key = trig.key
        attrs["neuronscope.trigger.key"] = key if isinstance(key, (bool, int, float)) else _cap(str(key))
    baseline = run.manifest.get("baseline")
    if baseline:
        attrs["neuronscope.trigger.baseline"] = _cap(str(baseline))
    explanation = run.explanation
    if explanation is not None:
        attrs["neuronscope.trigger.delta_us"] = round(float(explanation.delta_us), 3)
        if explanation.contributions:
            top = explanation.contributions[0]
            attrs["neuronscope.trigger.top_cause"] = _cap(top.name if top.kind == "op" else f"idle: {top.name}")
            attrs["neuronscope.trigger.top_cause.delta_us"] = round(float(top.delta_us), 3)
    return attrs


def trigger_links(run: "RunResult") -> list[Any] | None:
    """A link from the triggered run's root span to the slow call's span, when it had one."""
    trig = getattr(run, "trigger", None)
    ctx = getattr(trig, "span_context", None)
    if ctx is None or not getattr(ctx, "is_valid", False):
        return None
    return [trace.Link(ctx, {"neuronscope.link": "slow call"})]


#: Neuron Explorer metrics (manifest["neuron"]["explorer"]["metrics"]) put on the root span
_NEURON_METRICS = (
    "total_time_s",
    "mfu_percent",
    "hfu_percent",
    "mbu_percent",
    "dma_mbu_percent",
    "dma_active_time_s",
    "dma_active_percent",
    "cc_active_percent",
    "hbm_read_bytes",
    "spill_reload_bytes",
    "throttle_active_percent",
)


def memory_attributes(memory: Any) -> dict[str, Any]:
    """The memory verdict (profile_neuron(memory=True)): peak, growth and who holds the peak."""
    if memory is None:
        return {}
    attrs: dict[str, Any] = {
        "neuronscope.memory.device": memory.device,
        "neuronscope.memory.peak_bytes": int(memory.peak_bytes),
        "neuronscope.memory.growth_bytes": int(memory.growth_bytes),
    }
    if memory.growth_per_step_bytes is not None:
        attrs["neuronscope.memory.growth_per_step_bytes"] = int(memory.growth_per_step_bytes)
    top = memory.top
    if top is not None:
        attrs["neuronscope.memory.peak_op"] = _cap(top.op)
        attrs["neuronscope.memory.peak_region"] = _cap(top.region)
        attrs["neuronscope.memory.peak_op_bytes"] = int(top.bytes)
    if memory.oom:
        attrs["neuronscope.memory.oom"] = True
    return attrs


def diagnosis_attributes(diagnosis: Any) -> dict[str, Any]:
    """The verdict on the root span: Jaeger/Tempo can search and group runs by it."""
    if diagnosis is None:
        return {}
    attrs: dict[str, Any] = {
        "neuronscope.bound_by": diagnosis.bound_by,
        "neuronscope.device_busy_pct": round(float(diagnosis.device_busy_pct), 2),
        "neuronscope.device_idle_us": round(float(diagnosis.device_idle_us), 3),
        "neuronscope.findings": [f.rule for f in diagnosis.findings][:20],
        "neuronscope.gaps": int(diagnosis.gaps.count),
    }
    for cls, us in diagnosis.idle_us_by_class.items():
        attrs[f"neuronscope.idle.{cls}_us"] = round(float(us), 3)
    if diagnosis.findings:
        top = diagnosis.findings[0]
        attrs["neuronscope.top_finding"] = _cap(top.message)
        attrs["neuronscope.top_finding.us_at_stake"] = round(float(top.us_at_stake), 3)
    comm = getattr(diagnosis, "communication", None)
    if comm is not None:
        attrs["neuronscope.communication.backend"] = comm.backend
        attrs["neuronscope.communication.collective_us"] = round(float(comm.collective_us), 3)
        attrs["neuronscope.communication.exposed_us"] = round(float(comm.exposed_us), 3)
        attrs["neuronscope.communication.overlap_pct"] = round(float(comm.overlap_pct), 2)
        attrs["neuronscope.communication.kinds"] = [k.kind for k in comm.by_kind][:20]
    if diagnosis.steps is not None:
        attrs["neuronscope.steps"] = diagnosis.steps.count
        attrs["neuronscope.step.p50_us"] = round(diagnosis.steps.p50_us, 3)
        attrs["neuronscope.step.p99_us"] = round(diagnosis.steps.p99_us, 3)
    return attrs


def neuron_device_attributes(neuron: dict[str, Any]) -> dict[str, Any]:
    """``neuronscope.neuron.*`` root-span attributes: Explorer's device metrics and insight
    rules, the system profile's host memory / CPU facts, dropped trace events."""
    attrs: dict[str, Any] = {}
    explorer = v if isinstance(v := neuron.get("explorer"), dict) else {}
    metrics = v if isinstance(v := explorer.get("metrics"), dict) else {}
    for key in _NEURON_METRICS:
        if isinstance(metrics.get(key), (int, float)):
            attrs[f"neuronscope.neuron.{key}"] = metrics[key]
    for engine, pct in (metrics.get("engine_active_percent") or {}).items():
        attrs[f"neuronscope.neuron.engine_active_percent.{engine}"] = pct
    findings = [f for f in explorer.get("findings") or () if isinstance(f, dict)]
    if findings:
        attrs["neuronscope.neuron.findings"] = [_cap(str(f.get("rule"))) for f in findings[:16]]
        attrs["neuronscope.neuron.findings.us_at_stake"] = [float(f.get("us_at_stake") or 0) for f in findings[:16]]
    system = v if isinstance(v := neuron.get("system_profile"), dict) else {}
    if "max_bytes" in (system.get("host_memory") or {}):
        attrs["neuronscope.neuron.host_memory.max_bytes"] = system["host_memory"]["max_bytes"]
    if "mean_percent" in (system.get("cpu_util") or {}):
        attrs["neuronscope.neuron.cpu_util.mean_percent"] = system["cpu_util"]["mean_percent"]
    dropped = neuron.get("dropped_events")
    if isinstance(dropped, dict) and dropped.get("dropped"):
        attrs["neuronscope.neuron.dropped_events"] = int(dropped["dropped"])
    return attrs


def emit_run(
    run: "RunResult", tracer: Any, mode: str, max_spans: int, parent_context: Any = None, root_name: str | None = None
) -> tuple[str, str, int]:
    """Create the spans of one run. Returns (trace id hex, root span id hex, spans created)."""
    root = tracer.start_span(
        _cap(root_name or run.name),
        context=parent_context,
        kind=SpanKind.INTERNAL,
        start_time=run.start_ns,
        attributes=root_attributes(run, mode),
        links=trigger_links(run),
    )
    created = 1
    if run.error:
        root.set_status(Status(StatusCode.ERROR, _cap(run.error_message or run.error)))
        root.add_event(
            "exception",
            {"exception.type": run.error, "exception.message": _cap(run.error_message or "")},
            timestamp=run.end_ns,
        )
    diagnosis = run.diagnosis
    for f in diagnosis.findings[:10] if diagnosis is not None else ():  # one event per finding, at the run's end
        root.add_event(
            "neuronscope.finding",
            {
                "neuronscope.finding.rule": f.rule,
                "neuronscope.finding.message": _cap(f.message),
                "neuronscope.finding.us_at_stake": round(float(f.us_at_stake), 3),
                "neuronscope.finding.severity": f.severity,
            },
            timestamp=run.end_ns,
        )
    summary = run.summary
    if summary is not None and mode == "summary":
        op_contexts: dict[str, list[Any]] = {}
        created += _emit_summary(tracer, root, summary, run.start_ns, run.end_ns, op_contexts)
        if run.device != "cpu" and run.trace is not None:
            created += _emit_lanes(tracer, root, run, run.trace, op_contexts)
    elif summary is not None and mode == "events" and run.trace is not None:
        made, dropped = _emit_events(tracer, root, run, max_spans - 1)
        created += made
        root.set_attribute("neuronscope.spans_dropped", dropped)
    ctx = root.get_span_context()
    root.end(end_time=run.end_ns)
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), created


def _child(tracer: Any, parent: Any, name: str, start: int, attrs: dict[str, Any], links: Any = None) -> Any:
    """Start a span under ``parent`` at ``start`` (Unix ns); the caller ends it."""
    return tracer.start_span(
        _cap(name), context=trace.set_span_in_context(parent), start_time=start, attributes=attrs, links=links
    )


def _emit_lanes(tracer: Any, root: Any, run: "RunResult", device_trace: "Trace", op_contexts: dict[str, list[Any]]) -> int:
    from .lanes import MAX_LINKS, lane_aggregates

    created = 0
    for agg in lane_aggregates(device_trace, run.device_facts.system_events):
        s = min(max(agg.first_start_ns, run.start_ns), run.end_ns)
        e = min(s + agg.total_ns, run.end_ns)
        links = [trace.Link(ctx) for op in sorted(agg.ops) for ctx in op_contexts.get(op, ())][:MAX_LINKS]
        span = _child(
            tracer,
            root,
            agg.name,
            s,
            links=links,
            attrs={
                "neuronscope.lane": agg.lane,
                "neuronscope.lane.event": _cap(agg.name),
                "neuronscope.lane.count": agg.count,
                "neuronscope.lane.total_time_us": agg.total_ns / 1000,
                "neuronscope.lane.ops": [_cap(o) for o in sorted(agg.ops)],
                "neuronscope.aggregate": True,
            },
        )
        span.end(end_time=e)
        created += 1
    return created


def _emit_summary(tracer: Any, root: Any, summary: "Summary", start: int, end: int, op_contexts: dict[str, list[Any]]) -> int:
    created = 0
    bounds = {"": (start, end)}
    spans: dict[str, Any] = {"": root}

    def emit_ops(parent_path: str, rows: Sequence["OpStats"]) -> None:
        nonlocal created
        lo, hi = bounds[parent_path]
        for row in rows:
            s = min(max(row.first_start_ns, lo), hi)
            e = min(s + round(row.self_device_time_us * 1000), hi)
            attrs = op_attributes(row) | {"neuronscope.aggregate": True}
            span = _child(tracer, spans[parent_path], row.name, s, attrs)
            op_contexts.setdefault(row.name, []).append(span.get_span_context())
            span.end(end_time=e)
            created += 1

    emit_ops("", summary.direct_rows)
    # a region's summary always has its region's stats (summarize() sets them)
    region_stats = {path: stats for path, region in summary.regions.items() if (stats := region.region_stats) is not None}
    for path in sorted(region_stats, key=lambda p: (p.count("/"), region_stats[p].first_start_ns)):
        region = summary.regions[path]
        stats = region_stats[path]
        parent_path = path.rsplit("/", 1)[0] if "/" in path else ""
        if parent_path not in spans:  # parent region folded away: hang it under the root
            parent_path = ""
        lo, hi = bounds[parent_path]
        s = min(max(stats.first_start_ns, lo), hi)
        e = max(min(stats.last_end_ns, hi), s)
        attrs = {
            "neuronscope.region.path": _cap(path),
            "neuronscope.region.occurrences": stats.occurrences,
            "neuronscope.region.wall_time_us": stats.wall_time_us,
            "neuronscope.region.device_time_us": region.total_device_time_us,
            "neuronscope.aggregate": True,
        }
        span = _child(tracer, spans[parent_path], path.rsplit("/", 1)[-1], s, attrs)
        spans[path], bounds[path] = span, (s, e)
        created += 1
        emit_ops(path, region.direct_rows)
    for path, span in spans.items():
        if path:
            span.end(end_time=bounds[path][1])
    return created


def _emit_events(tracer: Any, root: Any, run: "RunResult", budget: int) -> tuple[int, int]:
    """Region occurrences and op executions as they ran; returns (created, left out)."""
    tr = run.trace
    assert tr is not None
    kind = tr.kind
    cpu = np.flatnonzero((kind == EventKind.OP) | (kind == EventKind.REGION))
    start = tr.start_ns[cpu]
    end = start + tr.duration_ns[cpu]
    nesting = nest(tr.thread[cpu], start, end)
    idx = cpu[nesting.order]
    parent = nesting.parent
    names = tr.names
    is_region = (tr.kind[idx] == EventKind.REGION).tolist()
    name_ids = tr.name_id[idx].tolist()
    starts = tr.start_ns[idx].tolist()
    ends = (tr.start_ns[idx] + tr.duration_ns[idx]).tolist()
    parents = parent.tolist()
    device_run = tr.device != "cpu"

    # Candidate spans: (start, end, name, parent position or -1, attributes, own position or None)
    items: list[tuple[int, int, str, int, dict[str, Any], int | None]] = []
    keep = [False] * len(idx)  # positions that become spans (regions; ops on a CPU profile)
    for pos in range(len(idx)):
        name = names[name_ids[pos]]
        if is_region[pos] and not name.startswith(_STEP_MARKER):
            keep[pos] = True
        elif not is_region[pos] and not device_run:
            keep[pos] = True

    def span_parent(pos: int) -> int:
        p = parents[pos]
        while p >= 0 and not keep[p]:
            p = parents[p]
        return p

    for pos in range(len(idx)):
        if keep[pos]:
            attrs = {"neuronscope.kind": "region" if is_region[pos] else "op"}
            if not is_region[pos]:
                attrs["neuronscope.op.name"] = _cap(names[name_ids[pos]])
            items.append((starts[pos], ends[pos], names[name_ids[pos]], span_parent(pos), attrs, pos))
    if device_run:
        # Device executions hang under the region occurrence that launched them.
        corr = tr.correlation_id[idx].tolist()
        by_corr = {c: pos for pos, c in enumerate(corr) if c > 0}
        dev = np.flatnonzero(kind == EventKind.DEVICE)
        for d_start, d_dur, d_name, link in zip(
            tr.start_ns[dev].tolist(),
            tr.duration_ns[dev].tolist(),
            tr.name_id[dev].tolist(),
            tr.linked_correlation_id[dev].tolist(),
        ):
            pos = by_corr.get(link, -1)
            launcher = names[name_ids[pos]] if pos >= 0 else ""
            region_parent = span_parent(pos) if pos >= 0 else -1
            attrs = {"neuronscope.kind": "device", "neuronscope.op.name": _cap(launcher or names[d_name])}
            items.append((d_start, d_start + d_dur, names[d_name], region_parent, attrs, None))
    items.sort(key=lambda it: (it[0], -it[1]))
    made_by_pos: dict[int, tuple[Any, int, int]] = {}
    created = 0
    for s, e, name, parent_pos, attrs, own in items[:budget]:
        if parent_pos >= 0 and parent_pos not in made_by_pos:
            continue  # its parent was cut by the cap
        parent_span, lo, hi = made_by_pos.get(parent_pos, (root, run.start_ns, run.end_ns))
        s2 = min(max(s, lo), hi)
        e2 = max(min(e, hi), s2)
        span = _child(tracer, parent_span, name, s2, attrs)
        created += 1
        if own is not None:
            made_by_pos[own] = (span, s2, e2)
        else:
            span.end(end_time=e2)
    for span, _, e2 in made_by_pos.values():
        span.end(end_time=e2)
    return created, len(items) - created
