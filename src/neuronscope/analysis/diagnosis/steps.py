"""Steps: the repeated unit of work in a run, and its wall time.

Found, in this order:

1. ``profiler_step``: torch.profiler's ``ProfilerStep#N`` annotations (``schedule=``);
2. ``ns.step``: ``neuronscope.step()`` markers — a step ends at each call, the first one
   starts with the profile;
3. ``region``: a top-level region (not inside another region) that occurs at least twice:
   the repeated ``with ns.region("train_step")``, or the repeated decorated calls nested in
   this profile (each is a region named after the function);

otherwise the run has no steps.
"""

from __future__ import annotations

import numpy as np

from ...trace.kinds import MARKER_STEP as STEP_MARKER
from ...trace.kinds import EventKind
from ...trace.model import Trace

__all__ = ["find_steps"]

_PROFILER_STEP = "ProfilerStep#"


def find_steps(trace: Trace, lo: int, hi: int, main_thread: int) -> tuple[str, str, np.ndarray, np.ndarray] | None:
    """(source, name, starts, ends) of the run's steps, in time order, or None."""
    end = trace.start_ns + trace.duration_ns
    regions = trace.kind == EventKind.REGION
    prof_step = regions & trace.name_mask(lambda n: n.startswith(_PROFILER_STEP))
    if prof_step.sum() >= 1:
        idx = np.flatnonzero(prof_step)
        idx = idx[np.argsort(trace.start_ns[idx], kind="stable")]
        return "profiler_step", "ProfilerStep", trace.start_ns[idx], end[idx]
    marks = trace.name_mask(lambda n: n == STEP_MARKER)
    if marks.any():
        at = np.sort(trace.start_ns[marks & (trace.start_ns >= lo) & (trace.start_ns <= hi)])
        if at.size:
            starts = np.concatenate(([lo], at[:-1]))
            return "ns.step", "ns.step", starts, at
    # repeated top-level regions of the main thread
    reg = np.flatnonzero(regions & (trace.thread == main_thread) & ~prof_step)
    if not reg.size:
        return None
    order = np.lexsort((-end[reg], trace.start_ns[reg]))
    reg = reg[order]
    reach = np.maximum.accumulate(end[reg])
    top = np.ones(reg.size, dtype=bool)
    top[1:] = trace.start_ns[reg][1:] >= reach[:-1]
    top_reg = reg[top]
    names, counts = np.unique(trace.name_id[top_reg], return_counts=True)
    if not counts.size or counts.max() < 2:
        return None
    # the most repeated one; ties: the one with the most total time
    best = max(
        (int(n) for n, c in zip(names, counts) if c == counts.max()),
        key=lambda n: int(trace.duration_ns[top_reg][trace.name_id[top_reg] == n].sum()),
    )
    chosen = top_reg[trace.name_id[top_reg] == best]
    chosen = chosen[np.argsort(trace.start_ns[chosen], kind="stable")]
    return "region", trace.names[best], trace.start_ns[chosen], end[chosen]
