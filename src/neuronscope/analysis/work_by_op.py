"""The work of every op call in a trace, summed per summary row (region path, op name).

A chain of ops that repeats one piece of work (``linear -> addmm``, ``conv2d -> convolution ->
mkldnn_convolution``, ``rms_norm -> pow, mean, ...``) counts it once: on the *outermost* call
that has a model, with the inclusive device time of everything under it (the kernels its
children launched are its kernels). Each other call says why it carries no work: counted in
the op around it, no shapes recorded, or no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .kernel_classes import outside_ops_reason
from .work import OpWork, call_size_class
from .work_models import OpCost, is_modelled, no_model_reason, op_cost

if TYPE_CHECKING:
    from ..trace.model import Trace

__all__ = ["attach_work"]

_NO_SHAPES = "no shapes recorded for these calls (profile with record_shapes=True)"


def attach_work(by_path: dict[int, list[tuple]], trace: Trace, tree: Any, times: Any, paths: Any) -> None:
    """Append an :class:`OpWork` to every row tuple of ``by_path`` (summary.py's rows per region)."""
    m = tree.size
    names = trace.names
    n_names = max(len(names), 1)
    modelled_name = np.fromiter((is_modelled(n) for n in names), dtype=bool, count=len(names))
    ops = tree.alive & ~tree.is_region if m else np.zeros(0, dtype=bool)
    cand = np.flatnonzero(ops & modelled_name[tree.name]) if m else np.zeros(0, dtype=np.int64)

    costs, cost_of = _call_costs(trace, tree, cand)
    ok_cost = np.array([isinstance(c, OpCost) for c in costs] + [False], dtype=bool)
    ok = ok_cost[cost_of]  # cost_of == -1 reads the sentinel (False)

    around = _outermost_modelled(tree, ok)
    carrier = ok & (around < 0) & ops

    row_key = paths.of * n_names + tree.name if m else np.zeros(0, dtype=np.int64)
    works: dict[int, dict[str, Any]] = {}
    _carrier_work(works, np.flatnonzero(carrier), row_key, cost_of, costs, times)

    # 4. every other call: why it carries no work here
    _reasons(works, np.flatnonzero(ops & ~carrier), row_key, cost_of, around, tree, names, modelled_name, costs)
    _onto_rows(by_path, works, names)


def _call_costs(trace: Trace, tree: Any, cand: np.ndarray) -> tuple[list[OpCost | str], np.ndarray]:
    """1. the cost of each candidate call, once per distinct (op, recorded signature): the costs
    (or why not), and each node's cost index (-1: none)."""
    names = trace.names
    costs: list[OpCost | str] = []
    cost_of = np.full(tree.size, -1, dtype=np.int64)
    seen: dict[tuple[int, int], int] = {}
    inputs = trace.inputs
    for node, pos, nid in zip(cand.tolist(), tree.idx[cand].tolist(), tree.name[cand].tolist()):
        rec = inputs.get(pos)
        if rec is None:
            continue
        key = (nid, id(rec))
        j = seen.get(key)
        if j is None:
            j = seen[key] = len(costs)
            costs.append(op_cost(names[nid], rec[0], rec[1], rec[2] if len(rec) > 2 else None))
        cost_of[node] = j
    return costs, cost_of


def _outermost_modelled(tree: Any, ok: np.ndarray) -> np.ndarray:
    """2. the outermost modelled call around each call (-1: none), level by level from the roots."""
    m = tree.size
    around = np.full(m, -1, dtype=np.int64)
    has_parent = tree.has_parent() if m else np.zeros(0, dtype=bool)
    for d in range(1, tree.deepest() + 1):
        level = np.flatnonzero((tree.depth == d) & has_parent)
        p = tree.parent[level]
        around[level] = np.where(around[p] >= 0, around[p], np.where(ok[p], p, -1))
    return around


def _carrier_work(
    works: dict[int, dict[str, Any]],
    c_idx: np.ndarray,
    row_key: np.ndarray,
    cost_of: np.ndarray,
    costs: list[OpCost | str],
    times: Any,
) -> None:
    """3. carriers: their work and inclusive device time, per row and per roof (into ``works``)."""
    if not c_idx.size:
        return
    flops_c = np.array([c.flops if isinstance(c, OpCost) else 0.0 for c in costs] + [0.0])
    bytes_c = np.array([c.bytes if isinstance(c, OpCost) else 0.0 for c in costs] + [0.0])
    keys = row_key[c_idx]
    ci = cost_of[c_idx]
    uniq, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    k = uniq.size
    calls = np.bincount(inv, minlength=k)
    fl = np.bincount(inv, weights=flops_c[ci], minlength=k)
    by = np.bincount(inv, weights=bytes_c[ci], minlength=k)
    tm = np.bincount(inv, weights=times.total_dev[c_idx].astype(np.float64), minlength=k)
    for j, key in enumerate(uniq.tolist()):
        works[key] = {
            **_empty(),
            "calls": int(calls[j]),
            "flops": float(fl[j]),
            "bytes": float(by[j]),
            "time_us": float(tm[j]) / 1e3,
        }
    # per (row, distinct cost): its roof and the size of one call (a CPU's cache level)
    n_costs = len(costs) + 1
    pu, pinv = np.unique(inv * n_costs + ci, return_inverse=True)
    pinv = pinv.reshape(-1)
    pf = np.bincount(pinv, weights=flops_c[ci], minlength=pu.size)
    pb = np.bincount(pinv, weights=bytes_c[ci], minlength=pu.size)
    for j, p in enumerate(pu.tolist()):
        row, c = divmod(p, n_costs)
        w, cost = works[int(uniq[row])], costs[c]
        assert isinstance(cost, OpCost)
        w["flops_by_roof"][cost.roof_key] = w["flops_by_roof"].get(cost.roof_key, 0.0) + float(pf[j])
        w["bytes_by_roof"][cost.roof_key] = w["bytes_by_roof"].get(cost.roof_key, 0.0) + float(pb[j])
        if cost.bytes > 0:
            size = call_size_class(cost.bytes)
            had, largest = w["bytes_by_call_size"].get(size, (0.0, 0.0))
            w["bytes_by_call_size"][size] = (had + float(pb[j]), max(largest, cost.bytes))
    _, first = np.unique(inv, return_index=True)  # each row's first call names its family
    for j, c in enumerate(ci[first].tolist()):
        cost = costs[c]
        assert isinstance(cost, OpCost)
        works[int(uniq[j])]["family"] = cost.family


def _onto_rows(by_path: dict[int, list[tuple]], works: dict[int, dict[str, Any]], names: Sequence[str]) -> None:
    """5. onto the rows; an op without a model says so."""
    n_names = max(len(names), 1)
    name_ids = {n: i for i, n in enumerate(names)}
    for path_id, rows in by_path.items():
        for i, row in enumerate(rows):
            name = row[0]
            nid = name_ids.get(name)
            found = works.get(path_id * n_names + nid) if nid is not None else None
            if found is not None:
                rows[i] = row + (OpWork(**found),)
            else:  # device work no op launched (a graph replay, a communication kernel)
                rows[i] = row + (OpWork(not_counted=int(row[1]), reason=outside_ops_reason(name)),)


def _empty() -> dict[str, Any]:
    return {
        "calls": 0,
        "flops": 0.0,
        "bytes": 0.0,
        "time_us": 0.0,
        "flops_by_roof": {},
        "bytes_by_roof": {},
        "family": "",
        "not_counted": 0,
        "reason": "",
        "bytes_by_call_size": {},
    }


def _reasons(
    works: dict[int, dict[str, Any]],
    other: np.ndarray,
    row_key: np.ndarray,
    cost_of: np.ndarray,
    around: np.ndarray,
    tree: Any,
    names: tuple[str, ...],
    modelled_name: np.ndarray,
    costs: list,
) -> None:
    """Count, per row, the calls that carry no work and the commonest reason why."""
    if not other.size:
        return
    covered = around[other] >= 0
    # reason code: 0 counted in the op around it, 1 no model, 2 no shapes, 3 + j the cost j that failed
    code = np.where(
        covered, 0, np.where(~modelled_name[tree.name[other]], 1, np.where(cost_of[other] < 0, 2, 3 + cost_of[other]))
    )
    anc = np.where(covered, tree.name[np.maximum(around[other], 0)], 0)
    n_codes, n_names = len(costs) + 3, max(len(names), 1)
    combo = (row_key[other] * n_codes + code) * n_names + anc
    uniq, counts = np.unique(combo, return_counts=True)
    best: dict[int, tuple[int, str]] = {}
    for c, n in zip(uniq.tolist(), counts.tolist()):
        rest, a = divmod(c, n_names)
        key, k = divmod(rest, n_codes)
        if k == 0:
            reason = f"counted in {names[a]}, the op around these calls"
        elif k == 1:
            reason = no_model_reason(names[key % n_names])
        elif k == 2:
            reason = _NO_SHAPES
        else:
            reason = str(costs[k - 3])
        w = works.setdefault(key, _empty())
        w["not_counted"] += n
        if n > best.get(key, (0, ""))[0]:
            best[key] = (n, reason)
            w["reason"] = reason
