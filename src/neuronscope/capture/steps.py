"""``neuronscope.step()``: mark the end of a step inside a profile."""

from __future__ import annotations

__all__ = ["STEP_MARKER", "step"]

from ..trace.kinds import MARKER_STEP as STEP_MARKER  # the marker step() leaves in the trace


def step() -> None:
    """Mark the end of one step (a training iteration, a served request batch...).

    Inside a profile, the diagnosis then reports per-step wall time (p50/p90/p99/max, the
    slowest step) and a bound-by verdict per step. With ``profile_neuron(schedule=...)`` it
    also advances the schedule, like ``run.step()``. Outside a profile it does nothing
    (two flag checks), so it can stay in production loops.

        with ns.profile_neuron() as run:
            for batch in loader:
                train_step(batch)
                ns.step()
    """
    import torch.autograd.profiler as _ap

    from . import session, watchdog

    if session.any_open():
        # checked before torch's "profiler enabled" flag: a schedule's wait steps record
        # nothing, yet they must be stepped through
        capture = session.innermost()
        if capture is not None and capture.schedule is not None:
            capture.step()
            return
    elif not _ap._is_profiler_enabled:
        return  # no profile at all: two flag checks
    session.mark(STEP_MARKER)  # also in your own torch.profiler: ns.diagnose() finds the steps
    watchdog.on_step()  # windows end and limits act at steps (capture/watchdog.py; returns at once when none is watched)
