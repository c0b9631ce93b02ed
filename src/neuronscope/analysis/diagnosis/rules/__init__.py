"""The advisor: rules that turn a diagnosed timeline into advice with the time at stake.

A rule is a function ``rule(ctx) -> list[Finding]`` registered with :func:`rule`. Each has a
stable id (the ``Finding.rule``), reads only the context (trace model, timeline, summary,
steps, run facts) and returns nothing when its input is missing (it then says what to
enable in ``ctx.notes``). Rules never raise into the pipeline: a failing rule is logged and
skipped.

A finding's message is rendered from its evidence by the rule's ``message`` function, and the
evidence keys in ``adds`` are amounts (counts, times): a long run's windows then fold into one
finding per (rule, subject) whose message, evidence and time at stake are the run's
(analysis/fold.py). A rule whose findings follow from the summary alone (``below_roof``) gives
``refold`` instead: the fold runs it again over the run's folded summary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import Finding

__all__ = [
    "Context",
    "MessageContext",
    "RULES",
    "SPECS",
    "RuleSpec",
    "RunContext",
    "load_rules",
    "make_finding",
    "rule",
    "run_rules",
]

log = logging.getLogger("neuronscope")


@dataclass(frozen=True)
class MessageContext:
    """What a finding's message may quote besides its evidence: the recorded time and steps
    (of one window, or of the whole run once folded)."""

    window_us: float
    steps: int

    def per_step(self, amount: float) -> float | None:
        return amount / self.steps if self.steps else None


@dataclass
class Context:
    trace: Any  # Trace
    timeline: Any  # Timeline
    summary: Any  # Summary | None
    steps: int  # number of steps (0: none found)
    facts: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    communication: Any = None  # Communication | None
    contention: Any = None  # CpuContention | None: the profiled thread waited for a CPU

    @property
    def device(self) -> str:
        return self.trace.device

    @property
    def words(self) -> MessageContext:
        return MessageContext(self.timeline.window_ns / 1e3, self.steps)

    @property
    def quiet_window_ns(self) -> float:
        """The window less the time the thread waited for a core (its run-queue wait over the
        capture's wall time): the run a share-of-the-run bar is judged against. Under CPU
        contention the window is longer by that wait while what a fix saves is not (an
        optimizer step's claim, trimmed of preemptions, fell under 2 % of a window that two
        busy processes had doubled). The window itself when not contended."""
        c = self.contention
        if c is None or not c.contended or c.wall_us <= 0:
            return float(self.timeline.window_ns)
        return self.timeline.window_ns * max(1 - c.wait_us / c.wall_us, 0.0)

    def per_step(self, us: float) -> float | None:
        return us / self.steps if self.steps else None

    def finding(
        self,
        rule_id: str,
        message: str | None,
        us: float,
        evidence: dict[str, Any],
        severity: str | None = None,
        *,
        subject: str = "",
        us_to_limit: float | None = None,
        host_side: bool = True,
        trimmed: bool = False,
    ) -> Finding:
        """A finding; ``message=None`` renders it from the evidence with the rule's ``message``.
        ``host_side``: the claim is host or CPU time, which contention inflates (deflated to the
        thread's time on a CPU, and marked). ``trimmed``: the rule built the claim from per-call
        times with the preempted calls cut back (:meth:`trimmed_ns`): it is not scaled again."""
        return make_finding(
            rule_id,
            message,
            us,
            evidence,
            words=self.words,
            device=self.device,
            contention=self.contention,
            severity=severity,
            subject=subject,
            us_to_limit=us_to_limit,
            host_side=host_side,
            trimmed=trimmed,
        )

    def trimmed_ns(self, durations: Any, keys: Any, *, min_calls: int) -> Any:
        """Per-call times without the time slices other processes took, on a contended CPU: a
        preemption lands whole in one call (milliseconds in a microsecond op), so each call counts
        at most ``PREEMPTED_OVER_MEDIAN`` times the median of the calls with its key -- calls
        that do the same work (an op on the same tensor, step after step); a key of fewer than
        ``min_calls`` calls is kept as it is. Unchanged when the CPU was not contended. (A uniform
        scaling by the runnable share would also shrink the calls that were never preempted: an
        optimizer step's claim read 0.49-0.70x of its quiet value that way, beside two CPU
        burners; keyed by op name alone, an MLP's weight updates were cut to 3x its bias
        updates' median: 0.4x.)"""
        durations = np.asarray(durations, dtype=np.float64)
        if self.contention is None or not self.contention.contended or durations.size == 0:
            return durations
        keys = np.asarray(keys)
        out = durations.copy()
        for key in np.unique(keys):
            mine = keys == key
            if mine.sum() >= min_calls:
                out[mine] = np.minimum(durations[mine], PREEMPTED_OVER_MEDIAN * float(np.median(durations[mine])))
        return out

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


@dataclass
class RunContext:
    """What a rule's ``refold`` writes to when a long run's windows are folded: the run's recorded
    time and steps, and its contention (Context's ``finding``/``note``, without a trace)."""

    device: str
    words: MessageContext
    contention: Any = None
    notes: list[str] = field(default_factory=list)

    def finding(self, rule_id: str, message: str | None, us: float, evidence: dict[str, Any], **kw: Any) -> Finding:
        return make_finding(
            rule_id, message, us, evidence, words=self.words, device=self.device, contention=self.contention, **kw
        )

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def make_finding(
    rule_id: str,
    message: str | None,
    us: float,
    evidence: dict[str, Any],
    *,
    words: MessageContext,
    device: str,
    contention: Any = None,
    severity: str | None = None,
    subject: str = "",
    us_to_limit: float | None = None,
    host_side: bool = True,
    trimmed: bool = False,
) -> Finding:
    """One finding: its claim scaled back where the CPU was contended and the claim is CPU work (a
    host-side claim, or any on a CPU-only run; a wait is marked instead), its severity from its
    share of the recorded time, its message from the evidence (``message=None``) with the rule's
    ``message`` function."""
    effect = _contention_effect(rule_id, device, host_side) if contention is not None and contention.contended else None
    if effect == "scaled" and trimmed:
        evidence = {**evidence, "contended": "trimmed"}
    elif effect == "scaled":
        share = contention.runnable_share
        us *= share
        us_to_limit = None if us_to_limit is None else us_to_limit * share
        evidence = {
            **evidence,
            "contended": "scaled",
            "runnable_share": round(share, 6),
        }  # 6 digits: the claim divided by it is exact to 1e-5
    elif effect == "marked":
        evidence = {**evidence, "contended": "marked"}
    share_of_window = us / max(words.window_us, 1e-9)
    evidence = {**evidence, "pct_of_window": round(100 * share_of_window, 2)}
    spec = SPECS.get(rule_id)
    if spec is not None and spec.model and "at_stake_model" not in evidence:
        evidence = {**evidence, "at_stake_model": spec.model}
    if message is None:
        render = SPECS[rule_id].message
        assert render is not None, f"rule {rule_id} has no message function"
        message = render(evidence, words)
    return Finding(
        rule_id,
        message,
        float(us),
        evidence,
        severity or severity_of(share_of_window),
        words.per_step(us),
        subject=subject,
        us_to_limit=us_to_limit,
    )


def severity_of(share_of_window: float) -> str:
    return "high" if share_of_window >= 0.15 else "medium" if share_of_window >= 0.05 else "low"


#: on a contended CPU, a call counts at most this many times the median of the calls doing the
#: same work (Context.trimmed_ns)
PREEMPTED_OVER_MEDIAN = 3.0

#: the rules whose claims are time the host thread spent running on any device (the Python and
#: dispatch between ops): contention lengthened it
HOST_RULES = frozenset({"launch_bound_loop", "forloop_indexing", "optimizer_single_tensor"})
#: the rules whose claims are time the thread waited (for data, for the device): sleep and I/O that
#: contention does not lengthen, or decoding that it does -- marked, never scaled
WAIT_RULES = frozenset({"sync_dataloader", "data_wait"})


def _contention_effect(rule_id: str, device: str, host_side: bool) -> str | None:
    """How contention bears on a claim: "scaled" (CPU work), "marked" (a wait), or None."""
    if rule_id in WAIT_RULES or (rule_id == "sync_in_loop" and device != "cpu"):
        return "marked"
    if host_side and (device == "cpu" or rule_id in HOST_RULES):
        return "scaled"
    return None


@dataclass(frozen=True)
class RuleSpec:
    """How a rule's findings are worded and folded (see the module doc)."""

    fn: Callable[[Context], list[Finding]]
    #: the message from the evidence and the recorded time/steps (None: the rule words it itself)
    message: Callable[[dict[str, Any], MessageContext], str] | None = None
    #: evidence keys that are amounts: a run's value is the sum of its windows' (dicts add per key)
    adds: tuple[str, ...] = ()
    #: the run's findings from its folded summary, instead of adding the windows': called with the
    #: summary and an object with Context's ``finding``, ``note``, ``words`` and ``device``
    refold: Callable[[Any, Any], list[Finding]] | None = None
    #: how the time at stake is estimated -- the model of the fix -- in short text: every finding's
    #: ``evidence["at_stake_model"]`` (a finding that sets its own keeps it)
    model: str = ""


RULES: dict[str, Callable[[Context], list[Finding]]] = {}
SPECS: dict[str, RuleSpec] = {}


def rule(
    rule_id: str,
    *,
    message: Callable[[dict[str, Any], MessageContext], str] | None = None,
    adds: tuple[str, ...] = (),
    refold: Callable[[Any, Any], list[Finding]] | None = None,
    model: str = "",
) -> Callable[[Callable[[Context], list[Finding]]], Callable[[Context], list[Finding]]]:
    def register(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        RULES[rule_id] = fn
        SPECS[rule_id] = RuleSpec(fn, message, adds, refold, model)
        return fn

    return register


def load_rules() -> dict[str, RuleSpec]:
    """Every rule registered (the modules register theirs when imported)."""
    from . import compile as _compile  # noqa: F401 - the modules register their rules
    from . import classes, communication, elementwise, launch, neuron, precision, roofline, sync, tidy  # noqa: F401

    return SPECS


def run_rules(ctx: Context) -> list[Finding]:
    load_rules()
    found: list[Finding] = []
    for rule_id, fn in RULES.items():
        try:
            found.extend(fn(ctx))
        except Exception:  # noqa: BLE001 - one broken rule must not cost the diagnosis
            log.warning("neuronscope: diagnosis rule %s failed", rule_id, exc_info=True)
    found.sort(key=lambda f: (-f.us_at_stake, f.rule))
    return found
