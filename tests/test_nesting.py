"""nest(): parents of intervals, per thread, sorted or not, with zero-length and touching events."""

from __future__ import annotations

import random

import torch

from neuronscope.analysis.nesting import nest


def _reference(thread, start, end):
    """torch's own algorithm (profiler_util._populate_cpu_children), on plain lists."""
    order = sorted(range(len(start)), key=lambda i: (thread[i], start[i], -end[i]))
    parent = {}
    stacks: dict[int, list[int]] = {}
    for i in order:
        stack = stacks.setdefault(thread[i], [])
        while stack:
            p = stack[-1]
            if start[i] >= end[p] or end[i] > end[p]:
                stack.pop()
            else:
                parent[i] = p
                break
        stack.append(i)
    return parent


def _ours(thread, start, end):
    n = nest(torch.tensor(thread), torch.tensor(start), torch.tensor(end))
    order = n.order.tolist()
    return {order[pos]: order[p] for pos, p in enumerate(n.parent.tolist()) if p >= 0}


def test_hand_made_cases():
    # [0,10) contains [1,3) and [3,4); the zero-length [3,3) sorts after [3,4) and nests in it;
    # [10,12) only touches the end of [0,10): a root.
    thread = [0, 0, 0, 0, 0, 1]
    start = [0, 1, 3, 3, 10, 2]
    end = [10, 3, 3, 4, 12, 5]
    assert _ours(thread, start, end) == _reference(thread, start, end) == {1: 0, 3: 0, 2: 3}


def test_random_properly_nested_trees_match_torchs_algorithm():
    rng = random.Random(0)
    for _ in range(50):
        thread, start, end = [], [], []

        def grow(t, lo, hi, depth, thread=thread, start=start, end=end):
            cursor = lo
            while cursor < hi and rng.random() < 0.7:
                a = rng.randint(cursor, hi)
                b = rng.randint(a, hi)
                thread.append(t)
                start.append(a)
                end.append(b)
                if depth < 4 and b > a:
                    grow(t, a, b, depth + 1)
                cursor = b

        for t in range(3):
            grow(t, 0, 1000, 0)
        if not start:
            continue
        perm = list(range(len(start)))
        rng.shuffle(perm)  # input order must not matter
        thread = [thread[i] for i in perm]
        start = [start[i] for i in perm]
        end = [end[i] for i in perm]
        assert _ours(thread, start, end) == _reference(thread, start, end)
