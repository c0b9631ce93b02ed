"""One column spec per diff table (issue 26): the terminal, the HTML report and --json show the
same columns in the same order, with the same cell text."""

from __future__ import annotations

import re

import torch
from rich.console import Console

import neuronscope as ns
from neuronscope.analysis.diff import DIFF_OP_COLUMNS, DIFF_REGION_COLUMNS, diff_summaries
from neuronscope.report.html import render_html
from neuronscope.report.terminal import diff_renderable


def _profile(n: int):
    x = torch.randn(64, 64)
    with ns.profile_neuron(name=f"d{n}") as run:
        with ns.region("step"):
            for _ in range(n):
                x = torch.tanh(x @ x)
        torch.relu(x) if n > 2 else torch.sigmoid(x)
    return run.summary


def test_terminal_html_and_json_read_one_spec():
    a, b = _profile(2), _profile(4)
    d = diff_summaries(a, b)
    console = Console(width=300, record=True, color_system=None)
    console.print(diff_renderable(d, console, top=None, by_region=True))
    text = console.export_text()
    header = next(line for line in text.splitlines() if line.strip().startswith("Op"))
    assert re.findall(r"Op|A|B|Δ %|Δ|Calls A→B", header)[:1] == ["Op"]
    positions = [header.index(c.header) for c in DIFF_OP_COLUMNS[2:]]  # the words after "A" and "B"
    assert positions == sorted(positions)
    html = render_html(a, b)
    for table, columns in (("diff-table", DIFF_OP_COLUMNS), ("diff-region-table", DIFF_REGION_COLUMNS)):
        block = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
        keys = re.findall(r'<th data-key="([^"]+)">', block)
        assert keys == [c.key for c in columns]
    # every op row's cells in the HTML are the spec's text, as the terminal prints it
    lines = text.splitlines()
    for o in d.ops:
        cells = [c.text(o) for c in DIFF_OP_COLUMNS]
        assert any(all(cell in line for cell in cells) for line in lines), (o.name, cells)
        row = html.split(f'title="{o.name}"', 1)[1].split("</tr>", 1)[0]
        assert re.findall(r">([^<]*)</td>", row)[1:] == cells
    # --json: every column's key is a path into the op's dict, with the value the cell shows
    for o in d.ops:
        as_json = o.to_dict()
        for c in DIFF_OP_COLUMNS:
            node = as_json
            for part in c.key.split("."):
                node = node[part]
            value = node["b"] if isinstance(node, dict) and c.key == "calls" else node
            assert value == c.value(o) or (isinstance(value, float) and abs(value - c.value(o)) < 1e-3)
