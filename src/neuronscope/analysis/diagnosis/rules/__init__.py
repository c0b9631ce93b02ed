"""The advisor: rules that turn a diagnosed timeline into advice with the time at stake.

A rule is a function ``rule(ctx) -> list[Finding]`` registered with :func:`rule`. Each has a
stable id (the ``Finding.rule``), reads only the context (trace model, timeline, summary,
steps, run facts) and returns nothing when its input is missing (it then says what to
enable in ``ctx.notes``). Rules never raise into the pipeline: a failing rule is logged and
skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding

__all__ = ["Context", "RULES", "rule", "run_rules"]

log = logging.getLogger("neuronscope")


@dataclass
class Context:
    trace: Any  # Trace
    timeline: Any  # Timeline
    summary: Any  # Summary | None
    steps: int  # number of steps (0: none found)
    facts: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    communication: Any = None  # Communication | None

    @property
    def device(self) -> str:
        return self.trace.device

    def per_step(self, us: float) -> float | None:
        return us / self.steps if self.steps else None

    def finding(self, rule_id: str, message: str, us: float, evidence: dict[str, Any], severity: str | None = None) -> Finding:
        window_us = max(self.timeline.window_ns / 1e3, 1e-9)
        share = us / window_us
        sev = severity or ("high" if share >= 0.15 else "medium" if share >= 0.05 else "low")
        evidence = {**evidence, "pct_of_window": round(100 * share, 2)}
        return Finding(rule_id, message, float(us), evidence, sev, self.per_step(us))

    def unprofiled_ns(self, host_ns: float, positions: Any) -> float:
        """Host time ``host_ns`` spent in the ops at ``positions`` less what the profiler added
        to it: ``PROFILER_NS_PER_EVENT`` for each event recorded inside them (the ops and all
        they ran) — what the time would be unprofiled, which is what a fix saves."""
        import numpy as np

        from ...hardware import PROFILER_NS_PER_EVENT

        trace = self.trace
        positions = np.asarray(positions, dtype=np.int64)
        if not positions.size:
            return float(host_ns)
        ops = self.facts.get("_ops_by_start")
        if ops is None:
            from ....trace.kinds import EventKind

            sel = np.flatnonzero(trace.kind == EventKind.OP)
            order = np.lexsort((trace.start_ns[sel], trace.thread[sel]))
            sel = sel[order]
            ops = self.facts["_ops_by_start"] = (trace.thread[sel], trace.start_ns[sel])
        threads, starts = ops
        events = 0
        for t in np.unique(trace.thread[positions]).tolist():
            lo_t, hi_t = np.searchsorted(threads, t, "left"), np.searchsorted(threads, t, "right")
            mine = positions[trace.thread[positions] == t]
            a = trace.start_ns[mine]
            b = a + trace.duration_ns[mine]
            run = starts[lo_t:hi_t]
            events += int((np.searchsorted(run, b, "right") - np.searchsorted(run, a, "left")).sum())
        return max(0.0, float(host_ns) - events * PROFILER_NS_PER_EVENT)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


RULES: dict[str, Callable[[Context], list[Finding]]] = {}


def rule(rule_id: str) -> Callable[[Callable[[Context], list[Finding]]], Callable[[Context], list[Finding]]]:
    def register(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        RULES[rule_id] = fn
        return fn

    return register


def run_rules(ctx: Context) -> list[Finding]:
    from . import compile as _compile  # noqa: F401 - the modules register their rules
    from . import communication, elementwise, launch, neuron, precision, roofline, sync, tidy  # noqa: F401

    found: list[Finding] = []
    for rule_id, fn in RULES.items():
        try:
            found.extend(fn(ctx))
        except Exception:  # noqa: BLE001 - one broken rule must not cost the diagnosis
            log.warning("neuronscope: diagnosis rule %s failed", rule_id, exc_info=True)
    found.sort(key=lambda f: (-f.us_at_stake, f.rule))
    return found
