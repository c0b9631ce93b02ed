"""Steps: the repeated unit of work in a run, and its wall time.

Found, in this order:

1. ``profiler_step``: torch.profiler's ``ProfilerStep#N`` annotations (``schedule=``);
2. ``ns.step``: ``neuronscope.step()`` markers — a step ends at each call, the first one
   starts with the profile;
3. ``region``: a top-level region (not inside another region) that occurs at least twice:
   the repeated ``with ns.region("train_step")``, or the repeated decorated calls nested in
   this profile (each is a region named after the function) — the user's regions, not the
   framework's own annotations (a DataLoader's ``__next__``, an optimizer's ``step``: parts of a
   step, whose durations are not the step's);
4. ``optimizer``: the end of each optimizer ``step()`` (neuronscope marks it while it profiles):
   the training steps of code that marks none itself;

otherwise the run has no steps.
"""

from __future__ import annotations

import numpy as np

from ...trace.kinds import MARKER_OPTIMIZER_STEP, EventKind
from ...trace.kinds import MARKER_STEP as STEP_MARKER
from ...trace.model import Trace

__all__ = ["find_steps"]

_PROFILER_STEP = "ProfilerStep#"
#: torch's and other frameworks' own annotations: parts of a step, never the step itself
_FRAMEWORK_REGIONS = (
    "enumerate(DataLoader)",
    "Optimizer.",
    "## ",
    "Torch-Compiled Region",
    "TorchDynamo",
    "CompiledFunction",
    "autograd::",
    "record_param_comms",
    "nccl:",
    "gloo:",
)


def find_steps(trace: Trace, lo: int, hi: int, main_thread: int) -> tuple[str, str, np.ndarray, np.ndarray] | None:
    """(source, name, starts, ends) of the run's steps, in time order, or None."""
    end = trace.start_ns + trace.duration_ns
    regions = trace.kind == EventKind.REGION
    prof_step = regions & trace.name_mask(lambda n: n.startswith(_PROFILER_STEP))
    if prof_step.sum() >= 1:
        idx = np.flatnonzero(prof_step)
        idx = idx[np.argsort(trace.start_ns[idx], kind="stable")]
        return "profiler_step", "ProfilerStep", trace.start_ns[idx], end[idx]
    marked = _marked(trace, STEP_MARKER, lo, hi)
    if marked is not None:
        return ("ns.step", "ns.step", *marked)
    users = regions & ~trace.name_mask(lambda n: n.startswith(_FRAMEWORK_REGIONS))
    found = _repeated_region(trace, users & (trace.thread == main_thread) & ~prof_step, end)
    if found is not None:
        return found
    marked = _marked(trace, MARKER_OPTIMIZER_STEP, lo, hi)
    if marked is not None:
        return ("optimizer", "optimizer.step", *marked)
    return None


def _marked(trace: Trace, marker: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts, ends) of the steps that ``marker`` ends: the first starts with the window."""
    marks = trace.name_mask(lambda n: n == marker)
    if not marks.any():
        return None
    at = np.sort(trace.start_ns[marks & (trace.start_ns >= lo) & (trace.start_ns <= hi)])
    if not at.size:
        return None
    return np.concatenate(([lo], at[:-1])), at


def _repeated_region(trace: Trace, candidates: np.ndarray, end: np.ndarray) -> tuple[str, str, np.ndarray, np.ndarray] | None:
    """The most repeated top-level region among ``candidates`` (a mask), if one repeats."""
    reg = np.flatnonzero(candidates)
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
