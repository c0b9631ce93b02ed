"""Helpers shared by the commands: loading profiles, JSON output, common options."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ..analysis.summary import OpStats, Summary
    from ..report.sources import Source

__all__ = ["JSON_SCHEMA_VERSION", "emit_json", "load_source", "op_json", "sort_option", "source_json", "top_option"]

#: ``schema_version`` of the JSON that ``show --json`` and ``diff --json`` print.
JSON_SCHEMA_VERSION = 1

F = TypeVar("F", bound=Callable[..., Any])

SORT_CHOICES = ("self_device", "device", "cpu", "self_cpu", "calls", "name")


def top_option(default: int) -> Callable[[F], F]:
    return click.option(
        "--top",
        "-n",
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        metavar="N",
        help="Show the first N ops (0 = all).",
    )


def sort_option(f: F) -> F:
    return click.option(
        "--sort",
        "-s",
        type=click.Choice(SORT_CHOICES),
        default="self_device",
        show_default=True,
        help="Order ops by this column (largest first; name: alphabetical).",
    )(f)


def load_source(path: str) -> Source:
    """Open a run directory or trace file, with a spinner on stderr when it is a terminal."""
    from ..report.sources import open_source
    from ..report.terminal import loading, make_console

    with loading(make_console(stderr=True), path):
        return open_source(path)


def op_json(r: OpStats) -> dict[str, Any]:
    d = asdict(r)
    return {
        k: d[k]
        for k in (
            "name",
            "calls",
            "self_device_time_us",
            "device_time_us",
            "device_pct",
            "self_cpu_time_us",
            "cpu_time_us",
            "first_start_ns",
            "last_end_ns",
            "compile",
            "compile_time_us",
            "work",
            "roofline",
        )
    }


def source_json(src: Source) -> dict[str, Any]:
    return {"label": src.label, "kind": src.kind, "path": str(src.path) if src.path else None, "device": src.device}


def summary_ops(summary: Summary, sort: str, top: int) -> list[OpStats]:
    from ..report.terminal import sort_rows

    rows = sort_rows(summary.rows, sort)
    return rows[:top] if top else rows


def emit_json(data: dict[str, Any]) -> None:
    """Pretty JSON on stdout (no colour, no wrapping: it is for programs)."""
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()
