"""The gaps of a run that the code's own sleeps made, told from the raw trace.

A test whose sleep should be a run's longest gap is wrong on a loaded machine: beside two busy
processes the calling thread once lost its core for 99 ms inside ``torch.tanh``'s call, before
its op began -- a longer gap than the test's 50 ms sleeps, rightly attributed to the tanh line.
Such a test asserts what the product says of the gaps its sleeps made instead."""

from __future__ import annotations

from typing import Any

import numpy as np

from neuronscope.trace.kinds import EventKind

__all__ = ["gaps_slept_through"]


def gaps_slept_through(run: Any, caller: str) -> list[Any]:
    """The run's top gaps that a ``time.sleep`` called from a frame named ``...: <caller>``
    (with_stack) spans for at least half their length; asserts the trace holds such sleeps."""
    trace = run.trace
    end = trace.start_ns + trace.duration_ns
    python = trace.kind == EventKind.PYTHON
    frames = np.flatnonzero(python & trace.name_mask(lambda n: n.endswith(f": {caller}")))
    sleeps = [
        (int(trace.start_ns[i]), int(end[i]))
        for i in np.flatnonzero(python & trace.name_mask(lambda n: n == "<built-in function sleep>")).tolist()
        if any(trace.thread[f] == trace.thread[i] and trace.start_ns[f] <= trace.start_ns[i] <= end[f] for f in frames)
    ]
    assert sleeps, f"no sleep called from {caller} in the trace"

    def slept_through(gap: Any) -> bool:
        a, b = gap.start_ns, gap.start_ns + int(gap.duration_us * 1e3)
        return any(2 * (min(b, e) - max(a, s)) >= b - a for s, e in sleeps)

    return [g for g in run.diagnosis.gaps.top if slept_through(g)]
