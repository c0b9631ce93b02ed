"""The memory findings: ``memory_growth``, ``memory_peak``, ``allocator_churn``, ``fragmentation``,
``out_of_memory``, read from a :class:`~.memory_model.MemoryReport` and (for growth and churn) the
records behind it (:class:`MemoryContext`). :mod:`.memory` builds both."""

from __future__ import annotations

from typing import Any

import numpy as np

from .diagnosis.model import Finding
from .memory_model import MemoryReport, format_bytes

__all__ = ["BEFORE", "NO_OP", "MemoryContext", "memory_findings", "oom_finding", "peak_finding"]

BEFORE = "(before the profile)"  #: the holder of what was allocated before the window
NO_OP = "(no op)"  #: the op of a record no op was running around
MiB = 1 << 20


class MemoryContext:
    """What the findings read besides the report: the records, their pairing and attribution, the steps."""

    def __init__(self, rec, is_alloc, free_of, op_id, path_id, labels, path_names, s_start, s_end, s_growth, level):
        self.rec, self.is_alloc, self.free_of = rec, is_alloc, free_of
        self.op_id, self.path_id, self.labels, self.path_names = op_id, path_id, labels, path_names
        self.s_start, self.s_end, self.s_growth, self.level = s_start, s_end, s_growth, level

    def where(self, op: int, path: int) -> str:
        o = self.labels[op] if op >= 0 else NO_OP
        p = self.path_names[path]
        return f"{o} in {p}" if p else o

    def top_groups(self, mask: np.ndarray, limit: int = 5) -> list[dict[str, Any]]:
        sel = np.flatnonzero(mask)
        if not sel.size:
            return []
        key = (self.op_id[sel] + 1) * len(self.path_names) + self.path_id[sel]
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.reshape(-1)
        total = np.bincount(inv, weights=self.rec.bytes[sel].astype(np.float64))
        count = np.bincount(inv)
        out = []
        for i in np.argsort(-total, kind="stable")[:limit].tolist():
            o, p = divmod(int(uniq[i]), len(self.path_names))
            out.append(
                {
                    "op": self.labels[o - 1] if o > 0 else NO_OP,
                    "region": self.path_names[p],
                    "bytes": int(total[i]),
                    "count": int(count[i]),
                }
            )
        return out


def memory_findings(report: MemoryReport, ctx: Any = None) -> list[Finding]:
    """``memory_growth``, ``memory_peak``, ``allocator_churn``, ``fragmentation``, ``out_of_memory``."""
    out: list[Finding] = []
    if ctx is not None:
        out += _growth(report, ctx)
        out += _churn(report, ctx)
    out += peak_finding(report)
    out += _fragmentation(report)
    out += oom_finding(report, out)
    return out


def _growth(report: MemoryReport, ctx: MemoryContext) -> list[Finding]:
    g = ctx.s_growth
    n = int(g.size)
    if n < 3 or report.growth_per_step_bytes is None:
        return []
    per_step = report.growth_per_step_bytes
    growing = int((g > 0).sum())
    if growing < 0.6 * n or per_step < 4096 or int(g.sum()) < MiB:
        return []
    t = ctx.rec.time_ns
    in_steps = (t >= ctx.s_start[0]) & (t <= ctx.s_end[-1])
    # kept: still alive when the last step ends (freed after it, e.g. at exit, or never)
    freed_at = np.where(ctx.free_of >= 0, t[np.maximum(ctx.free_of, 0)], np.iinfo(np.int64).max)
    kept = ctx.is_alloc & in_steps & (freed_at > ctx.s_end[-1])
    top = ctx.top_groups(kept)
    for item in top:
        item["bytes_per_step"] = item["bytes"] // n
    who = f"{top[0]['op']}" + (f" in {top[0]['region']}" if top[0]["region"] else "") if top else "an allocation"
    what = format_bytes(top[0]["bytes"] // n) if top else format_bytes(per_step)
    msg = (
        f"memory grows by {format_bytes(per_step)} per step on {growing} of {n} steps: {who} allocates {what} per step "
        "still held after the last step — a reference kept across steps (a list of tensors, a loss accumulated without "
        ".item()/.detach(), a cache); drop it or keep a detached/CPU copy"
    )
    evidence = {"bytes": int(g.sum()), "bytes_per_step": per_step, "growing_steps": growing, "steps": n, "never_freed": top}
    return [Finding("memory_growth", msg, 0.0, evidence, "high" if growing >= 0.9 * n else "medium")]


def peak_finding(report: MemoryReport) -> list[Finding]:
    """``memory_peak``: one op / region / line holds half the peak or more."""
    top = report.top
    if top is None or report.peak_bytes < MiB or top.bytes < 0.5 * report.peak_bytes:
        return []
    share = top.bytes / report.peak_bytes
    where = top.op + (f" in {top.region}" if top.region else "") + (f" ({top.source})" if top.source else "")
    if top.op == BEFORE:
        advice = (
            "memory allocated before the profile (weights, optimizer state, caches) dominates: a smaller model "
            "or lower-precision weights/optimizer state, or offloading, lowers it"
        )
    else:
        advice = (
            "try activation checkpointing (torch.utils.checkpoint) around this block, a smaller batch, or freeing "
            "it earlier (del / out-of-scope) if it is not needed after its last use"
        )
    msg = f"{where} holds {format_bytes(top.bytes)} ({100 * share:.0f}%) of the {format_bytes(report.peak_bytes)} peak: {advice}"
    evidence = {
        "bytes": top.bytes,
        "peak_bytes": report.peak_bytes,
        "share_pct": round(100 * share, 1),
        "op": top.op,
        "region": top.region,
        "source": top.source,
        "count": top.count,
    }
    return [Finding("memory_peak", msg, 0.0, evidence, "high" if share >= 0.75 else "medium")]


def _churn(report: MemoryReport, ctx: MemoryContext) -> list[Finding]:
    rec = ctx.rec
    big = ctx.is_alloc & (rec.bytes >= MiB) & (ctx.free_of >= 0)
    if not big.any():
        return []
    life = np.zeros(len(rec), dtype=np.int64)
    life[big] = rec.time_ns[ctx.free_of[big]] - rec.time_ns[big]
    n_steps = max(int(ctx.s_growth.size), 1)
    if ctx.s_growth.size:  # freed inside the step that allocated it
        step_of = np.searchsorted(ctx.s_start, rec.time_ns, side="right") - 1
        free_t = np.where(big, rec.time_ns[np.maximum(ctx.free_of, 0)], 0)
        step_end = ctx.s_end[np.clip(step_of, 0, ctx.s_end.size - 1)]
        short = big & (step_of >= 0) & (free_t <= step_end)
    else:
        short = big & (life < 10_000_000)  # freed within 10 ms
    count = int(short.sum())
    per_step = count / n_steps
    if per_step < 16 or count < 32:
        return []
    total = int(rec.bytes[short].sum())
    top = ctx.top_groups(short)
    who = f"{top[0]['op']}" + (f" in {top[0]['region']}" if top[0]["region"] else "") if top else "ops"
    msg = (
        f"{per_step:.0f} short-lived allocations of >= 1 MiB per step ({format_bytes(total / n_steps)} per step), most by "
        f"{who}: reuse buffers (in-place ops, out=, preallocated tensors) or fuse the ops (torch.compile) so the "
        "allocator does not churn"
    )
    evidence = {
        "bytes": total,
        "bytes_per_step": total // n_steps,
        "allocations": count,
        "per_step": round(per_step, 1),
        "top": top,
    }
    return [Finding("allocator_churn", msg, 0.0, evidence, "medium" if per_step < 100 else "high")]


def _fragmentation(report: MemoryReport) -> list[Finding]:
    res = report.peak_reserved_bytes
    if report.device != "cuda" or res is None or not report.peak_bytes:
        return []
    slack = res - report.peak_bytes
    if slack < 256 * MiB or res < 1.3 * report.peak_bytes:
        return []
    msg = (
        f"the CUDA caching allocator reserved {format_bytes(res)} for a {format_bytes(report.peak_bytes)} peak of tensors "
        f"({format_bytes(slack)} reserved but unused): fragmentation — set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
        "allocate the largest buffers first, or avoid varying shapes between steps"
    )
    evidence = {"bytes": slack, "reserved_bytes": res, "allocated_peak_bytes": report.peak_bytes}
    return [Finding("fragmentation", msg, 0.0, evidence, "medium")]


def oom_finding(report: MemoryReport, found: list[Finding]) -> list[Finding]:
    """``out_of_memory``: the profiled code ran out of memory; what held it at the peak."""
    if report.oom is None:
        return []
    holders = [h.to_dict() for h in report.at_peak[:5]]
    top = report.top
    held = (
        f"; at the peak ({format_bytes(report.peak_bytes)}) {top.op}"
        + (f" in {top.region}" if top.region else "")
        + f" held {format_bytes(top.bytes)}"
        if top is not None
        else ""
    )
    table = report.device_facts.get("neuron_oom_table")
    extra = ""
    if isinstance(table, dict) and table.get("categories"):
        cats = sorted(table["categories"].items(), key=lambda kv: -kv[1])[:3]
        extra = "; device memory by category: " + ", ".join(f"{c} {format_bytes(v)}" for c, v in cats)
    msg = f"out of memory on {report.device}{held}{extra}: reduce that first (see memory_peak), or the batch size"
    evidence = {"bytes": report.peak_bytes, "error": report.oom.get("error"), "at_peak": holders}
    if report.oom.get("requested_bytes"):
        evidence["requested_bytes"] = report.oom["requested_bytes"]
    if table:
        evidence["neuron_oom_table"] = table
    return [Finding("out_of_memory", msg, 0.0, evidence, "high")]
