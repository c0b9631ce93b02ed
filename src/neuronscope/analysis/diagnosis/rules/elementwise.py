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

Not a chain: an optimizer's per-parameter updates (inside ``Optimizer.step#…``: independent
tensors; ``optimizer_single_tensor`` covers them) and one in-place op repeated (``add_ → add_
→ add_``: one tensor after another). ``torch.rms_norm`` is advised only where it fuses: not on
a CPU, where torch 2.13 runs it as the same pow/mean/mul, nor where the trace shows it
decomposing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..categories import REDUCTIONS
from ..model import Finding
from ..locations import source_of
from ..timeline import elementwise_mask
from . import Context, MessageContext, rule

_MIN_ELEMENTWISE = 3  # HTA's min_pattern_len
_RMSNORM = {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"}
_SOFTMAX = {"aten::exp", "aten::sum", "aten::div"}


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    chain = " → ".join(n.removeprefix("aten::") for n in ev["ops"])
    at = f" at {ev['locations'][0]}" if ev.get("locations") else ""
    fix = ev["fix"]
    if ev.get("passes_from") == "op times":
        fix += " (its passes over memory told from the op times: profile with record_shapes=True to count them)"
    return f"unfused elementwise chain {chain} ran ×{ev['occurrences']}{at}: {fix}"


@rule("elementwise_chain", message=_message, adds=("occurrences", "chain_device_time_us", "between_ops_us"))
def elementwise_chain(ctx: Context) -> list:
    tl, trace = ctx.timeline, ctx.trace
    top = tl.top_ops
    if top.size < _MIN_ELEMENTWISE:
        return []
    ew, red = elementwise_mask(trace, top)
    # an optimizer's per-parameter updates (add_ on each weight) are independent, not a chain
    member = (ew | red) & ~_in_optimizer_step(ctx, top)
    ulo, uhi = _chain_units(trace.name_id[top], ew, member)
    if not ulo.size:
        return []
    groups = _group_units(ctx, top, ulo, uhi)
    out = []
    for sig, i in groups.index.items():
        found = _chain_finding(ctx, top, ulo, uhi, groups, sig, i)
        if found is not None:
            out.append(found)
    out.sort(key=lambda f: -f.us_at_stake)
    if any(f.evidence["occurrences"] > 1 for f in out):  # leftovers of a loop's first or last pass
        out = [f for f in out if f.evidence["occurrences"] > 1]
    return out[:3]


def _chain_units(names: np.ndarray, ew: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chains as [lo, hi) positions among the top-level ops, a loop's runs cut into their unit."""
    # a chain: consecutive top-level ops, all elementwise or reductions (whatever the gaps)
    edges = np.diff(np.concatenate(([0], member.astype(np.int8), [0])))
    run_lo, run_hi = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    ew_cum = np.concatenate(([0], np.cumsum(ew)))
    keep = (ew_cum[run_hi] - ew_cum[run_lo]) >= _MIN_ELEMENTWISE
    run_lo, run_hi = run_lo[keep], run_hi[keep]
    unit_lo: list[int] = []
    unit_hi: list[int] = []
    for lo, hi in zip(run_lo.tolist(), run_hi.tolist()):
        # a loop runs the chain back to back: cut the run into its repeating unit
        period = _unit(names[lo:hi]) if hi - lo >= 2 * _MIN_ELEMENTWISE else 0
        if period:
            starts = range(lo, hi - period + 1, period)
            unit_lo.extend(starts)
            unit_hi.extend(u + period for u in starts)
        else:
            unit_lo.append(lo)
            unit_hi.append(hi)
    ulo, uhi = np.array(unit_lo, dtype=np.int64), np.array(unit_hi, dtype=np.int64)
    ok = (ew_cum[uhi] - ew_cum[ulo]) >= _MIN_ELEMENTWISE
    return ulo[ok], uhi[ok]


@dataclass
class _ChainGroups:
    """The chains grouped by their ops (a signature): per group its count and summed times (ns)."""

    index: dict[tuple[int, ...], int]  #: signature -> group
    which: np.ndarray  #: each chain's group
    count: np.ndarray
    dev_sum: np.ndarray  #: device time of its ops
    max_sum: np.ndarray  #: device time of its longest op
    gap_sum: np.ndarray  #: dispatch gaps between its ops


def _group_units(ctx: Context, top: np.ndarray, ulo: np.ndarray, uhi: np.ndarray) -> _ChainGroups:
    """Group the chains by signature, summing their device time, longest op and gaps between ops."""
    tl, trace = ctx.timeline, ctx.trace
    start = trace.start_ns[top]
    end = start + trace.duration_ns[top]
    gap = np.zeros(top.size, dtype=np.int64)
    gap[1:] = np.clip(start[1:] - end[:-1], 0, tl.threshold_ns)  # fusing saves dispatch, not other host work
    names_list = trace.name_id[top].tolist()
    dev = tl.top_dev_ns
    dev_cum = np.concatenate(([0], np.cumsum(dev)))
    gap_cum = np.concatenate(([0], np.cumsum(gap)))
    unit_dev = dev_cum[uhi] - dev_cum[ulo]
    unit_gaps = gap_cum[uhi] - gap_cum[ulo + 1]
    bounds = np.stack([ulo, uhi], axis=1).reshape(-1)
    padded = np.append(dev, 0)
    unit_max = np.maximum.reduceat(padded, bounds)[::2]
    sigs = [tuple(names_list[lo:hi]) for lo, hi in zip(ulo.tolist(), uhi.tolist())]
    index: dict[tuple[int, ...], int] = {}
    which = np.fromiter((index.setdefault(sig, len(index)) for sig in sigs), dtype=np.int64, count=len(sigs))
    k = len(index)
    return _ChainGroups(
        index=index,
        which=which,
        count=np.bincount(which, minlength=k),
        dev_sum=np.bincount(which, weights=unit_dev, minlength=k),
        max_sum=np.bincount(which, weights=unit_max, minlength=k),
        gap_sum=np.bincount(which, weights=unit_gaps, minlength=k),
    )


def _chain_finding(
    ctx: Context, top: np.ndarray, ulo: np.ndarray, uhi: np.ndarray, g: _ChainGroups, sig: tuple[int, ...], i: int
) -> Finding | None:
    """The finding for one group of chains (None: nothing at stake, or not a chain)."""
    trace = ctx.trace
    passes_from = None
    model = (
        "fusion on an accelerator: the chain's device time beyond its longest op (the fused kernel is about "
        "one such pass), and the launch gaps between its ops"
    )
    if ctx.device == "cpu":
        at_stake_ns, shapes_unknown = _cpu_fusion_ns(ctx, top, ulo[g.which == i], uhi[g.which == i])
        passes_from = "op times" if shapes_unknown else "shapes"
        model = (
            "fusion: the chain's time less one pass per reduction, one more and a write, at the rate per pass of "
            "the chain's best op (capped at the roof of the level its working set fits)"
        )
    else:
        # each op a kernel that streams the tensor through memory: the fused kernel is
        # about one such pass, and the launch gaps between them go
        at_stake_ns = float(g.dev_sum[i] - g.max_sum[i] + g.gap_sum[i])
    if at_stake_ns <= 0:
        return None
    op_names = [trace.names[n] for n in sig]
    chain = " → ".join(n.removeprefix("aten::") for n in op_names)
    distinct = set(op_names)
    if len(distinct) == 1 and op_names[0].endswith("_"):
        return None  # the same in-place update on one tensor after another: independent, not a chain
    firsts = top[ulo[g.which == i][:50]]
    where = source_of(trace, firsts, limit=1)
    return ctx.finding(
        "elementwise_chain",
        None,
        at_stake_ns / 1e3,
        {
            "ops": op_names,
            "occurrences": int(g.count[i]),
            "chain_device_time_us": round(float(g.dev_sum[i]) / 1e3, 3),
            "between_ops_us": round(float(g.gap_sum[i]) / 1e3, 3),
            "locations": where,
            "fix": _fix(ctx, distinct),
            "passes_from": passes_from,
            "at_stake_model": model,
        },
        subject=chain,
        # on a CPU the claim is built from each op's fastest call: with a few calls a preempted one
        # is already out; one call's time is all there is (beside two burners a 64 MiB RMSNorm
        # profiled once claimed 2.2x the saving unscaled): scaled by the runnable share then
        trimmed=ctx.device == "cpu" and int(g.count[i]) >= 3,
    )


def _fix(ctx: Context, distinct: set[str]) -> str:
    """What to do about a chain of these ops on this device."""
    if _RMSNORM <= distinct and ctx.device != "cpu" and not _decomposes(ctx.trace, "aten::rms_norm"):
        return "use torch.rms_norm (one fused op) or torch.compile the function"
    if _RMSNORM <= distinct:
        # on a CPU (torch <= 2.13) torch.rms_norm runs these same pow/mean/mul ops: only a
        # compiler fuses them
        return "torch.compile the function (torch.rms_norm runs these same ops on this device)"
    if _SOFTMAX <= distinct:
        return "use torch.softmax / torch.nn.functional ops, or torch.compile the function"
    return "fuse them: torch.compile the function (or write one fused op)"


def _cpu_fusion_ns(ctx: Context, top: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, bool]:
    """What fusing a chain saves on a CPU, over its occurrences ``[lo, hi)`` (indices into
    ``top``), and whether the shapes were unknown (the passes then follow from the op times).

    The model of the fix: the fused kernel makes one pass per reduction it has to finish first,
    one more, and writes once, at the rate per pass the chain's best op achieved (it streams from
    the same cache or memory level; never faster than that level's roof, where the roofs are
    known), and the compiled function's call costs its guards on top; it saves the rest of the
    chain's time -- every other op's dispatch and its passes over the tensors (measured, RMSNorm
    of (8, 128, 1024) fp32, in a 32 MiB L3: eager 3.4 ms a call with the allocator faulting its
    tensors in, 0.38 warm; compiled 0.25). An op's passes are the full-size tensors it reads and
    writes (from the recorded shapes; without them, an op beyond twice the chain's smallest reads
    one and writes one, a reduction only reads)."""
    from ...hardware import CPU_COMPILED_CALL_NS, CPU_DISPATCH_NS_MAX, PROFILER_NS_PER_EVENT

    trace = ctx.trace
    width = int(hi[0] - lo[0])
    dur = np.stack([trace.duration_ns[top[lo + j]] for j in range(width)])  # op j of each occurrence
    # each op's steady-state time: its fastest occurrence -- in a profile, calls fault their
    # tensors' memory back in (the profiler's own allocations make the allocator return freed
    # 4 MiB blocks to the system: 1.5 ms instead of 0.15, in 3 of 4 calls, measured) and a
    # preempted one waits for a core; neither is what fusing saves call after call
    per_op = np.clip(dur.min(axis=1) - PROFILER_NS_PER_EVENT, 0, None)
    dispatch = float(np.clip(per_op.min(), 0, CPU_DISPATCH_NS_MAX))
    names = [trace.names[int(trace.name_id[top[lo[0] + j]])] for j in range(width)]
    sizes = [_operand_bytes(trace, int(top[lo[0] + j])) for j in range(width)]
    shapes_unknown = any(s is None for s in sizes)
    if shapes_unknown:
        # an op well under the chain's longest works on a reduced tensor (RMSNorm's add and rsqrt
        # on one value a row: 3 us beside 47 us for the full-size ops), not a full-size one;
        # counted as a pass it set the rate per pass 40x too fast (claim 11x the saving)
        full = 0.25 * (float(per_op.max()) - dispatch)
        passes = [
            0 if t <= 2 * dispatch or t - dispatch < full else 1 if n in REDUCTIONS else 2 for n, t in zip(names, per_op.tolist())
        ]
        big = 0
    else:
        big = max(max(s) if s else 0 for s in sizes if s is not None)
        passes = []
        for j, operands in enumerate(sizes):
            full_in = sum(1 for b in operands or () if big and 2 * b >= big)
            passes.append(full_in + (1 if full_in and names[j] not in REDUCTIONS else 0))
    streaming = per_op - dispatch
    rates = [streaming[j] / p for j, p in enumerate(passes) if p > 0]
    if not rates:  # nothing streams a tensor: the ops are all dispatch
        return dispatch * (width - 1) * lo.size, shapes_unknown
    ns_per_pass = float(min(rates))  # the chain's best op
    reductions = sum(1 for n, p in zip(names, passes) if n in REDUCTIONS and p > 0)
    fused_passes = 2 + reductions
    # ... and it still does every full-size op's arithmetic on every element, none faster than
    # the chain's best op streams one pass (the compiled RMSNorm above, one thread, warm: 260 us
    # a call for 4 such ops, where 3 passes at the best op's rate would be 141)
    arithmetic = sum(1 for p in passes if p > 0)
    fused_ns = max(fused_passes, arithmetic) * ns_per_pass
    limits = getattr(ctx.summary, "limits", None)
    if big and limits is not None:
        # the fused kernel's working set is the input and the output: no faster than the roof
        # of the level that holds them
        _, roof = limits.memory_roof(2 * big)
        fused_ns = max(fused_ns, fused_passes * big / roof * 1e9)
    # the compiled function's call (one dispatch and its guards) replaces the chain's ops: an
    # RMSNorm of 4 MiB, one thread, warm allocator: ops 335 us a call at their fastest, eager 379,
    # compiled 249 -- the model's 184 us of passes plus this call
    saved = float(per_op.sum()) - dispatch - CPU_COMPILED_CALL_NS - fused_ns
    return max(saved, dispatch * (width - 1)) * lo.size, shapes_unknown


def _operand_bytes(trace: Any, pos: int) -> list[int] | None:
    """Bytes of each recorded tensor input of the op at ``pos`` (None: no shapes recorded)."""
    from ...hardware import tensor_bytes

    rec = trace.inputs.get(pos)
    if rec is None:
        return None
    shapes, dtypes = rec[0], rec[1]
    return [tensor_bytes(s, dtypes[k] if k < len(dtypes) else "float") for k, s in enumerate(shapes)]


def _in_optimizer_step(ctx: Context, positions: np.ndarray) -> np.ndarray:
    """Which of the ops at ``positions`` ran inside an ``Optimizer.step#...`` annotation."""
    trace = ctx.trace
    steps = np.flatnonzero(trace.name_mask(lambda n: n.startswith("Optimizer.step#")))
    if not steps.size or not positions.size:
        return np.zeros(positions.size, dtype=bool)
    s_start = trace.start_ns[steps]
    order = np.argsort(s_start)
    s_start, s_end = s_start[order], (s_start + trace.duration_ns[steps])[order]
    reach = np.maximum.accumulate(s_end)
    at = trace.start_ns[positions]
    i = np.searchsorted(s_start, at, side="right") - 1
    return (i >= 0) & (at < reach[np.maximum(i, 0)])


def _decomposes(trace: Any, fused: str) -> bool:
    """The trace shows ``fused`` (``aten::rms_norm``) running as several ops inside it."""
    from ....trace.kinds import EventKind

    pos = np.flatnonzero((trace.kind == EventKind.OP) & trace.name_mask(lambda n: n == fused))
    if not pos.size:
        return False
    end = trace.start_ns[pos] + trace.duration_ns[pos]
    ops = np.flatnonzero((trace.kind == EventKind.OP) & trace.name_mask(lambda n: n in _RMSNORM))
    first, last = int(trace.start_ns[pos[0]]), int(end[0])
    inside = (trace.start_ns[ops] >= first) & (trace.start_ns[ops] < last)
    return int(inside.sum()) >= 2


def _unit(names: np.ndarray, max_period: int = 64) -> int:
    """The period of a run that repeats a unit of ops (0 when it does not): the smallest one
    matching >= 90 % of the run. Units start at the run's start (a run begins after a break:
    another op, or the start of the loop)."""
    n = int(names.size)
    for p in range(_MIN_ELEMENTWISE, min(n // 2, max_period) + 1):
        if float((names[:-p] == names[p:]).mean()) >= 0.9:
            return p
    return 0
