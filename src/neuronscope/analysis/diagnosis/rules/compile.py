"""``compile_in_window``: compilation (torch.compile, Neuron graph compilation/loading) ran
inside the profiled window, so the profile shows compiling, not running.

Fires when compilation events cover at least 1 ms and 2 % of the window. Time at stake: the
compile time (it is paid once, but it distorts every number of this profile).
"""

from __future__ import annotations

from typing import Any

from ..categories import is_compile
from . import Context, MessageContext, rule

_MIN_NS = 1_000_000
_MIN_SHARE = 0.02


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    ms = ev["compile_us"] / 1e3
    share = 100 * ev["compile_us"] / max(words.window_us, 1e-9)
    return (
        f"{ev['what']} ran inside the profile ({ms:.1f} ms, {share:.0f}% of the recorded time): warm up before profiling "
        "(call it a few times first, or profile_neuron(warmup=N))"
    )


@rule(
    "compile_in_window",
    message=_message,
    adds=("compile_us",),
    model="warm-up: the compile time inside the window (paid once, outside a warmed-up profile)",
)
def compile_in_window(ctx: Context) -> list:
    tl, trace = ctx.timeline, ctx.trace
    compile_ns = int((tl.compile_e - tl.compile_s).sum())
    if compile_ns < _MIN_NS or compile_ns < _MIN_SHARE * max(tl.window_ns, 1):
        return []
    names = sorted({n for n in trace.names if is_compile(n)})
    what = (
        "Neuron compilation"
        if ctx.device == "neuron" and any("neuron" in n.lower() or "nrt" in n.lower() for n in names)
        else "torch.compile"
    )
    return [
        ctx.finding(
            "compile_in_window",
            None,
            compile_ns / 1e3,
            {"compile_us": round(compile_ns / 1e3, 3), "events": names[:10], "what": what},
            subject=what,
        )
    ]
