"""``launch_bound_loop``: many short ops, and the time between them is what the run waits on.

Fires when the idle time of class ``launch`` (gaps below the gap threshold, between
back-to-back ops) is at least 20 % of the window and the typical op is short (median under
50 us): per-op launch/dispatch cost dominates, not the work. Time at stake: that idle time.
"""

from __future__ import annotations

import numpy as np

from ...diagnosis.timeline import CLASS_INDEX
from typing import Any

from . import Context, MessageContext, rule

_MIN_SHARE = 0.20
_MAX_MEDIAN_NS = 50_000
_MIN_OPS = 50


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    share = 100 * ev["launch_idle_us"] / max(words.window_us, 1e-9)
    return (
        f"small-op loop: {ev['ops']} ops of median {ev['median_op_us']:.1f} us, and {share:.0f}% of the recorded time is "
        f"launch/dispatch time between them: {ev['fix']}"
    )


@rule(
    "launch_bound_loop",
    message=_message,
    adds=("ops", "launch_idle_us"),
    model="batching: the dispatch/launch gaps between the short ops (less those inside loops and optimizer steps other rules claim)",
)
def launch_bound_loop(ctx: Context) -> list:
    tl = ctx.timeline
    if not tl.window_ns or tl.top_ops.size < _MIN_OPS:
        return []
    launch = tl.gap_cls == CLASS_INDEX["launch"]
    launch_ns = int(tl.gap_ns()[launch].sum())
    # a Python loop that indexes a tensor item by item is forloop_indexing's (vectorise it): the
    # dispatch gaps inside it are part of that claim, not a second one
    # and so is the Python loop of a single-tensor optimizer step (optimizer_single_tensor's)
    from .tidy import loop_spans, single_tensor_step_spans

    loops_s, loops_e = loop_spans(ctx)
    steps_s, steps_e = single_tensor_step_spans(ctx)
    loops_s, loops_e = np.concatenate([loops_s, steps_s]), np.concatenate([loops_e, steps_e])
    if loops_s.size:
        from ...intervals import overlap_with, union

        us_, ue_ = union(loops_s, loops_e)
        launch_ns -= int(overlap_with(tl.gap_s[launch], tl.gap_e[launch], us_, ue_).sum())
    # the launch gaps themselves are short (a preempted one is a long host_wait gap instead)
    share = launch_ns / max(ctx.quiet_window_ns, 1)
    if tl.mode == "device":
        from ....trace.kinds import EventKind

        dev = ctx.trace.kind == EventKind.DEVICE
        durations = ctx.trace.duration_ns[dev]
    else:
        durations = ctx.trace.duration_ns[tl.top_ops]
    if not durations.size:
        return []
    median = float(np.median(durations))
    if share < _MIN_SHARE or median >= _MAX_MEDIAN_NS:
        return []
    n = int(durations.size)
    # code that is compiled already is not told to compile (issue 37): its graphs are small
    fix = (
        "batch the work into fewer, bigger calls (the compiled graphs here are small: compile a larger region, the whole step)"
        if _mostly_compiled(ctx)
        else "batch the work into fewer, bigger ops (vectorise the loop), or torch.compile it"
    ) + ("; on CUDA, CUDA graphs (torch.compile(mode='reduce-overhead'))" if ctx.device == "cuda" else "")
    return [
        ctx.finding(
            "launch_bound_loop",
            None,
            launch_ns / 1e3,
            {"ops": n, "median_op_us": round(median / 1e3, 3), "launch_idle_us": round(launch_ns / 1e3, 3), "fix": fix},
        )
    ]


def _mostly_compiled(ctx: Context) -> bool:
    """At least half the top-level ops are torch.compile's graphs (or their compiled regions)."""
    from ....trace.kinds import compiled_graph_call_ids

    names = ctx.trace.names
    compiled = set(compiled_graph_call_ids(names)) | {i for i, n in enumerate(names) if n.startswith("Torch-Compiled Region")}
    if not compiled:
        return False
    top = ctx.timeline.top_ops
    return bool(top.size) and float(np.isin(ctx.trace.name_id[top], list(compiled)).mean()) >= 0.5
