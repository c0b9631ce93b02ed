"""``exposed_communication``: collectives that ran with no compute beside them.

Fires when exposed collective time (no other device work on any stream) is at least 5 % of the
window. Time at stake: that exposed time — what overlapping the collectives with compute would
win at best (the collectives' own time stays; only the part nothing hides can go). The advice
follows the kinds that hold the time: all-reduce (DDP: bucket size, overlap with backward),
all-gather / reduce-scatter (FSDP: prefetch), many small collectives (fewer, larger ones).
"""

from __future__ import annotations

from typing import Any

from . import Context, MessageContext, rule

_MIN_SHARE = 0.05
#: below this mean size a collective is latency-bound: fewer, larger ones win more than overlap
_SMALL_BYTES = 1 << 20


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    collective, exposed = ev["collective_us"], ev["exposed_us"]
    overlap = 100 * (collective - exposed) / collective if collective else 0.0
    what = f"{ev['top_kind']} " if ev.get("top_kind") else ""
    return (
        f"{what}collectives ran with no compute beside them for {exposed / 1e3:.3f} ms "
        f"({overlap:.0f}% of {collective / 1e3:.3f} ms overlapped): {ev['fix']}"
    )


@rule(
    "exposed_communication",
    message=_message,
    adds=("collective_us", "exposed_us", "by_kind"),
    model="overlap: the collectives' time that no compute overlaps (their own time stays)",
)
def exposed_communication(ctx: Context) -> list:
    comm = ctx.communication
    tl = ctx.timeline
    if comm is None or not tl.window_ns or comm.exposed_us * 1e3 < _MIN_SHARE * tl.window_ns:
        return []
    top = comm.by_kind[0] if comm.by_kind else None
    kinds = {top.kind} if top is not None and top.kind != "other" else {c.kind for c in comm.by_kind[:2]}
    if kinds & {"all_gather", "reduce_scatter"}:
        fix = (
            "FSDP: prefetch the next all-gather (forward_prefetch=True, backward_prefetch=BACKWARD_PRE) so it "
            "overlaps compute, and keep reduce-scatter behind the backward"
        )
    elif "all_reduce" in kinds:
        fix = (
            "DDP: overlap gradient all-reduce with the backward — bucket_cap_mb sized so the first buckets launch "
            "early, gradient_as_bucket_view=True, no_sync() during gradient accumulation"
        )
    elif kinds & {"all_to_all", "send", "recv", "send_recv"}:
        fix = "overlap the exchange with independent compute (issue it async, on its own stream, earlier)"
    else:
        fix = "overlap the collectives with compute, or issue fewer of them"
    calls = sum(c.calls for c in comm.by_kind)
    sized = [c for c in comm.by_kind if c.bytes]
    mean_bytes = sum(c.bytes or 0 for c in sized) / max(sum(c.calls for c in sized), 1) if sized else None
    if mean_bytes is not None and mean_bytes < _SMALL_BYTES and calls >= 20:
        fix += f"; {calls} collectives of {mean_bytes / 1024:.0f} KiB on average: fewer, larger ones (bigger buckets)"
    return [
        ctx.finding(
            "exposed_communication",
            None,
            comm.exposed_us,
            {
                "collective_us": round(comm.collective_us, 3),
                "exposed_us": round(comm.exposed_us, 3),
                "overlap_pct": round(comm.overlap_pct, 2),
                "by_kind": {c.kind: round(c.time_us, 3) for c in comm.by_kind},
                "backend": comm.backend,
                "top_kind": top.kind if top is not None else "",
                "fix": fix,
            },
            subject=top.kind if top is not None else "",
            host_side=False,
        )
    ]
