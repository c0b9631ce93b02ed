"""``elementwise_chain``: consecutive pointwise ops, each a separate pass over the tensor.

The naive RMSNorm ``x * rsqrt(x.pow(2).mean(-1) + eps) * w`` runs five ops — pow, mean,
add, rsqrt, mul, mul — each reading and writing the whole tensor (and, on a device, each a
launch). A fused op (``torch.rms_norm``) or ``torch.compile`` does it in one pass.

A chain is a run of at least 3 elementwise ops (reductions allowed in between) among the
top-level ops of the main thread, with no other op between them; a loop's back-to-back
repetitions are cut into their repeating unit. Ops
inside another op (``torch.rms_norm``'s own decomposition) or inside a compiled graph are
not top-level, so they never match. Time at stake: the chain's device time beyond its most
expensive op (a fused kernel costs about one pass), plus the dispatch gaps between its ops.
"""

from __future__ import annotations

import numpy as np

from ..timeline import elementwise_mask, source_of
from . import Context, rule

_MIN_ELEMENTWISE = 3  # HTA's min_pattern_len
_RMSNORM = {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"}
_SOFTMAX = {"aten::exp", "aten::sum", "aten::div"}


@rule("elementwise_chain")
def elementwise_chain(ctx: Context) -> list:
    tl, trace = ctx.timeline, ctx.trace
    top = tl.top_ops
    if top.size < _MIN_ELEMENTWISE:
        return []
    ew, red = elementwise_mask(trace, top)
    member = ew | red
    start = trace.start_ns[top]
    end = start + trace.duration_ns[top]
    gap = np.empty(top.size, dtype=np.int64)
    gap[0] = np.iinfo(np.int64).max
    gap[1:] = start[1:] - end[:-1]
    # a chain: consecutive top-level ops, all elementwise or reductions (whatever the gaps)
    begins = member & ~np.concatenate(([False], member[:-1]))
    run_id = np.cumsum(begins) - 1
    run_id[~member] = -1
    chains: dict[tuple[int, ...], dict] = {}
    firsts = np.flatnonzero(begins)
    for k, lo in enumerate(firsts.tolist()):
        hi = lo + 1
        while hi < top.size and run_id[hi] == k:
            hi += 1
        if int(ew[lo:hi].sum()) < _MIN_ELEMENTWISE:
            continue
        names_run = trace.name_id[top[lo:hi]]
        # a loop runs the chain back to back: cut the run into its repeating unit
        period, phase = _unit(names_run, gap[lo:hi])
        units = [(u, u + period) for u in range(lo + phase, hi - period + 1, period)] if period else [(lo, hi)]
        for u_lo, u_hi in units:
            if int(ew[u_lo:u_hi].sum()) < _MIN_ELEMENTWISE:
                continue
            sig = tuple(int(n) for n in trace.name_id[top[u_lo:u_hi]])
            c = chains.setdefault(sig, {"count": 0, "dev": 0, "max": 0, "gaps": 0, "first": []})
            dev = tl.top_dev_ns[u_lo:u_hi]
            c["count"] += 1
            c["dev"] += int(dev.sum())
            c["max"] += int(dev.max())
            # fusing saves the dispatch between the ops, not the host's other work in a long gap
            c["gaps"] += int(gap[u_lo + 1 : u_hi].clip(min=0, max=tl.threshold_ns).sum())
            if len(c["first"]) < 50:
                c["first"].append(int(top[u_lo]))
    out = []
    for sig, c in chains.items():
        names = [trace.names[n] for n in sig]
        at_stake_ns = c["dev"] - c["max"] + c["gaps"]
        if at_stake_ns <= 0:
            continue
        chain = " → ".join(n.removeprefix("aten::") for n in names)
        distinct = set(names)
        if _RMSNORM <= distinct:
            fix = "use torch.rms_norm (one fused op) or torch.compile the function"
        elif _SOFTMAX <= distinct:
            fix = "use torch.softmax / torch.nn.functional ops, or torch.compile the function"
        else:
            fix = "fuse them: torch.compile the function (or write one fused op)"
        where = source_of(trace, np.array(c["first"], dtype=np.int64), limit=1)
        at = f" at {where[0]}" if where else ""
        msg = f"unfused elementwise chain {chain} ran ×{c['count']}{at}: {fix}"
        out.append(
            ctx.finding(
                "elementwise_chain",
                msg,
                at_stake_ns / 1e3,
                {
                    "ops": names,
                    "occurrences": c["count"],
                    "chain_device_time_us": round(c["dev"] / 1e3, 3),
                    "between_ops_us": round(c["gaps"] / 1e3, 3),
                    "locations": where,
                },
            )
        )
    out.sort(key=lambda f: -f.us_at_stake)
    if any(f.evidence["occurrences"] > 1 for f in out):  # leftovers of a loop's first or last pass
        out = [f for f in out if f.evidence["occurrences"] > 1]
    return out[:3]


def _unit(names: np.ndarray, gaps: np.ndarray, max_period: int = 64) -> tuple[int, int]:
    """(period, phase) of a run that repeats a unit of ops (0, 0 when it does not): the
    smallest period matching >= 90 % of the run; units start at the run's start."""
    n = int(names.size)
    for p in range(1, min(n // 2, max_period) + 1):
        if float((names[:-p] == names[p:]).mean()) >= 0.9:
            if p < _MIN_ELEMENTWISE:
                return 0, 0
            return p, 0  # a run begins after a break (another op, a long gap): at a unit's start
    return 0, 0
