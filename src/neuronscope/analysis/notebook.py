"""What Jupyter shows for a run, a summary, a diagnosis and a memory report, and their tables as
pandas DataFrames.

``Run._repr_html_``, ``Summary._repr_html_``, ``Diagnosis._repr_html_`` and
``MemoryReport._repr_html_`` call the ``*_html`` functions here (compact tables, every string
escaped, no script); ``Summary.to_pandas()`` and ``Diagnosis.to_pandas(what)`` call the
``*_frame`` ones. The objects are read through their public attributes only: this module
imports none of the classes it renders (they import it, inside their methods), so it lives in
the analysis stage beside them — the report stage is above the analysis and the ``Run``.

pandas is optional (``pip install "neuronscope[notebook]"``); it is imported on the first
``to_pandas()`` call, never at import.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigurationError
from .text import compile_footer, device_cells, split_compile_rows
from .units import format_us

__all__ = [
    "DIAGNOSIS_TABLES",
    "PANDAS_HINT",
    "diagnosis_frame",
    "diagnosis_html",
    "import_pandas",
    "memory_html",
    "muted_line",
    "notebook_block",
    "notebook_table",
    "run_html",
    "summary_frame",
    "summary_html",
]

#: what ``Diagnosis.to_pandas(what=...)`` takes
DIAGNOSIS_TABLES = ("findings", "steps", "gaps")
PANDAS_HINT = 'to_pandas() needs pandas: pip install "neuronscope[notebook]" (or: pip install pandas)'

# Scoped to the wrapper's class; colours inherit the notebook's theme (light or dark), the
# severities are the HTML report's.
_CSS = (
    "<style>"
    ".nsnb{font-size:13px;line-height:1.4}"
    ".nsnb table{border-collapse:collapse;margin:4px 0 6px;font-size:12px}"
    ".nsnb th,.nsnb td{padding:2px 8px;text-align:right;border-bottom:1px solid rgba(128,128,128,.3);white-space:nowrap}"
    ".nsnb th{font-weight:600}"
    ".nsnb .t{text-align:left}"
    ".nsnb td.name{max-width:48ch;overflow:hidden;text-overflow:ellipsis}"
    ".nsnb td.msg{white-space:normal;min-width:30ch}"
    ".nsnb .muted{opacity:.7;font-size:12px;margin:2px 0}"
    ".nsnb .verdict{font-weight:600;margin:2px 0}"
    ".nsnb .line{margin:2px 0}"
    ".nsnb tr.compile td{font-style:italic;opacity:.8}"
    ".nsnb .sev-high{color:#c53030}.nsnb .sev-medium{color:#b7791f}"
    "</style>"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def notebook_block(kind: str, body: str) -> str:
    """``body`` in the notebook view's styled block (here, and ``Comparison._repr_html_``)."""
    return f'{_CSS}<div class="nsnb nsnb-{kind}">{body}</div>'


def notebook_table(kind: str, header: Sequence[str], rows: Sequence[str], left: int = 1) -> str:
    """A table with ``header`` (the first ``left`` columns left-aligned) over ready-made ``<tr>`` rows
    (here, and ``Comparison._repr_html_``)."""
    head = "".join(f'<th class="t">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(header))
    return f'<table class="nsnb-{kind}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def muted_line(text: str, cls: str = "") -> str:
    """``text``, escaped, as a muted line of a notebook view (here, and ``Comparison._repr_html_``)."""
    return f'<p class="muted{" " + cls if cls else ""}">{_e(text)}</p>'


# --- a summary: the op table ------------------------------------------------------------------
def _roof_cell(r: Any) -> str:
    rf = getattr(r, "roofline", None)
    if rf is None:
        return '<td class="roof">-</td>'
    title = f"{rf.bound}-bound, {rf.dtype}" + (", at the limit" if rf.at_limit else "")
    return f'<td class="roof" title="{_e(title)}" data-v="{rf.pct_of_roof:.6g}">{rf.pct_of_roof:.1f}%</td>'


def _op_rows(summary: Any, rows: Sequence[Any], with_roof: bool) -> list[str]:
    out = []
    for r in rows:
        label = summary.label(r.name)
        self_dev, pct, total = device_cells(r)
        cells = (
            f'<td class="t name" title="{_e(r.name)}">{_e(label)}</td><td>{r.calls}</td><td>{_e(self_dev)}</td>'
            f"<td>{_e(pct)}</td><td>{_e(total)}</td><td>{_e(format_us(r.self_cpu_time_us))}</td>"
        )
        if with_roof:
            cells += _roof_cell(r)
        cls = ' class="compile"' if r.compile else ""
        out.append(f'<tr{cls} data-op="{_e(r.name)}">{cells}</tr>')
    return out


def op_table_html(summary: Any, limit: int | None = 20, more_hint: str = "summary.rows has all") -> str:
    """The op table of ``summary`` (no wrapper): its ``limit`` heaviest ops, then compile rows apart."""
    ops, comp = split_compile_rows(summary.rows, limit)
    with_roof = any(getattr(r, "roofline", None) is not None for r in summary.rows)
    header = ["Name", "Calls", "Self device", "Device %", "Device total", "Self CPU"] + (["% of roof"] if with_roof else [])
    table = notebook_table("ops", header, _op_rows(summary, ops + comp, with_roof))
    hidden = len(summary.rows) - len(ops) - len(comp)
    more = muted_line(f"{hidden} more ops ({more_hint})", "more") if hidden > 0 else ""
    return table + more


def summary_html(summary: Any, limit: int | None = 20) -> str:
    """``Summary._repr_html_``: the device, the op table (``limit`` ops), totals, warnings, notes."""
    title = f'<p class="line"><b>{len(summary.rows)} ops</b> on {_e(summary.device)}'
    if summary.device == "cpu":
        title += " (no accelerator: device time = CPU op time)"
    title += f" · self device time {_e(format_us(summary.total_device_time_us))}</p>"
    if not summary.rows:
        return notebook_block("summary", title + muted_line("no ops were recorded"))
    body = title + op_table_html(summary, limit, "summary.rows has all; summary.to_pandas() as a DataFrame")
    footer = compile_footer(summary)
    if footer:
        body += muted_line(footer)
    body += "".join(muted_line(f"warning: {w}", "warning") for w in summary.warnings)
    body += "".join(muted_line(n, "note") for n in summary.notes)
    return notebook_block("summary", body)


# --- a diagnosis: the verdict and every finding -------------------------------------------------
def findings_table_html(findings: Sequence[Any]) -> str:
    rows = [
        f'<tr data-rule="{_e(f.rule)}"><td class="t">{_e(f.rule)}</td><td class="t msg">{_e(f.message)}</td>'
        f"<td>{_e(format_us(f.us_at_stake))}</td>"
        f"<td>{_e(format_us(f.us_per_step)) if f.us_per_step is not None else '-'}</td>"
        f'<td class="t sev-{_e(f.severity)}">{_e(f.severity)}</td></tr>'
        for f in findings
    ]
    return notebook_table("findings", ("Rule", "What to change", "At stake", "Per step", "Severity"), rows, left=2)


def _verdict(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    return f'<p class="verdict">{_e(lines[0])}</p>' + "".join(f'<p class="line">{_e(line)}</p>' for line in lines[1:])


def diagnosis_html(d: Any) -> str:
    """``Diagnosis._repr_html_``: the headline, then every finding (most time at stake first), then the notes."""
    lines = list(d.headline())
    if d.findings:  # the table below lists them all, the top one first
        lines = [line for line in lines if not line.startswith("top finding: ")]
    body = _verdict(lines)
    if d.findings:
        body += f'<p class="line"><b>{len(d.findings)} finding{"s" if len(d.findings) != 1 else ""}</b></p>'
        body += findings_table_html(d.findings)
    body += "".join(muted_line(n, "note") for n in d.notes)
    return notebook_block("diagnosis", body)


# --- a memory report: the verdict and who holds the peak ---------------------------------------
def memory_html(m: Any, format_bytes: Callable[[float], str], limit: int = 10) -> str:
    """``MemoryReport._repr_html_``: its headline and who holds the peak (``format_bytes``:
    the memory model's, passed in — the model imports this module, not the other way)."""
    body = f'<p class="verdict">{_e(m.headline())}</p>'
    rows = [
        f'<tr><td class="t name" title="{_e(h.op)}">{_e(h.op)}</td><td class="t">{_e(h.region or "-")}</td>'
        f'<td class="t">{_e(h.source or "-")}</td><td>{_e(format_bytes(h.bytes))}</td><td>{h.count}</td></tr>'
        for h in m.at_peak[:limit]
    ]
    if rows:
        body += notebook_table("holders", ("Held at the peak by", "Region", "Source", "Bytes", "Allocations"), rows, left=3)
        if len(m.at_peak) > limit:
            body += muted_line(f"{len(m.at_peak) - limit} more holders (memory.at_peak has all)", "more")
    body += "".join(muted_line(n, "note") for n in m.notes)
    return notebook_block("memory", body)


# --- a run ------------------------------------------------------------------------------------
#: how long rendering a run waits for its directory to be written before saying so
RUN_PATH_WAIT_S = 30.0


def run_html(run: Any, top: int = 10) -> str:
    """``Run._repr_html_`` (and what ``%%neuronscope`` shows): the run's name, device, status and
    directory, the diagnosis' headline, the ``top`` ops. Waits for the analysis, never for a
    capture that is still recording (a run shown inside its own ``with`` block)."""
    if run.status == "pending" and not run.end_ns and not run.windows:
        body = _facts(run.name, [("device", run.device), ("status", run.status)])
        pending = muted_line("still capturing: the summary and the diagnosis come after the profiled block")
        return notebook_block("run", body + pending)
    summary, diagnosis = run.summary, run.diagnosis
    where = None
    if run.profiled and run.parent is None:
        written = run.wait(RUN_PATH_WAIT_S)
        path = run.path if written else None
        where = str(path) if path is not None else ("(not written)" if written else "(still being written)")
    facts = [("device", run.device), ("status", run.status)]  # the status once written: complete, error...
    if run.error:
        facts.append(("error", f"{run.error}: {run.error_message}" if run.error_message else run.error))
    if run.skip_reason:
        facts.append(("skipped", run.skip_reason))
    if where is not None:
        facts.append(("path", where))
    body = _facts(run.name, facts)
    if diagnosis is not None:
        body += _verdict(diagnosis.headline())
        if len(diagnosis.findings) > 1:
            body += muted_line(f"run.diagnosis lists all {len(diagnosis.findings)} findings", "more")
    if summary is not None and summary.rows:
        body += op_table_html(summary, top, "run.summary has all")
    elif summary is not None:
        body += muted_line("no ops were recorded")
    body += "".join(muted_line(f"warning: {w}", "warning") for w in run.warnings)
    return notebook_block("run", body)


def _facts(name: str, facts: Sequence[tuple[str, Any]]) -> str:
    cells = " · ".join(f'{_e(k)} <span class="v-{_e(k)}">{_e(v)}</span>' for k, v in facts)
    return f'<p class="line"><b>neuronscope run {_e(name)}</b></p><p class="muted facts">{cells}</p>'


# --- pandas -------------------------------------------------------------------------------------
def import_pandas() -> Any:
    """pandas, imported on first use; an ImportError that says how to install it when it is missing
    (the ``*_frame`` functions here, and ``Comparison.to_pandas``)."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(PANDAS_HINT) from exc
    return pandas


def _flat(prefix: str, obj: Any, props: Sequence[str] = ()) -> dict[str, Any]:
    """A dataclass' scalar fields (and ``props``) as ``prefix_field`` columns; dicts are skipped."""
    out = {
        f"{prefix}_{f.name}": getattr(obj, f.name)
        for f in dataclasses.fields(obj)
        if not isinstance(getattr(obj, f.name), (dict, list, tuple))
    }
    out.update({f"{prefix}_{p}": getattr(obj, p) for p in props})
    return out


def summary_frame(summary: Any) -> Any:
    """``Summary.to_pandas()``: one row per op, in the summary's order (self device time, most
    first). Columns: every scalar field of the row (``name``, ``calls``, the times in us, ``device_pct``,
    ``first_start_ns``..., ``compile``), ``label`` (how tables show the name), then ``work_*``
    (FLOPs, bytes, ...) when shapes were recorded and ``roofline_*`` (``pct_of_roof``, ``bound``,
    ``at_limit``, ``time_at_stake_us``...) when a row has a roofline; those are empty (NaN/None)
    on the rows without one."""
    pd = import_pandas()
    rows = list(summary.rows)
    has_work = any(getattr(r, "work", None) is not None for r in rows)
    has_roof = any(getattr(r, "roofline", None) is not None for r in rows)
    work_cols = roof_cols = None
    records = []
    for r in rows:
        rec = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in ("work", "roofline")}
        rec["label"] = summary.label(r.name)
        if has_work and r.work is not None:
            rec.update(_flat("work", r.work))
            work_cols = work_cols or [k for k in rec if k.startswith("work_")]
        if has_roof and r.roofline is not None:
            rec.update(_flat("roofline", r.roofline, ("at_limit", "time_at_stake_us")))
            roof_cols = roof_cols or [k for k in rec if k.startswith("roofline_")]
        records.append(rec)
    base = [f.name for f in dataclasses.fields(rows[0]) if f.name not in ("work", "roofline")] + ["label"] if rows else ["name"]
    columns = base + (work_cols or []) + (roof_cols or [])
    return pd.DataFrame.from_records(records, columns=columns)


def diagnosis_frame(d: Any, what: str = "findings") -> Any:
    """``Diagnosis.to_pandas(what)``: ``"findings"`` (one row per finding, most time at stake
    first), ``"steps"`` (one row per step kept) or ``"gaps"`` (the device idle intervals above the
    gap threshold that the timeline keeps, the longest 2000, in time order; the detail — the host's
    op, the source, the ops around — on the longest five)."""
    if what not in DIAGNOSIS_TABLES:
        raise ConfigurationError(f"Diagnosis.to_pandas(what={what!r}): what must be one of {', '.join(DIAGNOSIS_TABLES)}")
    pd = import_pandas()
    if what == "findings":
        cols = ["rule", "severity", "message", "us_at_stake", "us_per_step", "evidence"]
        return pd.DataFrame.from_records([{c: getattr(f, c) for c in cols} for f in d.findings], columns=cols)
    if what == "steps":
        cols = ["index", "start_ns", "duration_us", "device_busy_pct", "bound_by"]
        per_step = d.steps.per_step if d.steps is not None else ()
        return pd.DataFrame.from_records([{c: getattr(s, c) for c in cols} for s in per_step], columns=cols)
    return pd.DataFrame.from_records(_gap_records(d), columns=list(_GAP_COLUMNS))


_GAP_COLUMNS = ("start_ns", "offset_us", "duration_us", "cls", "step", "before", "after", "host", "source", "wait")


def _gap_records(d: Any) -> list[dict[str, Any]]:
    detail = {g.start_ns: g for g in d.gaps.top}
    tl = d.timeline_data
    spans = list(tl.gaps) if tl is not None and tl.gaps else [(g.start_ns, round(g.duration_us * 1e3), g.cls) for g in d.gaps.top]
    spans.sort()
    out = []
    for start, dur_ns, cls in spans:
        g = detail.get(start)
        out.append(
            {
                "start_ns": start,
                "offset_us": (start - d.window_start_ns) / 1e3,
                "duration_us": g.duration_us if g is not None else dur_ns / 1e3,
                "cls": cls,
                "step": g.step if g is not None else None,
                "before": g.before if g is not None else None,
                "after": g.after if g is not None else None,
                "host": g.host[0][0] if g is not None and g.host else None,
                "source": g.source if g is not None else None,
                "wait": g.wait if g is not None else None,
            }
        )
    return out
