"""``neuronscope report PATH [PATH_B] -o report.html``: a self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ._common import load_source
from ._group import Failure, cli


@cli.command("report")
@click.argument("path", metavar="PATH")
@click.argument("path_b", metavar="[PATH_B]", required=False)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=False),
    default="neuronscope-report.html",
    show_default=True,
    help="Where to write the HTML file.",
)
@click.option("--title", default=None, help="Page title (default: the run names).")
@click.option(
    "--top",
    "-n",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    metavar="N",
    help="Ops drawn in the bar charts (0 = all; tables list all).",
)
def report(path: str, path_b: str | None, output: str, title: str | None, top: int) -> None:
    """Write a self-contained HTML report of a run (or of A vs B, given two).

    PATH and PATH_B are run directories, Kineto trace.json(.gz) files or directories holding
    one trace (as for show). The page needs no network: per-op bar chart of self device
    time, the op table, the region breakdown, a timeline of device activity, the run
    metadata and links to the raw files (relative to the report, so keep them side by
    side). With PATH_B it opens with the diff A → B.
    PATH may also be the job directory of a torchrun job (holding rank0/, rank1/...), or an
    output directory holding one: the page then shows one lane per rank, the straggler and
    the per-rank table.
    """
    from .._paths import resolve
    from ..report.html import write_html

    where = resolve(path)
    if path_b is None and where.kind == "job":  # a torchrun job: the per-rank lane view
        from ..api import compare_ranks

        a: Any = compare_ranks(where.path)  # a RankComparison or a run's Source: write_html renders either
    else:
        a = load_source(path)
    b = load_source(path_b) if path_b is not None else None
    target = Path(output)
    if target.is_dir():
        raise click.BadParameter(
            f"{target} is a directory; give a file name such as {target / 'report.html'}", param_hint="'--output'"
        )
    try:
        written = write_html(a, target, b, title=title, top=top)
    except OSError as exc:
        raise Failure(f"{target}: cannot write the report: {exc.strerror or exc}; choose another --output") from exc
    size = written.stat().st_size
    click.echo(f"wrote {written} ({size / 1e3:,.1f} kB)", err=True)
