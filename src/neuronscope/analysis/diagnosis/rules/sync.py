"""``sync_in_loop``: the host reads device values back (``.item()``, ``.cpu()``, ``print(t)``,
``*Synchronize``) over and over; each one drains the device's queue.

Fires when synchronising ops run at least once per step (or at least 3 times in a run
without steps), on a device with an asynchronous queue. Time at stake: the smaller of the host
time blocked in the syncs and the idle time of class ``sync`` (the gaps they opened) — what
letting the host run ahead saves, host-bound or device-bound. Never on a CPU-only run: there is no queue for a value
read to drain, and removing ``.item()`` there saves nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..locations import source_of
from ..timeline import CLASS_INDEX
from . import Context, MessageContext, rule


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    n = ev["syncs"]
    if ev.get("device") == "cpu":
        return (
            f"{n} value reads (.item()) in the loop cost {ev['own_time_us'] / 1e3:.3f} ms of their own; on a CPU there is "
            "no device queue for them to drain, so reading once per N steps saves only that"
        )
    per = f" ({n / words.steps:.1f} per step)" if words.steps else ""
    ops = ", ".join(f"{name} ×{c}" for name, c in Counter(ev["by_op"]).most_common(3))
    at = f" at {', '.join(ev['locations'])}" if ev.get("locations") else ""
    return f"{n} host-device syncs{per} — {ops}{at}: keep values on the device, read them back every N steps, or use non_blocking copies"


@rule(
    "sync_in_loop",
    message=_message,
    adds=("syncs", "by_op", "sync_idle_us", "host_time_in_syncs_us", "own_time_us"),
    model="run ahead: the smaller of the host time blocked in the syncs and the idle time they opened (on a CPU: the reads' own time)",
)
def sync_in_loop(ctx: Context) -> list:
    tl, trace = ctx.timeline, ctx.trace
    if tl.mode != "device":
        return _cpu_value_reads(ctx)
    if not tl.top_is_sync.any():
        return []
    syncs = tl.top_ops[tl.top_is_sync]
    n = int(syncs.size)
    if n < max(3, ctx.steps):
        return []
    idle_ns = int(tl.gap_ns()[tl.gap_cls == CLASS_INDEX["sync"]].sum())
    if idle_ns <= 0:
        return []
    # what removing the syncs saves: with a sync, a step takes H + B (host work, then blocked
    # B while the queue drains) against the device's D; without, max(H, D). The difference is
    # min(B, H + B - D), and H + B - D is the device's idle: the smaller of the time blocked
    # in the syncs and the idle they left (host-bound: B; device-bound: the idle)
    blocked_ns = int(np.sum(trace.duration_ns[syncs]))
    at_stake_ns = min(idle_ns, blocked_ns)
    by_op = Counter(trace.names[int(i)] for i in trace.name_id[syncs])
    where = source_of(trace, syncs, limit=3)
    return [
        ctx.finding(
            "sync_in_loop",
            None,
            at_stake_ns / 1e3,
            {
                "syncs": n,
                "by_op": dict(by_op),
                "sync_idle_us": round(idle_ns / 1e3, 3),
                "locations": where,
                "host_time_in_syncs_us": round(blocked_ns / 1e3, 3),
            },
        )
    ]


def _cpu_value_reads(ctx: Context) -> list:
    """On a CPU a value read drains no queue: what removing it saves is its own time (dispatch,
    the scalar copy), which a tight loop can still notice. Claimed only when that is >= 1 % of
    the window (below, no advice)."""
    trace, tl = ctx.trace, ctx.timeline
    top = tl.top_ops  # the main thread's top-level ops
    reads = top[trace.name_mask(lambda n: n in ("aten::item", "aten::tolist"))[top]] if top.size else top
    # on a contended CPU a preemption lands whole in one read (4 ms in ten ~10 us reads, beside
    # two busy processes): each read counts at most a few times the median read's time
    durations = ctx.trimmed_ns(trace.duration_ns[reads], trace.name_id[reads], min_calls=3)
    own_ns = int(ctx.unprofiled_ns(float(durations.sum()), reads))
    if reads.size < max(3, ctx.steps) or own_ns < 0.01 * max(tl.window_ns, 1):
        return []
    return [
        ctx.finding(
            "sync_in_loop",
            None,
            own_ns / 1e3,
            {"syncs": int(reads.size), "own_time_us": round(own_ns / 1e3, 3), "device": "cpu"},
            severity="low",
            trimmed=True,
        )
    ]
