"""Output for logs (issue 35, item 4): off a terminal every line is bounded — LOG_WIDTH (160)
or COLUMNS — the separator fits, a name too long for its column wraps inside it and is never
cut, and ``run --json`` is there for programs. Real ``neuronscope run`` processes on a script
with a real op and a region whose names are ~250 characters long."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuronscope.report.terminal import LOG_WIDTH

OP = "nsedges::" + "a_very_long_fused_kernel_name_" * 8
REGION = "stage/" + "an_unusually_deep_region_name_" * 8

SCRIPT = f"""
import torch
import neuronscope as ns

@torch.library.custom_op({OP!r}, mutates_args=())
def long_kernel(x: torch.Tensor) -> torch.Tensor:
    return x.relu() * 2

x = torch.randn(32, 32)
with ns.region({REGION!r}):
    for _ in range(3):
        long_kernel(x @ x)
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("script") / "long_names.py"
    path.write_text(SCRIPT)
    return path


def _neuronscope(*args: str, columns: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR")}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run([sys.executable, "-m", "neuronscope", *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _name_in_table(lines: list[str], name: str) -> str:
    """The name column's text of ``name``'s row: the first word of its first line and of the
    lines after it that hold nothing else (the name wrapped in its column)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(name[:10]))
    parts = [lines[start].split()[0]]
    for line in lines[start + 1 :]:
        words = line.split()
        if len(words) != 1 or not name.startswith("".join(parts) + words[0]):
            break
        parts.append(words[0])
    return "".join(parts)


@pytest.mark.parametrize("columns", [None, "100"], ids=["no COLUMNS", "COLUMNS=100"])
def test_run_off_a_terminal_is_bounded_and_cuts_no_name(tmp_path, script, columns):
    width = LOG_WIDTH if columns is None else int(columns)
    out = _neuronscope("run", "--output-dir", str(tmp_path), str(script), columns=columns)
    lines = out.splitlines()
    run = next(p for p in tmp_path.iterdir() if (p / "manifest.json").is_file())
    # the one thing allowed past the width: the run's path (and the command to show it), whole
    # on a line of its own, not wrapped (it is copied) — its label goes on the line before
    over = [line for line in lines if len(line) > width]
    assert all(line.strip() in (str(run), f"neuronscope show {run} --by-region") for line in over), over
    assert f"run directory: {run}" in lines or lines[lines.index("run directory:") + 1] == str(run)
    assert lines[0].strip("─ ") == "neuronscope" and len(lines[0]) == width  # the separator fits the width
    assert "…" not in out  # nothing cut short
    assert _name_in_table(lines, OP) == OP  # wrapped in its column, whole
    row = next(line for line in lines if line.startswith(OP[:10]))
    assert row.split()[1] == "3"  # its calls, on its first line


def test_show_by_region_wraps_a_long_region_path(tmp_path, script):
    _neuronscope("run", "--quiet", "--output-dir", str(tmp_path), str(script))
    (run,) = [p for p in tmp_path.iterdir() if (p / "manifest.json").is_file()]
    lines = _neuronscope("show", str(run), "--by-region").splitlines()
    assert max(len(line) for line in lines) <= LOG_WIDTH
    assert _name_in_table(lines, REGION) == REGION  # the regions table
    # each region's own table is headed by its path, wrapped onto lines of its own
    # (the label alone on its line: a line of the regions table above can start with "region" too,
    # where the name's wrap falls before "region_name_" -- its column's width follows the timings)
    heading = next(i for i, line in enumerate(lines) if line.strip() == "region")
    joined = "".join(line.strip() for line in lines[heading : heading + 1 + len(REGION) // LOG_WIDTH + 1])
    assert joined == "region" + REGION


def test_run_json_is_the_show_schema(tmp_path, script):
    data = json.loads(_neuronscope("run", "--json", "--top", "0", "--output-dir", str(tmp_path), str(script)))
    (run,) = [p for p in tmp_path.iterdir() if (p / "manifest.json").is_file()]
    rows = json.loads((run / "summary.json").read_text())["rows"]  # what the run directory says
    assert data["schema_version"] == 1 and data["source"]["path"] == str(run)
    assert {(o["name"], o["calls"]) for o in data["ops"]} == {(r["name"], r["calls"]) for r in rows}
    assert next(o for o in data["ops"] if o["name"] == OP)["calls"] == 3
    assert data["diagnosis"] is not None and data["regions"]
