"""What ``neuronscope show`` prints first for a run captured on demand: the trigger, then
why it was slower than its baseline (the explanation ``neuronscope diff`` prints)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

__all__ = ["trigger_lines", "trigger_renderable"]


def trigger_lines(manifest: dict[str, Any], top: int = 8, labels: dict[str, str] | None = None) -> list[str]:
    """Plain lines (empty when the run was not captured by a trigger or by arming)."""
    trig = manifest.get("trigger")
    if not isinstance(trig, dict):
        return []
    kind = {"slow": "slow call", "arm": "armed"}.get(str(trig.get("kind")), str(trig.get("kind")))
    lines = [f"Triggered ({kind}): {trig.get('reason', '')}"]
    link = trig.get("link")
    if isinstance(link, dict):
        lines.append(f"  the slow call's span: trace {link.get('trace_id')} span {link.get('span_id')}")
    explanation = manifest.get("explanation")
    if isinstance(explanation, dict):
        from .._trigger import explanation_from_dict
        from ..analysis.units import format_us

        try:
            e = explanation_from_dict(explanation)
        except (KeyError, TypeError, ValueError):
            return lines + ["  (the saved explanation is unreadable)"]
        sign = "slower" if e.delta_us > 0 else "faster"
        pct = f" ({100 * e.delta_us / e.a_us:+.1f}%)" if e.a_us else ""
        lines.append(
            f"Why: {format_us(abs(e.delta_us))} {sign} than the baseline{pct}: {format_us(e.a_us)} -> {format_us(e.b_us)}"
        )
        if manifest.get("baseline"):
            lines.append(f"  baseline: {manifest['baseline']}")
        lines.extend(e.lines(top=top, labels=labels)[1:])
    elif trig.get("kind") == "slow":
        lines.append("  no baseline yet to compare with (a normal call is profiled after half of min_calls)")
    return lines


def trigger_renderable(manifest: dict[str, Any], top: int = 8, labels: dict[str, str] | None = None) -> Text | None:
    lines = trigger_lines(manifest, top, labels)
    if not lines:
        return None
    text = Text()
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        bold = line.startswith(("Triggered", "Why"))
        text.append(line, style="bold yellow" if bold else "")
    return text
