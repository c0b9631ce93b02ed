"""``neuronscope ranks DIR``: the ranks of a torchrun job side by side, and the straggler."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

from ._common import emit_json
from ._group import Failure, cli


@cli.command("ranks")
@click.argument("paths", metavar="DIR...", nargs=-1, required=True)
@click.option(
    "--name", default=None, help="The profile to compare, when the job has several (default: the one with the most steps)."
)
@click.option("--steps", "show_steps", is_flag=True, help="Add the per-step table (wall time per rank, who arrived last).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema below) instead of tables.")
@click.option(
    "--html", "html_out", type=click.Path(dir_okay=False), default=None, help="Also write the per-rank lane view as HTML here."
)
@click.option("--fail-on-straggler", is_flag=True, help="Exit 1 when a straggler is found (a CI gate).")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Read this many ranks at once, in a local process pool (default: the number of cores; 1: in this process).",
)
@click.option(
    "--skip-bad", is_flag=True, help="Leave out a truncated or corrupt file with a warning naming it, instead of failing."
)
def ranks(
    paths: tuple[str, ...],
    name: str | None,
    show_steps: bool,
    as_json: bool,
    html_out: str | None,
    fail_on_straggler: bool,
    jobs: int | None,
    skip_bad: bool,
) -> int:
    """Compare the ranks of a distributed job: step time, busy %, collectives, clock skew, straggler.

    DIR is a job directory (<output_dir>/<job id>, holding rank0/, rank1/...), an output
    directory holding one job, the run directories of every rank, or one Kineto trace per
    rank. Runs are matched by call index (the n-th call of a profile on every rank). The
    ranks are read in parallel (--jobs, default: the number of cores); --skip-bad leaves out
    a truncated or corrupt file with a warning naming it.

    \b
    JSON output (--json), schema_version 1; times in microseconds, per step (median):
      {
        "schema_version": 1, "job_id": str|null, "name": str, "world_size": int|null,
        "ranks": [{"rank": int,          # then the table's columns, in the table's order:
                   "step_p50_us": float, "device_busy_pct": float, "collective_us": float,
                   "exposed_us": float, "collective_wait_us": float, "compute_us": float,
                   "host_us": float, "data_us": float, "compile_us": float,
                   "late_us": float, "last_arrival_pct": float,
                   "clock_offset_us": float|null, "host": str|null,
                   "local_rank": int|null, "path": str, "runs": int, "steps": int,
                   "step_max_us": float}, ...],
        "straggler": null | {"rank": int, "late_us": float, "late_pct_of_step": float,
                   "last_share_pct": float, "cause": "compute"|"host"|"data"|"compile"|
                   "collective_wait"|"unknown", "cause_us": float,
                   "deltas_us": {cause: float}, "others_wait_us": float, "message": str},
        "clock": {"method": "collective_ends"|"none", "offsets_us": {rank: float},
                  "estimated_us": {rank: float}, "max_skew_us": float|null,
                  "exit_spread_us": float, "hosts": int, "anchors": int, ...},
        "step_skew": float, "collectives": int, "collective_events": str,
        "threshold_us": float,
        "steps": [{"key": str, "wall_us": {rank: float}, "late_us": {rank: float},
                   "last_rank": int, "collectives": int}, ...],
        "warnings": [str, ...], "other_names": [str, ...]
      }
    New keys may be added within a schema_version; existing ones keep their meaning.
    """
    from .._paths import resolve
    from ..api import compare_ranks

    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(paths) == 1 and resolve(paths[0], ranks=True).kind in ("trace", "run"):
        jobs = 1  # one profile: nothing to spread
    if jobs == 1:
        comparison = compare_ranks(list(paths), name=name, skip_bad=skip_bad)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            comparison = compare_ranks(list(paths), name=name, executor=pool, skip_bad=skip_bad)
    for warning in comparison.warnings:
        if warning.startswith("skipped "):
            click.echo(f"warning: {warning}", err=True)
    if html_out is not None:
        from ..report.ranks_html import write_ranks_html

        target = Path(html_out)
        try:
            write_ranks_html(comparison, target)
        except OSError as exc:
            raise Failure(f"{target}: cannot write the report: {exc.strerror or exc}; choose another --html") from exc
        click.echo(f"wrote {target} ({target.stat().st_size / 1e3:,.1f} kB)", err=True)
    if as_json:
        emit_json(comparison.to_dict())
    else:
        from ..report.terminal import make_console, ranks_renderable

        console = make_console()
        console.print(ranks_renderable(comparison, console, steps=show_steps))
    return 1 if fail_on_straggler and comparison.straggler is not None else 0
