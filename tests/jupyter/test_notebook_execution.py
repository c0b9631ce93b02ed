"""A real notebook, executed by nbconvert in a real kernel (this venv's Python, through a
kernelspec made for the test): ``%load_ext neuronscope``, a ``%%neuronscope`` cell, cells ending
in ``run.summary`` and ``run.diagnosis``; the executed notebook's outputs carry the HTML, and
that HTML renders in a real headless Chromium (same browser and skip rule as the HTML report's
tests: NEURONSCOPE_REQUIRE_BROWSER=1 turns a missing browser into a failure).

No timing asserts: the kernel's start-up and the cells get generous timeouts on a loaded machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.browser import launch

from ._html import table, text

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")
pytest.importorskip("ipykernel")

KERNEL = "neuronscope-test"

CELLS = [
    "import neuronscope as ns\n%load_ext neuronscope",
    "%%neuronscope --name nbcell --top 5 --record-shapes\n"
    "import torch\n"
    "x, w = torch.randn(64, 64), torch.randn(64)\n"
    "for _ in range(3):\n"
    "    y = torch.relu(x @ x)\n"
    "    (y * w).sum().item()\n"
    "    ns.step()",
    "run = ns.last_run()\nassert run.name == 'nbcell', run\nrun.summary",
    "run.diagnosis",
    "run.summary.to_pandas()[['name', 'calls', 'self_device_time_us', 'roofline_pct_of_roof']].head()",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook above, executed; its outputs, cell by cell."""
    from ipykernel.kernelspec import install
    from nbconvert.preprocessors import ExecutePreprocessor

    tmp = tmp_path_factory.mktemp("notebook")
    # a kernelspec whose argv is this interpreter (the venv), found through JUPYTER_PATH only
    install(kernel_name=KERNEL, prefix=str(tmp / "jupyter"))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(tmp / "jupyter" / "share" / "jupyter"))
    mp.setenv("JUPYTER_RUNTIME_DIR", str(tmp / "runtime"))
    mp.setenv("IPYTHONDIR", str(tmp / "ipython"))
    mp.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp / "runs"))  # the kernel inherits the environment
    try:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": KERNEL, "language": "python"}
        ExecutePreprocessor(timeout=600, startup_timeout=300, kernel_name=KERNEL).preprocess(nb, {"metadata": {"path": str(tmp)}})
    finally:
        mp.undo()
    nbformat.validate(nb)
    (tmp / "executed.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    return tmp, nb


def _html_outputs(cell, output_type: str) -> list[str]:
    return [o["data"]["text/html"] for o in cell.outputs if o["output_type"] == output_type and "text/html" in o.get("data", {})]


def test_the_kernel_is_this_python(executed):
    import json

    tmp, _ = executed
    spec = json.loads((tmp / "jupyter" / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable


def test_the_executed_notebook_carries_the_html(executed):
    _, nb = executed
    assert all(o["output_type"] != "error" for c in nb.cells for o in c.outputs)
    # the %%neuronscope cell: the run, displayed (name, the top 5 ops, the % of roof column)
    shown = _html_outputs(nb.cells[1], "display_data")
    assert len(shown) == 1
    assert "neuronscope run nbcell" in text(shown[0])
    assert "status complete" in text(shown[0]) and "path " in text(shown[0])  # shown once written
    ops = table(shown[0], "nsnb-ops")
    assert len(ops.rows) == 5 and "% of roof" in ops.header
    names = [a["data-op"] for a in ops.row_attrs]
    assert "aten::mm" in names
    # a cell ending in run.summary: its value is the HTML table of every op (up to 20)
    summary = _html_outputs(nb.cells[2], "execute_result")
    assert len(summary) == 1
    t = table(summary[0], "nsnb-ops")
    listed = [a["data-op"] for a in t.row_attrs]
    assert {"aten::mm", "aten::relu", "aten::sum"} <= set(listed) and set(names) <= set(listed)
    mm = next(cells for cells in t.rows if cells[0] == "aten::mm")
    assert mm[1] == "3"
    plain = next(o for o in nb.cells[2].outputs if o["output_type"] == "execute_result")["data"]["text/plain"]
    assert "Self device" in plain  # text frontends get the table, not a dataclass dump
    # run.diagnosis: the verdict
    diagnosis = _html_outputs(nb.cells[3], "execute_result")
    assert len(diagnosis) == 1 and "3 steps" in text(diagnosis[0])
    # the DataFrame: pandas' own HTML
    frame = _html_outputs(nb.cells[4], "execute_result")
    assert len(frame) == 1 and "dataframe" in frame[0] and "aten::mm" in frame[0]


# --- the HTML in a browser ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    yield from launch()


def test_the_outputs_render_in_chromium(executed, browser, tmp_path):
    tmp, nb = executed
    parts = [
        ("run", _html_outputs(nb.cells[1], "display_data")[0]),
        ("summary", _html_outputs(nb.cells[2], "execute_result")[0]),
        ("diagnosis", _html_outputs(nb.cells[3], "execute_result")[0]),
    ]
    # each output in its own block, as a notebook page holds them
    body = "".join(f'<section class="output" id="out-{name}">{html}</section>' for name, html in parts)
    page_file = tmp_path / "outputs.html"
    page_file.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>outputs</title></head><body>{body}</body></html>',
        encoding="utf-8",
    )
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(page_file.resolve().as_uri(), wait_until="load")
        assert errors == [] and requests == [page_file.resolve().as_uri()]  # no script, nothing fetched
        for name in ("run", "summary"):
            rows = page.locator(f"#out-{name} table.nsnb-ops tbody tr")
            assert rows.count() > 0
            box = page.locator(f"#out-{name} table.nsnb-ops").bounding_box()
            assert box is not None and box["width"] > 200 and box["height"] > 20 * rows.count() * 0.5
            cell = page.locator(f"#out-{name} table.nsnb-ops tbody tr:first-child td:first-child").bounding_box()
            assert cell is not None and cell["width"] > 0 and cell["height"] > 0
        assert page.locator("#out-run table.nsnb-ops tbody tr").count() == 5
        # numbers right-aligned, names left: the scoped style applied
        align = page.eval_on_selector(
            "#out-summary table.nsnb-ops tbody tr td:nth-child(3)", "e => getComputedStyle(e).textAlign"
        )
        assert align == "right"
        verdict = page.locator("#out-diagnosis p.verdict").bounding_box()
        assert verdict is not None and verdict["height"] > 0
        artifacts = Path(os.environ.get("NEURONSCOPE_ARTIFACTS_DIR") or tmp_path)
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "notebook-outputs.png"
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    assert shot.stat().st_size > 5_000
