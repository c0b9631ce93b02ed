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
    from . import communication, elementwise, launch, neuron, precision, sync, tidy  # noqa: F401

    found: list[Finding] = []
    for rule_id, fn in RULES.items():
        try:
            found.extend(fn(ctx))
        except Exception:  # noqa: BLE001 - one broken rule must not cost the diagnosis
            log.warning("neuronscope: diagnosis rule %s failed", rule_id, exc_info=True)
    found.sort(key=lambda f: (-f.us_at_stake, f.rule))
    return found
