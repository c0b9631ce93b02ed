"""The diagnosis as the 3-5 lines every summary starts with (``print(run.diagnosis)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .text import format_us

if TYPE_CHECKING:
    from ..analysis.diagnosis.model import Diagnosis, Finding

__all__ = ["CLASS_WORDS", "VERDICT_WORDS", "finding_line", "headline"]

VERDICT_WORDS = {
    "device": "device-bound",
    "host": "host-bound",
    "launch": "launch-bound",
    "sync": "sync-bound",
    "data": "data-bound",
    "compile": "compile-bound",
}
#: what each idle class means, in the words of the verdict line
CLASS_WORDS = {
    "host_wait": "the host busy elsewhere between ops (Python, other ops)",
    "launch": "launch/dispatch time between short ops",
    "sync": "host-device syncs (.item(), .cpu(), synchronize) draining the queue",
    "data": "waiting for data loading",
    "compile": "compilation inside the profile",
    "other": "the device waiting with work already queued",
}


def _what(d: "Diagnosis") -> str:
    return "CPU ops busy" if d.timeline == "cpu_main_thread" else f"{d.device} busy"


def finding_line(f: "Finding") -> str:
    stake = format_us(f.us_at_stake)
    per = f", {format_us(f.us_per_step)}/step" if f.us_per_step is not None and f.us_at_stake > 0 else ""
    at = f" (~{stake}{per} at stake)" if f.us_at_stake > 0 else ""
    return f"[{f.rule}] {f.message}{at}"


def headline(d: "Diagnosis") -> list[str]:
    lines: list[str] = []
    where = " of the main thread (no accelerator)" if d.timeline == "cpu_main_thread" else ""
    verdict = VERDICT_WORDS.get(d.bound_by, d.bound_by)
    idle_total = sum(d.idle_us_by_class.values())
    if d.bound_by == "device":
        why = f"busy >= {d.evidence.get('device_bound_at_pct', 80):.0f}% of the window"
    else:
        top = max(d.idle_us_by_class, key=lambda c: d.idle_us_by_class[c])
        share = 100 * d.idle_us_by_class[top] / idle_total if idle_total else 0.0
        why = f"{share:.0f}% of idle time is {CLASS_WORDS.get(top, top)}"
    lines.append(f"{_what(d)} {d.device_busy_pct:.0f}%{where} over {format_us(d.window_us)} — {verdict}: {why}")
    parts = [(c, us) for c, us in sorted(d.idle_us_by_class.items(), key=lambda kv: -kv[1]) if us > 0]
    if parts:
        shown = " · ".join(f"{c} {format_us(us)}" for c, us in parts[:4])
        lines.append(f"idle {format_us(d.device_idle_us)}: {shown}; {d.gaps.count} gaps >= {d.gaps.threshold_us:g}us")
    if d.steps is not None and d.steps.count:
        s = d.steps
        slow = s.slowest
        slow_txt = f", slowest #{s.slowest_index} {format_us(s.max_us)}" + (f" ({VERDICT_WORDS.get(slow.bound_by, slow.bound_by)})" if slow else "")
        lines.append(
            f"{s.count} steps ({s.name}): p50 {format_us(s.p50_us)}, p90 {format_us(s.p90_us)}, p99 {format_us(s.p99_us)}{slow_txt}"
        )
    if d.findings:
        more = f" (+{len(d.findings) - 1} more)" if len(d.findings) > 1 else ""
        lines.append("top finding: " + finding_line(d.findings[0]) + more)
    elif d.gaps.top:
        g = d.gaps.top[0]
        src = f" at {g.source}" if g.source else ""
        lines.append(f"longest gap {format_us(g.duration_us)} ({g.cls}){src}")
    # the memory verdict comes last, whatever the time verdict took
    return lines[:5] + ([d.memory_line] if d.memory_line else [])
