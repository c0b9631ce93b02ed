"""Ops far below the device's roofs (``record_shapes=True``; :mod:`...roofline`).

Two figures, kept apart:

* **the gap to the limit** (``Finding.us_to_limit``): the op's time beyond what its work takes
  at the roof — the most any kernel doing the same work could save. Shown, never ranked by: no
  real kernel reaches every roof, and a measured CPU roof is a best case.
* **the expected saving** (``us_at_stake``), from a model of the fix: another op of this very
  run, on the same roof (the same dtype's compute peak, or the same memory level), reaches a
  higher share of it — a kernel as good as that one would do this op's work at that rate
  (``evidence["at_stake_model"]``). Where no op of the run does better, nothing is claimed.

An op at 70 % of its roof or more (and not above it: ``Roofline.at_limit``) is at the limit: only less work or a
lower precision makes it faster, and it is named in the notes instead. An op above its roof
(its data was already in a faster level than the one its size suggests) is never "at the
limit". Fusion or a lower precision removes work, so it can save more than either figure
(``elementwise_chain`` claims fusion).

The findings follow from the summary alone, so a long run's windows are not added up: the rule
runs again over the run's folded summary (``refold``).
"""

from __future__ import annotations

from typing import Any, Protocol

from ...roofline import AT_LIMIT_PCT
from ...units import format_amount, format_rate, format_us
from . import Context, MessageContext, rule

#: at most this many ops get a finding of their own (the rest are in the roofline table)
MAX_FINDINGS = 3
#: an op's gap to its roof must be at least this share of the window to be a finding
MIN_SHARE = 0.02
#: a peer must hold at least this share of the device time to set the rate an op could reach
PEER_MIN_SHARE = 0.005

_MEMORY_FIX = {
    "elementwise": "fuse the elementwise ops around it into one pass (torch.compile), or move fewer bytes (a lower precision)",
    "reduction": "fuse it with the op that produces its input (torch.compile), or reduce in a lower precision",
    "norm": "use a fused norm kernel (torch.compile, or the framework's fused op) that reads the input once",
    "softmax": "fuse it into the attention (scaled_dot_product_attention) or with its neighbours (torch.compile)",
    "copy": "avoid the copy (keep tensors in the dtype and layout their consumer wants, .contiguous() once)",
    "embedding": "gather fewer or smaller rows (a lower-precision table, deduplicated indices)",
    "gemm": "batch more rows per call: at this intensity the matmul streams its weights for little arithmetic",
    "attention": "use a fused attention kernel (scaled_dot_product_attention) and batch more queries per call",
    "conv": "batch more images per call, or a channels-last layout",
}
#: the frameworks' fused norm ops: a call of one is not told to use a fused norm
_FUSED_NORMS = frozenset(
    "aten::" + n
    for n in "rms_norm _fused_rms_norm layer_norm native_layer_norm group_norm native_group_norm batch_norm "
    "native_batch_norm _batch_norm_impl_index _native_batch_norm_legit".split()
)
_COMPUTE_FIX = {
    "gemm": "a faster kernel: dimensions that are multiples of 64-128, fewer and larger calls",
    "conv": "a faster kernel: channels-last layout, channel counts that are multiples of 8-64",
    "attention": "a fused attention kernel (flash / memory-efficient SDPA)",
}
_LOW_PRECISION = {"gemm": ", {dtype}", "conv": ", {dtype}", "attention": " in {dtype}"}


class _Out(Protocol):
    """Where the rule's findings and notes go: a window's :class:`Context`, or the fold's."""

    @property
    def device(self) -> str: ...
    @property
    def words(self) -> MessageContext: ...

    def finding(
        self,
        rule_id: str,
        message: str | None,
        us: float,
        evidence: dict[str, Any],
        *,
        subject: str = ...,
        us_to_limit: float | None = ...,
    ) -> Any: ...

    def note(self, text: str) -> None: ...


def _message(ev: dict[str, Any], words: MessageContext) -> str:
    calls = ev["calls"]
    per = f", {calls / words.steps:.3g} calls a step" if words.steps else f", {calls} calls"
    pct, level = ev["pct_of_roof"], ev.get("memory_level")
    if ev["bound"] == "memory":
        roof = f"the {level} bandwidth" if level else "memory bandwidth"
        what = f"moves {format_amount(ev['bytes'], 'B')} at {format_rate(ev['bytes'] / max(ev['time_us'], 1e-9) * 1e6, 'B/s')} = {pct:.0f}% of {roof}"
    else:
        rate = format_rate(ev["flops"] / max(ev["time_us"], 1e-9) * 1e6, "FLOP/s")
        what = f"does {format_amount(ev['flops'], 'FLOP')} at {rate} = {pct:.0f}% of the {ev['dtype']} peak"
    peer = ev.get("peer")
    if peer:
        model = (
            f"{peer} reaches {ev['peer_pct_of_roof']:.0f}% of the same roof in this run: at that rate it would take "
            f"{format_us(ev['expected_time_us'])} of {format_us(ev['time_us'])}"
        )
    else:
        model = f"no op of this run does better on this roof; at the roof it would take {format_us(ev['time_at_roof_us'])} of {format_us(ev['time_us'])}"
    return f"{ev['op']} {what}{per}: {ev['fix']} ({model})"


def _refold(summary: Any, out: Any) -> list:
    return roofline_findings(summary, out)


@rule("below_roof", message=_message, refold=_refold)
def below_roof(ctx: Context) -> list:
    return roofline_findings(ctx.summary, ctx)


def roofline_findings(summary: Any, out: _Out) -> list:
    """The findings (and the at-the-limit note) for ``summary``'s rows with a roofline."""
    if summary is None or not any(r.work is not None for r in summary.rows):
        return []
    limits = summary.limits
    if limits is None:
        out.note("roofline: unknown device: give its limits with ns.configure(device_limits=...) (docs/roofline.md)")
        return []
    scored = [r for r in summary.rows if r.roofline is not None]
    note = limit_note(scored)
    if note:
        out.note(note)
    window_us = max(out.words.window_us, 1e-9)
    total_us = sum(r.roofline.time_us for r in scored) or 1e-9
    below = [r for r in scored if r.roofline.pct_of_roof < AT_LIMIT_PCT and r.roofline.time_at_stake_us >= MIN_SHARE * window_us]
    candidates = []
    for r in below:
        peer = _best_peer(r, scored, total_us)
        expected = r.roofline.time_at_roof_us / (min(peer.roofline.pct_of_roof, 100.0) / 100.0) if peer else None
        saving = max(r.roofline.time_us - expected, 0.0) if expected is not None else 0.0
        candidates.append((saving, r, peer, expected))
    candidates.sort(key=lambda c: (-c[0], -c[1].roofline.time_at_stake_us))
    return [_finding(out, r, peer, expected, saving, limits) for saving, r, peer, expected in candidates[:MAX_FINDINGS]]


def limit_note(scored: list) -> str | None:
    """``at the device's limit (>= 70% of the roof): aten::mul (83%), ...``: the ops between 70 %
    of their roof and the roof, most time first (above it an op is not at any limit)."""
    at_limit = [r for r in scored if r.roofline.at_limit]
    if not at_limit:
        return None
    names = ", ".join(
        f"{r.name} ({r.roofline.pct_of_roof:.0f}%)" for r in sorted(at_limit, key=lambda r: -r.roofline.time_us)[:3]
    )
    return f"at the device's limit (>= {AT_LIMIT_PCT:.0f}% of the roof): {names}: only less work or a lower precision makes them faster"


def _roof_key(r: Any) -> tuple[str, str]:
    rf = r.roofline
    return (rf.bound, getattr(rf, "memory_level", None) or "memory") if rf.bound == "memory" else (rf.bound, rf.dtype)


def _best_peer(r: Any, scored: list, total_us: float) -> Any:
    """The op of the run that reaches the highest share of the same roof (and more than ``r``)."""
    key = _roof_key(r)
    peers = [
        p
        for p in scored
        if p is not r
        and _roof_key(p) == key
        and p.calls >= 2
        and p.roofline.time_us >= PEER_MIN_SHARE * total_us
        and p.roofline.pct_of_roof > r.roofline.pct_of_roof
    ]
    return max(peers, key=lambda p: min(p.roofline.pct_of_roof, 100.0), default=None)


def _finding(out: _Out, r: Any, peer: Any, expected: float | None, saving: float, limits: Any) -> Any:
    rf, work = r.roofline, r.work
    family = work.family if work is not None else ""
    if rf.bound == "memory" and r.name in _FUSED_NORMS:
        # already the framework's fused op: not told to use it (issue 37)
        fix = "the framework's fused norm already: torch.compile the code around it (to fuse it with its neighbours), or move fewer bytes (a lower precision)"
    elif rf.bound == "memory":
        fix = _MEMORY_FIX.get(family, "move fewer bytes, or fuse it with its neighbours")
    else:
        fix = _COMPUTE_FIX.get(family, "a faster kernel for this op") + _low_precision(family, out.device, limits)
    evidence = {
        "op": r.name,
        "bound": rf.bound,
        "dtype": rf.dtype,
        "memory_level": getattr(rf, "memory_level", None),
        "pct_of_roof": round(rf.pct_of_roof, 2),
        "time_us": round(rf.time_us, 3),
        "time_at_roof_us": round(rf.time_at_roof_us, 3),
        "flops": rf.flops,
        "bytes": rf.bytes,
        "calls": rf.calls,
        "device": limits.name,
        "fix": fix,
        "peer": peer.name if peer is not None else None,
        "peer_pct_of_roof": round(min(peer.roofline.pct_of_roof, 100.0), 2) if peer is not None else None,
        "expected_time_us": round(expected, 3) if expected is not None else None,
        "at_stake_model": (
            "peer_rate: the op's work at the share of the same roof the run's best op on it reaches"
            if peer is not None
            else "none: no op of the run does better on this roof; only the gap to the roof is shown"
        ),
    }
    return out.finding("below_roof", None, saving, evidence, subject=r.name, us_to_limit=rf.time_at_stake_us)


def _low_precision(family: str, device: str, limits: Any) -> str:
    """The lower-precision advice, where the device has matrix units for it: on a CPU only when its
    measured bf16 matmul is clearly faster than fp32 (AMX, AVX512-BF16); never on one without."""
    template = _LOW_PRECISION.get(family)
    if template is None:
        return ""
    if not limits.has_bf16_matrix_units:
        return ""
    if device != "cpu":
        return template.format(dtype="a tensor-core dtype (bf16)")
    return template.format(dtype=f"bf16 (this CPU's bf16 matmul measured {limits.matrix_speedup('bf16'):.1f}x its fp32)")
