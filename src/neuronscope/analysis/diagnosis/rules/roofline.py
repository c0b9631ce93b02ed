"""Ops far below the device's roofs (``record_shapes=True``; :mod:`...roofline`).

The time at stake is the op's device time beyond what its work takes at the roof: the most a
faster kernel doing the same work can save. Fusion or a lower precision removes work, so it
can save more (the naive RMSNorm on this CPU: compile saved 2.4 ms a step where the ops' time
above their roofs was 1.0 ms). An op at 70 % of its roof or more
is at the limit: only less work or a lower precision makes it faster, and it is named in the
notes instead.
"""

from __future__ import annotations

from ...roofline import AT_LIMIT_PCT
from ...text import format_amount, format_rate, format_us
from . import Context, rule

#: at most this many ops get a finding of their own (the rest are in the roofline table)
MAX_FINDINGS = 3
#: an op's time above its roof must be at least this share of the window to be a finding
MIN_SHARE = 0.02

_MEMORY_FIX = {
    "elementwise": "fuse the elementwise ops around it into one pass (torch.compile), or move fewer bytes (a lower precision)",
    "reduction": "fuse it with the op that produces its input (torch.compile), or reduce in a lower precision",
    "norm": "use a fused norm kernel (torch.compile, or the framework's fused op) that reads the input once",
    "softmax": "fuse it into the attention (scaled_dot_product_attention) or with its neighbours (torch.compile)",
    "copy": "avoid the copy (keep tensors in the dtype and layout their consumer wants, .contiguous() once)",
    "embedding": "gather fewer or smaller rows (a lower-precision table, deduplicated indices)",
    "gemm": "batch more rows per call: at this intensity the matmul streams its weights for little arithmetic",
    "attention": "use a fused attention kernel (scaled_dot_product_attention) and batch more queries per call",
    "conv": "batch more images per call, or a channels-last layout",
}
_COMPUTE_FIX = {
    "gemm": "a faster kernel: dimensions that are multiples of 64-128, a tensor-core dtype (bf16), fewer and larger calls",
    "conv": "a faster kernel: channels-last layout, channel counts that are multiples of 8-64, a tensor-core dtype",
    "attention": "a fused attention kernel (flash / memory-efficient SDPA) in bf16",
}


@rule("below_roof")
def below_roof(ctx: Context) -> list:
    summary = ctx.summary
    if summary is None or not any(r.work is not None for r in summary.rows):
        return []
    limits = summary.limits
    if limits is None:
        ctx.note("roofline: unknown device: give its limits with ns.configure(device_limits=...) (docs/roofline.md)")
        return []
    window_us = max(ctx.timeline.window_ns / 1e3, 1e-9)
    scored = [r for r in summary.rows if r.roofline is not None]
    at_limit = [r for r in scored if r.roofline.at_limit]
    if at_limit:
        names = ", ".join(
            f"{r.name} ({r.roofline.pct_of_roof:.0f}%)" for r in sorted(at_limit, key=lambda r: -r.roofline.time_us)[:3]
        )
        ctx.note(
            f"at the device's limit (>= {AT_LIMIT_PCT:.0f}% of the roof): {names}: only less work or a lower precision makes them faster"
        )
    below = [r for r in scored if not r.roofline.at_limit and r.roofline.time_at_stake_us >= MIN_SHARE * window_us]
    below.sort(key=lambda r: -r.roofline.time_at_stake_us)
    findings = []
    for r in below[:MAX_FINDINGS]:
        rf, work = r.roofline, r.work
        family = work.family if work is not None else ""
        per_step = f", {rf.calls / ctx.steps:.3g} calls a step" if ctx.steps else f", {rf.calls} calls"
        if rf.bound == "memory":
            what = f"moves {format_amount(rf.bytes, 'B')} at {format_rate(rf.achieved_bytes_per_s, 'B/s')} = {rf.pct_of_roof:.0f}% of memory bandwidth"
            fix = _MEMORY_FIX.get(family, "move fewer bytes, or fuse it with its neighbours")
        else:
            what = f"does {format_amount(rf.flops, 'FLOP')} at {format_rate(rf.achieved_flops_per_s, 'FLOP/s')} = {rf.pct_of_roof:.0f}% of the {rf.dtype} peak"
            fix = _COMPUTE_FIX.get(family, "a faster kernel for this op")
        findings.append(
            ctx.finding(
                "below_roof",
                f"{r.name} {what}{per_step}: {fix} (at the roof it would take {format_us(rf.time_at_roof_us)} of {format_us(rf.time_us)})",
                rf.time_at_stake_us,
                {
                    "op": r.name,
                    "bound": rf.bound,
                    "dtype": rf.dtype,
                    "pct_of_roof": round(rf.pct_of_roof, 2),
                    "time_us": round(rf.time_us, 3),
                    "time_at_roof_us": round(rf.time_at_roof_us, 3),
                    "flops": rf.flops,
                    "bytes": rf.bytes,
                    "calls": rf.calls,
                    "device": limits.name,
                    # what a kernel doing the same work at the roof saves; fusion or a lower
                    # precision removes work and can save more (docs/roofline.md)
                    "at_stake_is": "time above the roof for the same work",
                },
            )
        )
    return findings
