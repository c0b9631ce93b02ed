"""torch.profiler's ``_pattern_matcher`` ("TorchTidy") rules, ported to the trace model.

torch runs them on its ``experimental_event_tree`` and needs ``with_stack=True`` for most
(and crashes when a match has no Python frame). Here each works from op and region names
and their nesting, so it runs on every trace, live or saved; shapes are used where the rule
is about shapes (``record_shapes=True``), and ``with_stack=True`` adds source locations.

===========================  =============================================================
rule                         torch's pattern (message)
===========================  =============================================================
``extra_copy``               ExtraCUDACopyPattern: a tensor filled on the CPU, then copied to
                             the device ("initialize it on the device")
``forloop_indexing``         ForLoopIndexingPattern: >= 10 identical blocks each starting
                             with ``aten::select`` ("vectorization recommended")
``optimizer_single_tensor``  OptimizerSingleTensorPattern: an optimizer step without
                             ``_foreach_`` ops ("foreach=True")
``sync_dataloader``          SynchronizedDataLoaderPattern: a single-process DataLoader
                             ("num_workers > 0")
``grad_not_set_to_none``     GradNotSetToNonePattern: ``zero_grad`` zeroing gradients
                             ("set_to_none=True")
``conv_bias_before_bn``      Conv2dBiasFollowedByBatchNorm2dPattern ("bias=False")
===========================  =============================================================
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from ....trace.kinds import EventKind
from ...nesting import nest
from ..locations import source_of
from ..timeline import CLASS_INDEX
from . import Context, MessageContext, rule

_FILLS = frozenset(
    "aten::" + n for n in "fill_ zero_ normal_ uniform_ ones zeros full randn rand randint arange ones_like zeros_like".split()
)
_COPY_TO = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
_OPT_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#(\w+)\.zero_grad$")
_PER_PARAM = frozenset({"aten::add_", "aten::mul_", "aten::addcmul_", "aten::addcdiv_", "aten::sqrt", "aten::lerp_", "aten::div"})
_FORLOOP_MIN = 10
#: a single-tensor optimizer whose per-tensor overhead is below this share of the window is not
#: worth a finding (a handful of tensors: foreach saves under the noise of a run)
_OPTIMIZER_MIN_SHARE = 0.02
#: ops that make an iteration a model step, not an element access (GEMMs, convolutions, attention)
_MODEL_OPS = frozenset(
    "aten::" + n
    for n in "mm addmm bmm baddbmm matmul linear conv1d conv2d conv3d convolution _convolution "
    "scaled_dot_product_attention _scaled_dot_product_flash_attention "
    "_scaled_dot_product_efficient_attention embedding".split()
)


class _Tree:
    """Children of every op/region on the host threads, in time order."""

    def __init__(self, ctx: Context) -> None:
        trace = ctx.trace
        sel = np.flatnonzero(
            np.isin(trace.kind, [EventKind.OP, EventKind.REGION]) & np.isin(trace.thread, ctx.timeline.host_threads)
        )
        start = trace.start_ns[sel]
        n = nest(trace.thread[sel], start, start + trace.duration_ns[sel])
        self.pos = sel[n.order]  # trace positions, in nesting order
        self.parent = n.parent
        self.children: dict[int, list[int]] = defaultdict(list)  # parent index (-1 = root) -> child indices
        for i, p in enumerate(self.parent.tolist()):
            self.children[p].append(i)
        names = trace.names
        self.name = [names[int(k)] for k in trace.name_id[self.pos]]

    def descendants(self, i: int) -> list[int]:
        out, stack = [], list(self.children.get(i, ()))
        while stack:
            j = stack.pop()
            out.append(j)
            stack.extend(self.children.get(j, ()))
        return out


def _between_children_us(ctx: Context, tree: _Tree, nodes: list[int]) -> float:
    """Time between consecutive children of each node (each gap capped at the gap threshold:
    longer ones are something else than dispatch), summed, µs: unprofiled -- less the half of
    each event's recording cost that falls outside it, the end of one op and the start of the
    next (``PROFILER_NS_PER_EVENT``: what the profiler adds per event, inside it and out)."""
    from ...hardware import PROFILER_NS_PER_EVENT

    trace = ctx.trace
    cap = ctx.timeline.threshold_ns
    recording = PROFILER_NS_PER_EVENT / 2
    total = 0.0
    for i in nodes:
        kids = tree.children.get(i, [])
        if len(kids) < 2:
            continue
        pos = tree.pos[kids]
        start = trace.start_ns[pos]
        end = start + trace.duration_ns[pos]
        # capped: a time slice another process took between two ops adds at most the cap
        total += float(np.clip(np.clip(start[1:] - end[:-1], 0, cap) - recording, 0, None).sum())
    return total / 1e3


def _tree(ctx: Context) -> _Tree:
    cached = ctx.facts.get("_tree")
    if cached is None:
        cached = ctx.facts["_tree"] = _Tree(ctx)
    return cached


def _time_us(ctx: Context, tree: _Tree, idx: list[int]) -> float:
    return float(ctx.trace.duration_ns[tree.pos[idx]].sum()) / 1e3 if idx else 0.0


#: the torch device type of each trace device label (ROCm runs under torch's "cuda")
_TORCH_DEVICE = {"rocm": "cuda"}


def _extra_copy_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"{ev['copies']} tensors filled on the CPU and then copied to the {ev['device']} device: "
        f"create them there directly (torch.zeros(..., device='{ev['torch_device']}'))"
    )


@rule(
    "extra_copy",
    message=_extra_copy_message,
    adds=("copies",),
    model="no copy: the copies' device time",
)
def extra_copy(ctx: Context) -> list:
    if ctx.device == "cpu" or not any(n in _COPY_TO for n in ctx.trace.names):
        return []
    tree = _tree(ctx)
    hits: list[int] = []
    for kids in tree.children.values():
        for a, b in zip(kids, kids[1:]):
            if tree.name[a] in _FILLS and tree.name[b] in _COPY_TO:
                hits.append(b)
    if not hits:
        return []
    from .precision import device_ns_by_op, inclusive_total

    # at stake: the copies' device time (a blocking copy's host time also holds the wait for
    # everything queued before it, which creating the tensor on the device would not save)
    positions = [int(tree.pos[h]) for h in hits]
    stake_us = min(inclusive_total(ctx, positions, device_ns_by_op(ctx)) / 1e3, _time_us(ctx, tree, hits))
    torch_device = _TORCH_DEVICE.get(ctx.device, ctx.device)
    return [
        ctx.finding(
            "extra_copy",
            None,
            stake_us,
            {
                "copies": len(hits),
                "locations": source_of(ctx.trace, tree.pos[hits], limit=2),
                "device": ctx.device,
                "torch_device": torch_device,
            },
            host_side=False,
        )
    ]


def _forloop_message(ev: dict[str, Any], words: MessageContext) -> str:
    block = " → ".join(n.removeprefix("aten::") for n in ev["block"])
    loops = ev.get("loops", 1)
    times = f"{ev['iterations']} times" + (f" (×{loops} loops)" if loops > 1 else "")
    return (
        f"a Python loop indexes a tensor {times} ({block} per item): vectorise it (one op over the whole tensor instead "
        "of one per element)"
    )


@rule(
    "forloop_indexing",
    message=_forloop_message,
    adds=("loops",),
    model="vectorise: the loop's span unprofiled less one iteration (one op over the whole tensor)",
)
def forloop_indexing(ctx: Context) -> list:
    loops = vectorisable_loops(ctx)
    found = []
    for block, runs in loops.items():
        # what vectorising saves: each loop's whole span, its ops and the Python between them
        # (less what the profiler added to each event it recorded), but one iteration's worth
        tree = _tree(ctx)
        saved = 0.0
        for length, members in runs:
            pos = tree.pos[members]
            saved += ctx.unprofiled_ns(_iterations_ns(ctx, pos, block), pos) / 1e3 * (1 - 1 / length)
        longest = max(runs, key=lambda r: r[0])
        evidence = {
            "iterations": longest[0],
            "loops": len(runs),
            "block": list(block),
            "locations": source_of(ctx.trace, tree.pos[longest[1][:1]], limit=1),
        }
        found.append(ctx.finding("forloop_indexing", None, saved, evidence, subject=" → ".join(block), trimmed=True))
    found.sort(key=lambda f: -f.us_at_stake)
    return found[:2]


def _iterations_ns(ctx: Context, pos: np.ndarray, block: tuple[str, ...]) -> float:
    """A loop's span (its ops and the Python between them) as the sum of its iterations, each
    from its first op's start to the next one's, the last to the loop's end. On a contended CPU
    a preemption lands whole in one iteration (a time slice of milliseconds in microseconds of
    work): each iteration counts at most a few times the median one (Context.trimmed_ns). A
    uniform scaling by the runnable share also shrank the iterations never preempted: beside two
    busy processes the row loop's claim read 0.48x of what vectorising saved."""
    trace = ctx.trace
    starts = trace.start_ns[pos]
    end = float((starts + trace.duration_ns[pos]).max())
    firsts = starts[:: len(block)].astype(np.float64)  # members are the iterations' ops, in order
    iterations = np.diff(np.append(firsts, end))
    return float(ctx.trimmed_ns(iterations, np.zeros(iterations.size, dtype=np.int8), min_calls=3).sum())


def vectorisable_loops(ctx: Context) -> dict[tuple[str, ...], list[tuple[int, list[int]]]]:
    """The Python loops that index a tensor item by item and could be one op over the whole
    tensor: block -> [(iterations, member nodes of the tree)] (cached on the context)."""
    cached = ctx.facts.get("_vectorisable_loops")
    if cached is not None:
        return cached
    loops: dict[tuple[str, ...], list[tuple[int, list[int]]]] = defaultdict(list)
    if "aten::select" in ctx.trace.names:
        tree = _tree(ctx)
        for kids in tree.children.values():
            for length, members, block in _indexing_loops(tree, kids):
                # each iteration runs the model on the previous one's output (a decoding loop, a
                # recurrence): it cannot be vectorised, and the indexing is a small part of it
                if not any(n in _MODEL_OPS or n.startswith("nn.Module") for n in block):
                    loops[block].append((length, members))
    ctx.facts["_vectorisable_loops"] = dict(loops)
    return ctx.facts["_vectorisable_loops"]


def loop_spans(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every vectorisable loop: what ``forloop_indexing`` claims."""
    loops = vectorisable_loops(ctx)
    if not loops:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tree, trace = _tree(ctx), ctx.trace
    spans = []
    for runs in loops.values():
        for _, members in runs:
            pos = tree.pos[members]
            spans.append((int(trace.start_ns[pos].min()), int((trace.start_ns[pos] + trace.duration_ns[pos]).max())))
    spans.sort()
    return np.array([a for a, _ in spans], dtype=np.int64), np.array([b for _, b in spans], dtype=np.int64)


def _indexing_loops(tree: _Tree, kids: list[int]) -> list[tuple[int, list[int], tuple[str, ...]]]:
    """The loops among one node's children: runs of >= 10 identical blocks that each start with
    ``aten::select`` — (iterations, the member nodes, the block)."""
    names = [tree.name[k] for k in kids]
    starts = [i for i, n in enumerate(names) if n == "aten::select"]
    if len(starts) < _FORLOOP_MIN:
        return []
    blocks = [tuple(names[s:e]) for s, e in zip(starts, starts[1:] + [len(names)])]
    out = []
    run_start = 0
    for i in range(1, len(blocks) + 1):
        if i == len(blocks) or blocks[i] != blocks[run_start]:
            length = i - run_start
            if length >= _FORLOOP_MIN:
                members = [kids[j] for j in range(starts[run_start], starts[i - 1] + len(blocks[i - 1]))]
                out.append((length, members, blocks[run_start]))
            run_start = i
    return out


def _optimizer_message(ev: dict[str, Any], words: MessageContext) -> str:
    tensors = f" ({ev['tensors']} tensors a step)" if ev.get("tensors") else ""
    fix = "pass fused=True to it (or foreach=True)" if ev.get("fix") == "fused" else "pass foreach=True (or fused=True) to it"
    return f"the {'/'.join(ev['optimizers'])} optimizer steps one tensor at a time{tensors}: {fix}"


#: optimizers torch has a fused (one kernel for every tensor) step for, on CPU and CUDA
_FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
#: full-size tensors an update op reads and writes (``addcmul_(g, g)`` reads g once): the passes
#: over memory a single-tensor step makes per tensor
_PASSES = {
    "aten::add_": 3,
    "aten::mul_": 2,
    "aten::lerp_": 3,
    "aten::addcmul_": 3,
    "aten::addcdiv_": 4,
    "aten::sqrt": 2,
    "aten::div": 2,
    "aten::div_": 2,
}


@rule(
    "optimizer_single_tensor", message=_optimizer_message, adds=("steps", "between_tensor_ops_us", "step_us", "foreach_saves_us")
)
def optimizer_single_tensor(ctx: Context) -> list:
    trace = ctx.trace
    single_py = [n for n in trace.names if re.search(r"_single_tensor_(adam|adamw|sgd)\b", n)]
    tree = _tree(ctx) if any(_OPT_STEP.match(n) for n in trace.names) or single_py else None
    found = single_tensor_steps(ctx) if tree is not None else {}
    if not found and not single_py:
        return []
    steps = [i for v in found.values() for i in v]
    names = sorted(found) or [re.search(r"_single_tensor_(\w+)", single_py[0]).group(1)]  # type: ignore[union-attr]
    # foreach removes the per-tensor overhead -- the host time between one tensor's ops and the
    # next (the Python loop, argument parsing), which _foreach_ ops spend once -- not the
    # arithmetic: on a CPU the _foreach_ ops run the same per-tensor kernels (measured, one
    # thread, 200 tensors of 32x32: Adam 5.2 -> 3.2 ms a step, SGD with momentum 1.34 -> 0.82
    # ms, plain SGD 0.40 -> 0.24; tensors of 512x512 and over: nothing)
    between_us = _between_children_us(ctx, tree, steps) if tree is not None and steps else 0.0
    evidence: dict[str, Any] = {
        "optimizers": names,
        "steps": len(steps),
        "tensors": _tensors_per_step(tree, steps) if tree is not None and steps else None,
        "step_us": round(_time_us(ctx, tree, steps), 3) if tree is not None else 0.0,
        "between_tensor_ops_us": round(between_us, 3),
        "foreach_saves_us": round(between_us, 3),
        "fix": "foreach",
        "at_stake_model": "foreach: the host time between the step's per-tensor ops (the Python loop over the "
        "tensors), which a foreach step spends once",
    }
    saving = between_us
    if ctx.device == "cpu" and tree is not None and steps and set(names) <= _FUSED_OPTIMIZERS:
        # a fused step (one kernel over every tensor; measured on a CPU: AdamW over 8 tensors of
        # 512x512 4.4 -> 1.2 ms, over 200 of 32x32 5.1 -> 0.8 ms; foreach 9.0 and 3.0 ms)
        saving = between_us + _fused_saves_us(ctx, tree, steps, names)
        evidence["fix"] = "fused"
        evidence["at_stake_model"] = (
            "fused: the host time between the per-tensor ops, each op's dispatch, and the passes over memory one "
            "kernel per tensor saves (per tensor: the update ops' full-size reads and writes against one read of "
            "each state and one write)"
        )
    if steps and saving < _OPTIMIZER_MIN_SHARE * ctx.quiet_window_ns / 1e3:
        return []  # a few tensors: the fix would save next to nothing
    return [ctx.finding("optimizer_single_tensor", None, saving, evidence, subject="/".join(names), trimmed=True)]


def _fused_saves_us(ctx: Context, tree: _Tree, steps: list[int], optimizers: list[str]) -> float:
    """What a fused step saves on a CPU beyond foreach's Python loop: each update op's dispatch
    (the step's smallest op, whose time is all dispatch) and, of the time the ops spend beyond
    it streaming their tensors, the passes a single kernel does not make -- it reads the
    parameter, its gradient and each state once and writes the parameter and each state once."""
    from ...hardware import CPU_DISPATCH_NS_MAX

    trace = ctx.trace
    kids = [j for i in steps for j in tree.children.get(i, []) if tree.name[j] in _PASSES]
    if not kids:
        return 0.0
    pos = tree.pos[kids]
    # each op's time as it would be unprofiled: less the recording of the events inside it
    dur = np.array([ctx.unprofiled_ns(float(trace.duration_ns[p]), [int(p)]) for p in pos.tolist()])
    # a contended CPU's preemptions cut back, each op against the same op on the same tensor in
    # the other steps (an MLP's weights and biases differ 500x in size)
    dur = ctx.trimmed_ns(dur, _same_work_keys(tree, steps), min_calls=3)
    dispatch = float(np.clip(np.min(dur), 0, CPU_DISPATCH_NS_MAX))
    streaming = np.clip(dur - dispatch, 0, None)
    # an op on a 0-d tensor (the step counter) streams nothing: only ops well above the dispatch
    # time make passes over memory
    moving = streaming > dispatch
    passes = sum(_PASSES[tree.name[j]] for j, m in zip(kids, moving.tolist()) if m)
    tensors = _tensors_per_step(tree, steps) or 1
    momentum = any(tree.name[j] == "aten::mul_" for j in kids)
    states = 2 if set(optimizers) & {"Adam", "AdamW"} else 1 if momentum or "Adagrad" in optimizers else 0
    fused_passes = (3 + 2 * states) * tensors * len(steps)  # read p, g and the states; write p and the states
    kept = min(fused_passes / passes, 1.0) if passes else 1.0
    return (dispatch * len(kids) + float(streaming[moving].sum()) * (1 - kept)) / 1e3


def _same_work_keys(tree: _Tree, steps: list[int]) -> list[str]:
    """For each update op of ``steps`` (in ``_fused_saves_us``'s order): its name and which of
    the step's calls of that name it is -- the same op on the same tensor in every step."""
    keys = []
    for i in steps:
        seen: dict[str, int] = defaultdict(int)
        for j in tree.children.get(i, []):
            name = tree.name[j]
            if name in _PASSES:
                keys.append(f"{name}#{seen[name]}")
                seen[name] += 1
    return keys


def single_tensor_steps(ctx: Context) -> dict[str, list[int]]:
    """The optimizer steps that update their tensors one at a time: optimizer -> tree nodes
    (cached on the context)."""
    cached = ctx.facts.get("_single_tensor_steps")
    if cached is not None:
        return cached
    found: dict[str, list[int]] = defaultdict(list)
    if any(_OPT_STEP.match(n) for n in ctx.trace.names):
        tree = _tree(ctx)
        for i, name in enumerate(tree.name):
            m = _OPT_STEP.match(name)
            if m and _steps_one_tensor_at_a_time(m.group(1), [tree.name[j] for j in tree.descendants(i)]):
                found[m.group(1)].append(i)
    ctx.facts["_single_tensor_steps"] = dict(found)
    return ctx.facts["_single_tensor_steps"]


def single_tensor_step_spans(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the single-tensor optimizer steps: what ``optimizer_single_tensor`` claims."""
    steps = [i for v in single_tensor_steps(ctx).values() for i in v]
    if not steps:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pos = _tree(ctx).pos[steps]
    order = np.argsort(ctx.trace.start_ns[pos])
    start = ctx.trace.start_ns[pos][order]
    return start, start + ctx.trace.duration_ns[pos][order]


def _steps_one_tensor_at_a_time(optimizer: str, inside: list[str]) -> bool:
    """An optimizer step that updates its tensors one by one: no foreach/fused kernels inside,
    not a wrapper (torchrec's CombinedOptimizer) around optimizers judged on their own, and
    per-parameter updates (add_, lerp_, addcdiv_...) inside."""
    if "fused" in optimizer.lower() or any("_foreach_" in n or "_fused_" in n or _OPT_STEP.match(n) for n in inside):
        return False
    return sum(n in _PER_PARAM for n in inside) >= 4


def _tensors_per_step(tree: _Tree, steps: list[int]) -> int | None:
    """How many tensors a step updates: its most frequent per-parameter op's count (each tensor
    runs it once, or a fixed number of times: the fewest of those counts)."""
    counts: dict[str, int] = defaultdict(int)
    for j in tree.children.get(steps[0], []):
        if tree.name[j] in _PER_PARAM:
            counts[tree.name[j]] += 1
    return min(counts.values()) if counts else None


def _dataloader_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"the DataLoader loads batches in the training process (num_workers=0, {ev['batches']} batches here): "
        "set num_workers > 0 (and pin_memory=True on an accelerator)"
    )


@rule(
    "sync_dataloader",
    message=_dataloader_message,
    adds=("batches", "exposed_data_wait_us"),
    model="prefetch: the time the loop waited for data",
)
def sync_dataloader(ctx: Context) -> list:
    trace = ctx.trace
    ids = [i for i, n in enumerate(trace.names) if "_SingleProcessDataLoaderIter" in n]
    if not ids:
        return []
    count = int(np.isin(trace.name_id, ids).sum())
    tl = ctx.timeline
    exposed_ns = int(tl.gap_ns()[tl.gap_cls == CLASS_INDEX["data"]].sum())
    return [
        ctx.finding(
            "sync_dataloader",
            None,
            exposed_ns / 1e3,
            {"batches": count, "exposed_data_wait_us": round(exposed_ns / 1e3, 3)},
        )
    ]


def _data_wait_message(ev: dict[str, Any], words: MessageContext) -> str:
    return f"the loop waits for data: {ev['exposed_data_wait_us'] / 1e3:.3f} ms of the recorded time — {ev['fix']}"


@rule(
    "data_wait",
    message=_data_wait_message,
    adds=("exposed_data_wait_us",),
    model="prefetch: the time the loop waited for data",
)
def data_wait(ctx: Context) -> list:
    """The loop waits for its data loader (whatever its num_workers): the ``data`` idle time."""
    tl = ctx.timeline
    exposed_ns = int(tl.gap_ns()[tl.gap_cls == CLASS_INDEX["data"]].sum())
    if not tl.window_ns or exposed_ns < 0.05 * tl.window_ns:
        return []
    if any("_SingleProcessDataLoaderIter" in n for n in ctx.trace.names):
        return []  # sync_dataloader says it, with the fix for num_workers=0
    workers = any("_MultiProcessingDataLoaderIter" in n for n in ctx.trace.names)
    fix = (
        "the workers do not keep up: more num_workers, a larger prefetch_factor, persistent_workers=True, "
        "or cheaper per-item work (decode/augment once, on the device, or in a faster format)"
        if workers
        else "load the next batch while this one runs (a DataLoader with num_workers > 0, prefetching)"
    )
    return [
        ctx.finding(
            "data_wait",
            None,
            exposed_ns / 1e3,
            {"exposed_data_wait_us": round(exposed_ns / 1e3, 3), "multiprocess_workers": workers, "fix": fix},
        )
    ]


def _grad_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"zero_grad() zeroes {ev['tensors_zeroed']} gradient tensors instead of dropping them, and backward then adds "
        "into them: call zero_grad(set_to_none=True)"
    )


@rule(
    "grad_not_set_to_none",
    message=_grad_message,
    adds=("tensors_zeroed", "zeroing_us", "accumulating_us"),
    model="set_to_none: the zeroing ops' time and the accumulation into the zeroed gradients",
)
def grad_not_set_to_none(ctx: Context) -> list:
    if not any(_ZERO_GRAD.match(n) for n in ctx.trace.names):
        return []
    tree = _tree(ctx)
    zeroing: list[int] = []
    for i, name in enumerate(tree.name):
        if _ZERO_GRAD.match(name):
            for j in tree.descendants(i):
                if tree.name[j] == "aten::zero_" and (tree.parent[j] < 0 or tree.name[int(tree.parent[j])] != "aten::zeros"):
                    zeroing.append(j)
    if not zeroing:
        return []
    # set_to_none saves the zeroing and, in the next backward, the accumulation into the zeroed
    # gradients (AccumulateGrad adds into an existing .grad; with None it just takes the new one)
    accumulating = [
        j
        for i, name in enumerate(tree.name)
        if name == "torch::autograd::AccumulateGrad"
        for j in tree.descendants(i)
        if tree.name[j] == "aten::add_"
    ]
    zero_us, accumulate_us = _time_us(ctx, tree, zeroing), _time_us(ctx, tree, accumulating)
    return [
        ctx.finding(
            "grad_not_set_to_none",
            None,
            zero_us + accumulate_us,
            {"tensors_zeroed": len(zeroing), "zeroing_us": round(zero_us, 3), "accumulating_us": round(accumulate_us, 3)},
        )
    ]


def _conv_bias_message(ev: dict[str, Any], words: MessageContext) -> str:
    return (
        f"{ev['convolutions']} convolutions with a bias feed straight into BatchNorm (which cancels it): set bias=False on them"
    )


@rule(
    "conv_bias_before_bn",
    message=_conv_bias_message,
    adds=("convolutions",),
    model="no bias: 5 % of the convolutions' time (the bias add)",
)
def conv_bias_before_bn(ctx: Context) -> list:
    trace = ctx.trace
    convs = {"aten::conv2d", "aten::convolution"}
    if not any(n in convs for n in trace.names) or "aten::batch_norm" not in trace.names:
        return []
    tree = _tree(ctx)
    recorded = trace.inputs
    if not recorded:
        ctx.note("conv bias check skipped: profile with record_shapes=True")
        return []
    hits = []
    for kids in tree.children.values():
        for k, a in enumerate(kids):
            if tree.name[a] not in convs:
                continue
            # the next op that is not BatchNorm's own bookkeeping (num_batches_tracked.add_)
            b = next((j for j in kids[k + 1 : k + 4] if tree.name[j] != "aten::add_"), None)
            if b is not None and tree.name[b] == "aten::batch_norm":
                shapes = recorded.get(int(tree.pos[a]), ([], []))[0]
                if len(shapes) >= 3 and shapes[2]:
                    hits.append(a)
    if not hits:
        return []
    return [
        ctx.finding("conv_bias_before_bn", None, _time_us(ctx, tree, hits) * 0.05, {"convolutions": len(hits)}, host_side=False)
    ]
