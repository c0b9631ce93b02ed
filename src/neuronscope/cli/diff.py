"""``neuronscope diff A B``: what changed between two profiles; optionally a CI gate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._common import JSON_SCHEMA_VERSION, emit_json, load_source, source_json, top_option
from ._group import EXIT_FAILURE, cli

if TYPE_CHECKING:
    from ..analysis.diff import Normalisation, Regression, SummaryDiff
    from ..analysis.explain import Explanation
    from ..analysis.memory_diff import MemoryExplanation
    from ..report.sources import Source


@cli.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@top_option(20)
@click.option("--by-region", "-r", is_flag=True, help="Add a table of per-region changes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema below) instead of tables.")
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="Exit 1 if B's total self device time (and each --op) is more than PCT percent above A's "
    "(per step or per recorded second when the runs recorded different shares of their time).",
)
@click.option(
    "--op",
    "ops",
    multiple=True,
    metavar="NAME",
    help="Also gate this op's self device time (repeatable; needs --fail-if-slower). A new op counts as slower.",
)
def diff(a: str, b: str, top: int, by_region: bool, as_json: bool, fail_pct: float | None, ops: tuple[str, ...]) -> int:
    """Compare two profiles: A (baseline) and B (candidate), run directories or traces (as for show).

    Ops are matched by name and sorted by how much their self device time changed; a
    positive change means B is slower. Percentages are relative to A.

    Like with like: when the runs' coverage, windows or recorded steps differ, every figure
    (and the gate) is per recorded step when both have steps, else per recorded second. The
    first line is the median step change when both runs have steps. "normalised" in --json
    says what was divided by what, and why.

    \b
    As a CI performance gate:
      neuronscope diff baseline/ candidate/ --fail-if-slower 5 --op aten::mm
    exits 1 when the total self device time, or aten::mm's, grew more than 5 %.

    \b
    JSON output (--json), schema_version 1; D = {"a": num, "b": num,
    "delta": num, "pct": float|null} (pct null when a is 0 and b is not):
      {
        "schema_version": 1,
        "a": Source, "b": Source,          # as in `show --json`
        "device_a": str, "device_b": str,
        "headline": str,                   # the first line: the median step change when both have steps
        "total_device_time_us": D,         # in the basis below (so are ops, regions, explanation, gate)
        "normalised": {"basis": "per_step"|"per_recorded_second"|"total", "label": str, "reason": str,
                       "a": null | {"divisor": num, "steps_recorded": int, "steps_timed": int,
                                    "recorded_s": num, "wall_s": num, "coverage_pct": num,
                                    "windows": int, "p50_step_us": num|null}, "b": ...,
                       "why": {"coverage_pct"|"windows"|"steps_recorded": {"a", "b", "differ": bool}},
                       "raw_total_device_time_us": D},    # not divided
        "op_count": int,                   # ops in A or B (before --top)
        "top": int,
        "ops": [{"name": str, "presence": "both"|"only_a"|"only_b",
                 "calls": D, "self_device_time_us": D,
                 "device_time_us": D, "self_cpu_time_us": D}, ...],
        "regions": [{"path": str, "presence": str, "occurrences": D,
                     "wall_time_us": D, "device_time_us": D}, ...],
        "only_in_a": [str], "only_in_b": [str],
        "explanation": null | {"a_us": num, "b_us": num, "delta_us": num,   # wall time
                               "contributions": [{"kind": "op"|"idle", "name": str,
                                                  "a_us": num, "b_us": num, "delta_us": num}, ...],
                               "steps": null | {...}, "regions": [...],   # contributions sum to delta_us
                               "normalised": {...}},                      # as above
        "memory": null | {"a_bytes": int, "b_bytes": int, "delta_bytes": int,  # the memory peak (both
                          "contributions": [{"op": str, "region": str,         # runs memory=True):
                                             "a_bytes": int, "b_bytes": int,   # held at the peak,
                                             "delta_bytes": int}, ...],        # sum to delta_bytes
                          "growth_per_step_bytes": {"a": int|null, "b": int|null},
                          "by_region": [...]},                                 # net bytes per region
        "gate": null | {"fail_if_slower_pct": float, "ops": [str], "basis": str,
                        "passed": bool,
                        "regressions": [{"what": "total"|"op", "name": str,
                                         "a_us": float, "b_us": float,   # in the basis
                                         "pct": float|null, "basis": str}, ...]}
      }
    """
    if ops and fail_pct is None:
        raise click.UsageError("--op NAME only makes sense with --fail-if-slower PCT", ctx=click.get_current_context())
    from ..analysis.diff import choose_basis, diff_summaries
    from ..report.sources import run_extent

    src_a, src_b = load_source(a), load_source(b)
    basis = choose_basis(run_extent(src_a), run_extent(src_b))  # like with like: per step, per recorded s, or totals
    d = diff_summaries(src_a.summary, src_b.summary, normalised=basis)
    _check_gated_ops(d, ops)
    regressions = d.regressions(fail_pct, ops) if fail_pct is not None else []
    explanation, memory = _explanations(src_a, src_b, basis)
    if as_json:
        emit_json(_diff_json(src_a, src_b, d, top, explanation, memory, fail_pct, ops, basis, regressions))
    else:
        _print_diff(src_a, src_b, d, top, by_region, explanation, memory, basis)
    if fail_pct is None:
        return 0
    return _report_gate(fail_pct, ops, basis, regressions)


def _check_gated_ops(d: SummaryDiff, ops: tuple[str, ...]) -> None:
    """Every --op must name an op of A or B."""
    missing = [name for name in ops if name not in d]
    if missing:
        examples = ", ".join(o.name for o in d.ops[:5])
        raise click.BadParameter(
            f"{', '.join(repr(m) for m in missing)} is in neither A nor B (ops include: {examples})",
            param_hint="'--op'",
        )


def _explanations(src_a: Source, src_b: Source, basis: Normalisation) -> tuple[Explanation | None, MemoryExplanation | None]:
    """Why the wall time changed (both runs diagnosed) and the memory peak (both ran memory=True)."""
    explanation = None
    if src_a.diagnosis is not None and src_b.diagnosis is not None:
        from ..analysis.explain import explain_diff

        explanation = explain_diff(src_a.summary, src_b.summary, src_a.diagnosis, src_b.diagnosis, normalised=basis)

    memory = None
    if src_a.memory is not None and src_b.memory is not None:
        from ..analysis.memory_diff import explain_memory_diff

        memory = explain_memory_diff(src_a.memory, src_b.memory)
    return explanation, memory


def _diff_json(
    src_a: Source,
    src_b: Source,
    d: SummaryDiff,
    top: int,
    explanation: Explanation | None,
    memory: MemoryExplanation | None,
    fail_pct: float | None,
    ops: tuple[str, ...],
    basis: Normalisation,
    regressions: list[Regression],
) -> dict[str, Any]:
    """The --json document (the schema in diff's help)."""
    data: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION, "a": source_json(src_a), "b": source_json(src_b)}
    full = d.to_dict()
    full.pop("schema_version")
    data.update(full)
    data["op_count"] = len(d.ops)
    data["top"] = top
    data["ops"] = data["ops"][:top] if top else data["ops"]
    data["explanation"] = explanation.to_dict() if explanation is not None else None
    data["memory"] = memory.to_dict() if memory is not None else None
    data["gate"] = (
        None
        if fail_pct is None
        else {
            "fail_if_slower_pct": fail_pct,
            "ops": list(ops),
            "basis": basis.basis,  # the gate compares the normalised figures
            "passed": not regressions,
            "regressions": [r.to_dict() for r in regressions],
        }
    )
    return data


def _print_diff(
    src_a: Source,
    src_b: Source,
    d: SummaryDiff,
    top: int,
    by_region: bool,
    explanation: Explanation | None,
    memory: MemoryExplanation | None,
    basis: Normalisation,
) -> None:
    """The tables, then why the wall time changed and what held the memory peak."""
    from ..report.terminal import diff_renderable, make_console

    console = make_console()
    labels = (f"{src_a.label}  {src_a.path or ''}".rstrip(), f"{src_b.label}  {src_b.path or ''}".rstrip())
    console.print(diff_renderable(d, console, top=top or None, by_region=by_region, labels=labels))
    if explanation is not None:
        console.print()
        per = f", {basis.figures_label}" if basis.figures_label else ""
        console.print(f"[bold]Why:[/bold] where the wall time went (busy time by op, idle time by class{per})")
        for line in explanation.lines(top=top or 8, labels=d.labels):
            console.print(line, markup=False, soft_wrap=True)
    if memory is not None:
        console.print()
        console.print("[bold]Memory:[/bold] what each op/region held at the peak")
        for line in memory.lines(top=top or 8):
            console.print(line, markup=False, soft_wrap=True)


def _report_gate(fail_pct: float, ops: tuple[str, ...], basis: Normalisation, regressions: list[Regression]) -> int:
    """The gate's verdict on stderr: each regression (exit 1), or OK (exit 0)."""
    err = make_err_console()
    if regressions:
        how = f" ({basis.reason()})" if basis.basis != "total" else ""
        for r in regressions:
            err.print(f"FAIL: {r.describe()} is more than {fail_pct:g}% slower{how}", style="red", markup=False, soft_wrap=True)
        return EXIT_FAILURE
    checked = "total device time" + (f" and {', '.join(ops)}" if ops else "")
    how = f" ({basis.reason()})" if basis.basis != "total" else ""
    err.print(f"OK: {checked} within {fail_pct:g}% of A{how}", style="green", markup=False, soft_wrap=True)
    return 0


def make_err_console():
    from ..report.terminal import make_console

    return make_console(stderr=True)
