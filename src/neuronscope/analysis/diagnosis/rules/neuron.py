"""Neuron rules: work that never reached the NeuronCore, recompilation, and executions the
runtime scheduled but the NeuronCore started late; plus Neuron Explorer's own insights.

``neuron_cpu_fallback``
    an op that launched no NeuronCore work (neither it nor anything inside it) but took real
    host time, and is not a view/metadata/copy op: it most likely ran on the CPU fallback.
``neuron_recompilation``
    the same op ran as more than one NEFF (device ops are named ``neff_<id>:<op>``): its
    graph was compiled again, typically for a new shape or dtype.
``neuron_schedule_gap``
    ``nrta_execute_schedule`` (runtime lane) to ``nc_exec_running`` (hardware lane) of the same
    execution took a median >= 50 us: the NeuronCore waited on the runtime.
``neuron_explorer_*``
    the insight rules Neuron Explorer publishes, applied to its summary when one was found
    (``run.manifest["neuron"]["explorer"]``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from ....trace.kinds import EventKind
from ...intervals import overlap_with, union
from ..categories import METADATA_OPS, SYNC_OPS
from ..model import Finding
from . import Context, MessageContext, rule

_NEFF = re.compile(r"^neff_(\d+):(.+)$")
_FALLBACK_MIN_US = 50.0
_SCHEDULE_GAP_NS = 50_000


def _fallback_message(ev: dict[str, Any], words: MessageContext) -> str:
    ops = sorted(ev["ops"].items(), key=lambda kv: -kv[1]["cpu_time_us"])
    names = ", ".join(f"{name} ×{o['calls']}" for name, o in ops[:4])
    return (
        f"{names} launched no NeuronCore work ({ev['host_us'] / 1e3:.2f} ms on the host): they likely ran on the CPU "
        "fallback — use supported ops or dtypes, or keep that step off the device path"
    )


@rule(
    "neuron_cpu_fallback",
    message=_fallback_message,
    adds=("ops", "host_us"),
    model="device op: the host time of the ops that ran on the CPU fallback",
)
def neuron_cpu_fallback(ctx: Context) -> list:
    s = ctx.summary
    if ctx.device != "neuron" or s is None or not any(r.device_time_us > 0 for r in s.rows):
        return []
    suspects = [
        r
        for r in s.rows
        if r.device_time_us == 0
        and r.name.startswith("aten::")
        and r.name not in METADATA_OPS
        and r.name not in SYNC_OPS
        and r.cpu_time_us >= _FALLBACK_MIN_US
    ]
    if not suspects:
        return []
    suspects.sort(key=lambda r: -r.cpu_time_us)
    us = sum(r.self_cpu_time_us for r in suspects)
    return [
        ctx.finding(
            "neuron_cpu_fallback",
            None,
            us,
            {"ops": {r.name: {"calls": r.calls, "cpu_time_us": r.cpu_time_us} for r in suspects[:10]}, "host_us": us},
        )
    ]


def _recompilation_message(ev: dict[str, Any], words: MessageContext) -> str:
    worst = sorted(ev["neffs_per_op"].items(), key=lambda kv: -len(kv[1]))
    text = ", ".join(f"{op} ({len(ids)} NEFFs)" for op, ids in worst[:4])
    return (
        f"recompiled graphs: {text} — the same op compiled again, usually for a new input shape or dtype: "
        "pad or bucket shapes to a few sizes, and set neff_cache_dir so compiled NEFFs are reused"
    )


@rule(
    "neuron_recompilation",
    message=_recompilation_message,
    adds=("neffs_per_op",),
    model="one graph: the compile time of the extra NEFFs",
)
def neuron_recompilation(ctx: Context) -> list:
    if ctx.device != "neuron":
        return []
    trace = ctx.trace
    by_op: dict[str, set[str]] = defaultdict(set)
    for name in trace.names:
        m = _NEFF.match(name)
        if m:
            by_op[m.group(2)].add(m.group(1))
    recompiled = {op: ids for op, ids in by_op.items() if len(ids) > 1}
    if not recompiled:
        return []
    worst = sorted(recompiled.items(), key=lambda kv: -len(kv[1]))
    return [
        ctx.finding(
            "neuron_recompilation",
            None,
            0.0,
            {"neffs_per_op": {op: sorted(ids) for op, ids in worst[:10]}},
            severity="medium",
        )
    ]


def _schedule_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"the NeuronCore started executions a median {ev['median_delay_us']:.0f} us after the runtime scheduled them "
        f"({ev['executions']} executions): the host-side submit path is the bottleneck — batch more work per graph "
        "(torch.compile / bigger NEFFs), avoid per-step host transfers"
    )


@rule(
    "neuron_schedule_gap",
    message=_schedule_message,
    adds=("executions",),
    model="runtime wait: the median scheduling delay of each execution",
)
def neuron_schedule_gap(ctx: Context) -> list:
    if ctx.device != "neuron":
        return []
    trace = ctx.trace
    end = trace.start_ns + trace.duration_ns
    rt = np.flatnonzero((trace.kind == EventKind.RUNTIME) & trace.name_mask(lambda n: "execute" in n))
    hw = np.flatnonzero((trace.kind == EventKind.DEVICE_ANNOTATION) & trace.name_mask(lambda n: n == "nc_exec_running"))
    if not rt.size or not hw.size:
        return []
    delays_s, delays_e = [], []
    for key in ("correlation_id", "linked_correlation_id"):
        col = getattr(trace, key)
        order = np.argsort(col[rt], kind="stable")
        keys = col[rt][order]
        hit = np.minimum(np.searchsorted(keys, col[hw]), keys.size - 1)
        ok = (col[hw] > 0) & (keys[hit] == col[hw])
        if ok.any():
            r = rt[order[hit[ok]]]
            delays_s, delays_e = end[r], trace.start_ns[hw[ok]]
            break
    if len(delays_s) == 0:
        return []
    delay = np.maximum(np.asarray(delays_e) - np.asarray(delays_s), 0)
    median = float(np.median(delay))
    if median < _SCHEDULE_GAP_NS:
        return []
    tl = ctx.timeline
    us_, ue_ = union(np.asarray(delays_s), np.maximum(np.asarray(delays_e), np.asarray(delays_s)))
    exposed = int(overlap_with(tl.gap_s, tl.gap_e, us_, ue_).sum())
    return [
        ctx.finding(
            "neuron_schedule_gap",
            None,
            exposed / 1e3,
            {
                "executions": int(delay.size),
                "median_delay_us": round(median / 1e3, 3),
                "max_delay_us": round(float(delay.max()) / 1e3, 3),
            },
        )
    ]


@rule("neuron_explorer")
def neuron_explorer(ctx: Context) -> list:
    """Neuron Explorer's published insights, computed from its summary by the Neuron backend."""
    return explorer_findings(ctx.facts)


def explorer_findings(facts: Any) -> list:
    """The findings Neuron Explorer's summary gave (``facts["neuron"]["explorer"]["findings"]``)."""
    neuron = facts.get("neuron")
    explorer = neuron.get("explorer") if isinstance(neuron, dict) else None
    found = explorer.get("findings") if isinstance(explorer, dict) else None
    out = []
    for f in found or ():
        if isinstance(f, Finding):
            out.append(f)
        elif isinstance(f, dict) and "rule" in f and "message" in f:
            out.append(Finding.from_dict(f))
    return out
