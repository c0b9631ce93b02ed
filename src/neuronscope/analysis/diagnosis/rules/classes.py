"""``device_time_by_class``: what the device's time is, by class of kernel — said when one class
holds most of it (a decode step that is 60 % GEMM), or when most of it ran in kernels launched
outside any op (a CUDA/HIP graph replay), whose op table rows are kernel names.

The split is :attr:`Summary.device_classes <..summary.Summary.device_classes>`
(:mod:`...kernel_classes`). The finding is information (severity ``info``): it names where the
time goes and which kind of change can move it, and claims no time (``us_at_stake`` 0: no model
of a fix's saving). On a CPU-only profile the op table already names every op: no finding.

It follows from the summary alone, so a long run's windows are not added up: the rule runs again
over the run's folded summary (``refold``).
"""

from __future__ import annotations

from typing import Any

from ...kernel_classes import CLASS_WORDS, pct_text
from ...roofline import run_roofline
from . import Context, MessageContext, rule

RULE = "device_time_by_class"
#: a class with at least this share of the device time sets the pace
DOMINANT_PCT = 50.0
#: at least this share launched outside any op: the op table's rows are kernels, not ops
OUTSIDE_PCT = 50.0

#: what moves a class's time; ``{rest}``: what fusing every other class could save at most
_ADVICE = {
    "gemm": (
        "the matrix multiplies set the pace: fewer, larger GEMMs (more rows per call), a lower precision (fp8, bf16) "
        "or tuned GEMM kernels make it faster{rest}"
    ),
    "conv": (
        "the convolutions set the pace: a channels-last layout, the library's autotuning "
        "(torch.backends.cudnn.benchmark) or a lower precision make it faster"
    ),
    "attention": (
        "attention sets the pace: a fused (flash) attention kernel, fewer keys per query or a lower-precision KV "
        "cache make it faster"
    ),
    "communication": (
        "the collectives set the pace: overlap them with compute, or make them fewer and larger "
        "(the communication findings say which)"
    ),
    "copy": (
        "copies set the pace: keep tensors in the dtype, layout and device their consumer wants; copy from "
        "pinned memory with non_blocking=True"
    ),
    "embedding": "embedding lookups set the pace: gather fewer or smaller rows (a lower-precision table)",
}
#: the memory-bound small kernels: fusion is their remedy
_FUSE = "small memory-bound kernels set the pace: fuse them (torch.compile) or use fused kernels"
_EAGER = "to model them, profile one step eagerly (no graph) with record_shapes=True: their ops and sizes are recorded then"


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    shares: dict[str, float] = ev["shares_pct"]
    split = " · ".join(f"{c} {pct_text(p)}" for c, p in list(shares.items())[:5])
    dominant = ev.get("dominant")
    graph = ev.get("graph_pct", 0.0) >= OUTSIDE_PCT
    # the kernels the finding is about ran outside any op: no row is an op for them, no roofline sees them
    outside = (ev.get("dominant_outside_pct") or 0.0) >= OUTSIDE_PCT if dominant else True
    if dominant:
        head = f"{pct_text(shares[dominant])} of device time is {CLASS_WORDS[dominant]} kernels ({split})"
        if outside:
            head += f", {pct_text(ev['dominant_outside_pct'])} of them launched outside any op"
            head += " by a graph replay" if graph else ""
    else:
        head = f"{pct_text(ev['outside_ops_pct'])} of device time ran in kernels launched outside any op"
        head += f" (a graph replay; by class: {split})" if graph else f" (by class: {split})"
    roof = ""
    if ev.get("roofline_pct") is not None:
        roof = f"; the roofline models {pct_text(ev['roofline_pct'])} of device time"
        roof += " (the trace records no sizes for kernels outside ops)" if outside else ""
    if dominant:
        rest = 100.0 - shares[dominant]
        advice = _ADVICE.get(dominant, _FUSE).format(
            rest=f"; fusing the other kernels saves at most their {pct_text(rest)}" if rest >= 1.0 else ""
        )
        advice += f"; {_EAGER}" if graph and outside else ""
    else:
        advice = _EAGER if graph else "the op table lists them by kernel name; `show` says each one's class"
    return f"{head}{roof}: {advice}"


def _refold(summary: Any, out: Any) -> list:
    return class_findings(summary, out)


@rule(RULE, message=_message, refold=_refold)
def device_time_by_class(ctx: Context) -> list:
    return class_findings(ctx.summary, ctx)


def class_findings(summary: Any, out: Any) -> list:
    """The finding for ``summary``'s device time by class (none: no dominant class and most of the
    time under ops, a CPU profile, or a summary without classes)."""
    dc = getattr(summary, "device_classes", None) if summary is not None else None
    if dc is None or dc.total_us <= 0 or out.device == "cpu":
        return []
    dominant = dc.dominant
    dominant_pct = dc.share(dominant) if dominant else 0.0
    outside_pct = dc.pct(sum(dc.outside_ops_us.values()))
    if dominant_pct < DOMINANT_PCT and (outside_pct < OUTSIDE_PCT or dc.classified_pct < 50.0):
        return []
    lead = dominant if dominant_pct >= DOMINANT_PCT else None
    run = run_roofline(summary)
    evidence = {
        "dominant": lead,
        "shares_pct": {c: round(dc.share(c), 2) for c in dc.by_class_us},
        "device_us": round(dc.total_us, 3),
        "classified_pct": round(dc.classified_pct, 2),
        "dominant_outside_pct": (round(100.0 * dc.outside_ops_us.get(lead, 0.0) / dc.by_class_us[lead], 2) if lead else None),
        "outside_ops_pct": round(outside_pct, 2),
        "graph_pct": round(dc.pct(dc.graph_us), 2),
        "roofline_pct": round(run.coverage_pct, 2) if run is not None else None,
        "at_stake_model": "none: the split names where the device time goes, not what a change would save",
    }
    return [out.finding(RULE, None, 0.0, evidence, severity="info", subject=lead or "outside ops", host_side=False)]
