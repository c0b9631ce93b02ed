"""``Comparison``, what ``ns.compare`` returns: per variant its unprofiled step time (median and
interval), speed-up over the baseline, compile time, device time, share of the roof, top op and
verdict, and against the baseline the explained difference.

It renders itself: ``print(c)`` (the table, then each variant's difference from the baseline),
``c._repr_html_()`` in a notebook, ``c.to_pandas()``, ``c.to_dict()`` / ``c.to_json()``, and
``c.write_html(path)``, the HTML report (:mod:`.comparison_page`) with each variant's run.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._run import Run
from ..analysis.explain import Explanation
from ..analysis.roofs import DeviceLimits
from ..analysis.units import format_us, size_text
from ..analysis.variants import Interval, RoofShare, StepWork

__all__ = ["COLUMNS", "COMPARISON_SCHEMA_VERSION", "TEXT_COLUMNS", "Comparison", "VariantResult"]

#: version of :meth:`Comparison.to_dict`'s layout; bumped on any incompatible change
COMPARISON_SCHEMA_VERSION = 1


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class VariantResult:
    """One variant of a :class:`Comparison`. Times in seconds unless the name says ``_us``."""

    name: str
    baseline: bool
    #: the unprofiled time of one call: median and interval (None: not timed, it failed)
    step: Interval | None
    samples: tuple[float, ...]  #: the timed samples, seconds per call, in the order taken
    calls_per_sample: int  #: back-to-back calls each sample timed
    samples_per_round: int  #: samples each turn took, back to back, after one untimed call
    #: calls of the first rounds, dropped when the samples were sized again (load during the warm-up)
    discarded_calls: int
    #: times faster than the baseline: (ratio of the medians, low, high) — the range the two
    #: intervals allow; None for the baseline and for what was not timed
    speedup: tuple[float, float, float] | None
    error: str | None  #: the variant raised (it is in no other column)
    mismatch: str | None  #: its output differs from the baseline's (assert_close's message)
    warmup_calls: int
    first_call_s: float
    #: what the first call and any call that compiled took beyond a steady call (Dynamo,
    #: Inductor, a Neuron NEFF; also first-touch costs of a variant that compiles nothing)
    compile_s: float
    compiled: bool  #: torch.compile (Dynamo) compiled a frame during the warm-up
    roof: RoofShare | None  #: the operation's work at the roofs over its step time
    run: Run | None  #: its profile (``steps`` calls, shapes recorded); None when not profiled
    steps: int  #: calls in that profile
    explanation: Explanation | None  #: from the baseline's profile to this one's, per step
    ops_removed: tuple[str, ...] = ()  #: ops the baseline's profile ran and this one's did not
    ops_added: tuple[str, ...] = ()  #: ops only this one's profile ran

    @property
    def significant(self) -> bool:
        """Its interval and the baseline's do not overlap (the speed-up's range excludes 1)."""
        return self.speedup is not None and not self.speedup[1] <= 1.0 <= self.speedup[2]

    @property
    def verdict(self) -> str:
        """``baseline``, ``2.41x faster``, ``1.30x slower``, ``no significant difference``,
        ``wrong result`` (never a win), ``failed``, or ``not timed``."""
        if self.error is not None:
            return "failed"
        if self.mismatch is not None:
            return "wrong result"
        if self.baseline:
            return "baseline"
        if self.step is None or self.speedup is None:
            return "not timed" if self.step is None else "no baseline to compare with"
        if not self.significant:
            return "no significant difference"
        point = self.speedup[0]
        return f"{point:.2f}x faster" if point >= 1 else f"{1 / point:.2f}x slower"

    @property
    def summary(self) -> Any:
        return self.run.summary if self.run is not None else None

    @property
    def diagnosis(self) -> Any:
        return self.run.diagnosis if self.run is not None else None

    @property
    def path(self) -> Path | None:
        """Its run directory (``neuronscope show``/``diff``/``report`` read it)."""
        return self.run.path if self.run is not None else None

    @property
    def device_time_us(self) -> float | None:
        """Device time per profiled call (the profile's self device time over its steps)."""
        s = self.summary
        return s.total_device_time_us / self.steps if s is not None and self.steps else None

    @property
    def top_op(self) -> tuple[str, str, float] | None:
        """The op with the most device time in its profile: (name, label, % of device time)."""
        s = self.summary
        rows = [r for r in s.rows if not r.compile] if s is not None else []
        return (rows[0].name, s.label(rows[0].name), rows[0].device_pct) if rows else None

    @property
    def bound_by(self) -> str | None:
        """The profile's verdict (``device``, ``host``...: :class:`~neuronscope.Diagnosis`)."""
        d = self.diagnosis
        return d.bound_by if d is not None else None

    def cells(self) -> list[tuple[str, str, float | None]]:
        """The table's row for this variant: (header, text, sort value) per column."""
        return [(header, text(self), value(self) if value is not None else None) for header, text, value in COLUMNS]

    def to_dict(self) -> dict[str, Any]:
        top = self.top_op
        return {
            "name": self.name,
            "baseline": self.baseline,
            "verdict": self.verdict,
            "significant": self.significant,
            "step_s": self.step.to_dict() if self.step is not None else None,
            "samples_s": list(self.samples),
            "calls_per_sample": self.calls_per_sample,
            "samples_per_round": self.samples_per_round,
            "discarded_calls": self.discarded_calls,
            "speedup": dict(zip(("point", "low", "high"), self.speedup)) if self.speedup is not None else None,
            "error": self.error,
            "mismatch": self.mismatch,
            "warmup": {
                "calls": self.warmup_calls,
                "first_call_s": self.first_call_s,
                "compile_s": self.compile_s,
                "compiled": self.compiled,
            },
            "device_time_us_per_step": self.device_time_us,
            "top_op": {"name": top[0], "label": top[1], "device_pct": round(top[2], 3)} if top else None,
            "bound_by": self.bound_by,
            "roof": self.roof.to_dict() if self.roof is not None else None,
            "run_path": str(self.path) if self.path is not None else None,
            "steps": self.steps,
            "ops_removed": list(self.ops_removed),
            "ops_added": list(self.ops_added),
            "explanation": self.explanation.to_dict() if self.explanation is not None else None,
        }


# -- the cells every rendering shows ----------------------------------------------------------------
def _s(seconds: float) -> str:
    return format_us(seconds * 1e6)


def step_text(v: VariantResult) -> str:
    return _s(v.step.median) if v.step is not None else "-"


def interval_text(v: VariantResult) -> str:
    return f"[{_s(v.step.low)}, {_s(v.step.high)}]" if v.step is not None else "-"


def speedup_text(v: VariantResult) -> str:
    if v.baseline:
        return "1 (baseline)"
    if v.speedup is None:
        return "-"
    point, low, high = v.speedup
    return f"{point:.2f}x [{low:.2f}, {high:.2f}]"


def compile_text(v: VariantResult) -> str:
    if not v.warmup_calls:
        return "-"
    return _s(v.compile_s) + (" (Dynamo)" if v.compiled else "")


def device_text(v: VariantResult) -> str:
    us = v.device_time_us
    return format_us(us) if us is not None else "-"


def roof_text(v: VariantResult) -> str:
    r = v.roof
    if r is None:
        return "-"
    where = r.level if r.bound == "memory" and r.level else r.bound
    pct = f"{r.pct:.0f}" if r.pct >= 99.5 else f"{r.pct:.1f}" if r.pct >= 0.995 else f"{r.pct:.2g}"
    return f"{pct}% {where}"


def top_text(v: VariantResult, width: int = 34) -> str:
    top = v.top_op
    return f"{_short(top[1], width)} {top[2]:.0f}%" if top else "-"


def _speedup_value(v: VariantResult) -> float | None:
    return v.speedup[0] if v.speedup is not None else (1.0 if v.baseline and v.step is not None else None)


#: (header, text, sort value) of the table's columns, in order; the terminal, the notebook and
#: the HTML page (through :meth:`VariantResult.cells`) share them
COLUMNS: tuple[tuple[str, Callable[[VariantResult], str], Callable[[VariantResult], float | None] | None], ...] = (
    ("variant", lambda v: v.name, None),
    ("step time", step_text, lambda v: v.step.median if v.step is not None else None),
    ("interval", interval_text, lambda v: v.step.high - v.step.low if v.step is not None else None),
    ("speed-up", speedup_text, _speedup_value),
    ("compile", compile_text, lambda v: v.compile_s if v.warmup_calls else None),
    ("device/step", device_text, lambda v: v.device_time_us),
    ("% of roof", roof_text, lambda v: v.roof.pct if v.roof is not None else None),
    ("top op (profile)", top_text, None),
    ("verdict", lambda v: v.verdict, None),
)
#: the columns read left to right (names, words); the others are figures
TEXT_COLUMNS = (0, 7, 8)


@dataclass(frozen=True)
class Comparison:
    """What ``ns.compare`` measured: one :class:`VariantResult` per variant, the first the
    baseline. ``c["name"]`` is one variant; ``c.runs`` their profiles."""

    variants: tuple[VariantResult, ...]
    baseline: str
    device: str
    confidence: float  #: of the step-time intervals asked for
    rounds: int  #: interleaved timing rounds (one sample of each variant per round)
    timing_s: float  #: how long the timing took
    steps: int  #: calls per profile (0: not profiled)
    work: StepWork | None  #: the operation's work per call the roof share is computed from
    limits: DeviceLimits | None  #: the roofs
    notes: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"no variant named {name!r}; variants: {[v.name for v in self.variants]}")

    def __iter__(self) -> Any:
        return iter(self.variants)

    def __len__(self) -> int:
        return len(self.variants)

    @property
    def runs(self) -> dict[str, Run]:
        """Each profiled variant's run (``ns.load_run``-able from ``run.path``)."""
        return {v.name: v.run for v in self.variants if v.run is not None}

    # -- text -----------------------------------------------------------------------------------
    def headline(self) -> str:
        level = f"{100 * self.confidence:g}%"
        return (
            f"ns.compare: {len(self.variants)} variants on {self.device}, baseline {self.baseline}; step time: median of "
            f"{self.rounds} interleaved unprofiled rounds, {level} interval"
        )

    def table(self) -> str:
        """The comparison table (one line per variant)."""
        body = [tuple(text(v) for _, text, _ in COLUMNS) for v in self.variants]
        header = tuple(h for h, _, _ in COLUMNS)
        widths = [max(len(header[i]), *(len(b[i]) for b in body)) for i in range(len(header))]

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(
                c.ljust(w) if i in TEXT_COLUMNS else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([rule, line(header), rule, *(line(b) for b in body), rule])

    def differences(self, top: int = 5) -> list[str]:
        """Each variant against the baseline: the ops only one of them ran, then where the
        profiled step time went (``neuronscope diff``'s explanation, per step)."""
        out: list[str] = []
        base = self[self.baseline]
        for v in self.variants:
            if v.baseline or v.explanation is None:
                continue
            where = f"  (neuronscope diff {base.path} {v.path})" if base.path is not None and v.path is not None else ""
            out.append(f"{self.baseline} -> {v.name}, per profiled step:{where}")
            if v.ops_removed or v.ops_added:
                out.append(f"  ops gone: {_listed(v.ops_removed)}; new: {_listed(v.ops_added)}")
            out += ["  " + line for line in self.explanation_lines(v.name, top)]
        return out

    def explanation_lines(self, name: str, top: int = 5) -> list[str]:
        """Variant ``name``'s explanation against the baseline (what ``neuronscope diff`` prints),
        the two variants named instead of A and B; [] without one."""
        v = self[name]
        return _named(v.explanation.lines(top=top), self.baseline, name) if v.explanation is not None else []

    def footer(self) -> list[str]:
        """How each column was measured, the work and roofs, and what went wrong."""
        turns = ", ".join(f"{v.name} {v.samples_per_round}x{v.calls_per_sample}" for v in self.variants if v.step is not None)
        lines = [
            f"step time: unprofiled, the device synchronised around each sample; {self.rounds} rounds in "
            f"{self.timing_s:.1f}s, each variant's turn an untimed call then samples x calls: {turns or '-'}; "
            "interval: order statistics of the median",
            "speed-up: baseline median / variant median, [range the two intervals allow]; no significant difference "
            "when the intervals overlap",
            "compile: the warm-up calls' time beyond a steady call (first call, and any that compiled)",
        ]
        if self.steps:
            lines.append(f"device/step, top op: from each variant's profile ({self.steps} calls, shapes recorded)")
        if self.work is not None:
            roofs = f" against {self.limits.line()}" if self.limits is not None else " (no roofs known for this device)"
            lines.append(
                f"% of roof: the time the operation's work takes at the roof / step time; work: {self._work_text()}{roofs}"
            )
        for v in self.variants:
            if v.error is not None:
                lines.append(f"{v.name} failed: {_short(v.error, 300)}")
            elif v.mismatch is not None:
                lines.append(f"{v.name}: its result differs from {self.baseline}'s: {v.mismatch}")
        return lines + [f"note: {n}" for n in self.notes]

    def _work_text(self) -> str:
        w = self.work
        if w is None:
            return "-"
        parts = ([size_text(w.bytes)] if w.bytes else []) + ([f"{w.flops:.3g} FLOPs"] if w.flops else [])
        return f"{' + '.join(parts)} a call ({w.source})" if w.source else f"{' + '.join(parts)} a call"

    def lines(self) -> list[str]:
        return [self.headline(), self.table(), *self.differences(), *self.footer()]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        verdicts = ", ".join(f"{v.name}: {v.verdict}" for v in self.variants)
        return f"<neuronscope.Comparison baseline={self.baseline!r} device={self.device!r} ({verdicts})>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's terminal: what print() shows
        p.text(str(self))

    # -- data -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "baseline": self.baseline,
            "device": self.device,
            "confidence": self.confidence,
            "rounds": self.rounds,
            "timing_s": self.timing_s,
            "steps": self.steps,
            "work": self.work.to_dict() if self.work is not None else None,
            "limits": self.limits.to_dict() if self.limits is not None else None,
            "notes": list(self.notes),
            "variants": [v.to_dict() for v in self.variants],
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(_finite(self.to_dict()), **kwargs)

    def to_pandas(self) -> Any:
        """One row per variant: ``name``, ``verdict``, ``step_median_s``, ``step_low_s``,
        ``step_high_s``, ``speedup`` (and ``_low``/``_high``), ``significant``, ``compile_s``,
        ``device_time_us``, ``roof_pct``, ``top_op``, ``bound_by``, ``result_matches``, ``run_path``..."""
        from ..analysis.notebook import import_pandas

        return import_pandas().DataFrame.from_records([_record(v) for v in self.variants], columns=list(_RECORD_COLUMNS))

    # -- HTML -----------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        """What Jupyter shows: the table and, folded, each variant's difference from the baseline."""
        from ..analysis.notebook import muted_line, notebook_block, notebook_table

        rows = [
            f'<tr data-variant="{html.escape(v.name)}">'
            + "".join(
                f'<td class="t">{html.escape(text)}</td>' if i in TEXT_COLUMNS else f"<td>{html.escape(text)}</td>"
                for i, (_, text, _) in enumerate(v.cells())
            )
            + "</tr>"
            for v in self.variants
        ]
        body = f'<p class="line"><b>{html.escape(self.headline())}</b></p>'
        body += notebook_table("compare", [h for h, _, _ in COLUMNS], rows)
        diffs = self.differences()
        if diffs:
            body += "<details><summary>why they differ</summary><pre>" + html.escape("\n".join(diffs)) + "</pre></details>"
        body += "".join(muted_line(line) for line in self.footer())
        return notebook_block("compare", body)

    def html(self, **kwargs: Any) -> str:
        """The HTML report: the table, a chart of the step times, the differences, each run."""
        from .comparison_page import render_comparison

        return render_comparison(self, **kwargs)

    def write_html(self, path: str | os.PathLike[str], **kwargs: Any) -> Path:
        """Write :meth:`html` to ``path`` (links to the runs' files relative to it)."""
        target = Path(path)
        kwargs.setdefault("link_base", target.parent if str(target.parent) else Path("."))
        target.write_text(self.html(**kwargs), encoding="utf-8")
        return target


def _named(lines: list[str], a: str, b: str) -> list[str]:
    """The explanation's first line names the two variants instead of A and B."""
    if lines and lines[0].startswith("B is "):
        lines = [lines[0].replace("B is ", f"{b} is ", 1).replace(" than A", f" than {a}", 1), *lines[1:]]
    return lines


def _listed(names: tuple[str, ...], n: int = 4) -> str:
    if not names:
        return "-"
    shown = ", ".join(_short(x, 48) for x in names[:n])
    return shown + (f" (+{len(names) - n} more)" if len(names) > n else "")


def _finite(obj: Any) -> Any:
    """JSON has no infinity: an unbounded speed-up (a zero time) is written as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


_RECORD_COLUMNS = (
    "name",
    "baseline",
    "verdict",
    "significant",
    "step_median_s",
    "step_low_s",
    "step_high_s",
    "speedup",
    "speedup_low",
    "speedup_high",
    "compile_s",
    "compiled",
    "device_time_us",
    "roof_pct",
    "roof_bound",
    "roof_level",
    "top_op",
    "top_op_pct",
    "bound_by",
    "result_matches",
    "error",
    "run_path",
)


def _record(v: VariantResult) -> dict[str, Any]:
    step, sp, roof, top = v.step, v.speedup, v.roof, v.top_op
    nan = float("nan")
    return {
        "name": v.name,
        "baseline": v.baseline,
        "verdict": v.verdict,
        "significant": v.significant,
        "step_median_s": step.median if step else nan,
        "step_low_s": step.low if step else nan,
        "step_high_s": step.high if step else nan,
        "speedup": sp[0] if sp else (1.0 if v.baseline and step else nan),
        "speedup_low": sp[1] if sp else nan,
        "speedup_high": sp[2] if sp else nan,
        "compile_s": v.compile_s if v.warmup_calls else nan,
        "compiled": v.compiled,
        "device_time_us": v.device_time_us if v.device_time_us is not None else nan,
        "roof_pct": roof.pct if roof else nan,
        "roof_bound": roof.bound if roof else None,
        "roof_level": roof.level if roof else None,
        "top_op": top[1] if top else None,
        "top_op_pct": top[2] if top else nan,
        "bound_by": v.bound_by,
        "result_matches": None if v.error is not None else v.mismatch is None,
        "error": v.error,
        "run_path": str(v.path) if v.path is not None else None,
    }
