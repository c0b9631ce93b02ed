"""Every ``python`` block of the documentation runs, on a CPU-only machine.

Each page runs in a fresh interpreter (pages may install the emulated Neuron device or a
global tracer provider, which cannot be undone), in a temporary directory, with run
directories under it and no OpenTelemetry export variables. Blocks marked
``<!-- not-run: reason -->`` are counted and reported, not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import _doc_blocks
from _doc_blocks import DOCS, doc_pages, parse_page

RUNNER = Path(__file__).with_name("_run_blocks.py")
PAGE_TIMEOUT_S = 240
# Pages with at least one runnable python block; the others have nothing to run (their
# marked blocks are still counted by the summary in conftest.py).
PAGES = [p.relative_to(DOCS).as_posix() for p in doc_pages() if parse_page(p).runnable]


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "NEURON_RT_INSPECT")) and k not in ("NEURONSCOPE_DISABLED", "NEURONSCOPE_OUTPUT_DIR")
    }
    env["NEURONSCOPE_OUTPUT_DIR"] = str(tmp / "runs")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_page(page: str | Path, tmp: Path) -> dict:
    parsed = parse_page(page if isinstance(page, Path) else DOCS / page)
    page = parsed.page
    blocks = [{"label": b.label, "code": b.code} for b in parsed.runnable]
    result = {"page": page, "ran": len(blocks), "not_run": [b.not_run for b in parsed.not_run], "labels": [b.label for b in parsed.not_run]}
    if not blocks:
        return result | {"returncode": 0, "output": "", "seconds": 0.0}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        cwd=tmp,
        env=_clean_env(tmp),
        timeout=PAGE_TIMEOUT_S,
    )
    return result | {
        "returncode": proc.returncode,
        "output": proc.stdout[-6000:] + "\n" + proc.stderr[-8000:],
        "seconds": time.perf_counter() - t0,
    }


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory) -> dict[str, Future]:
    """Start every selected page at once on a small pool (2 cores: ~2x faster than in turn) --
    one at a time in a pytest-xdist worker (``make test``): the other worker has the other core.
    Beside two busy processes, two pages at once and the other worker left distributed.md's
    2-rank job 5+ busy processes for 2 cores: the fast rank lost its core for longer than the
    slow rank's sleep in 2 of its 8 steps, and no rank was late in 80 % of them."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_page_code_blocks"
    ]
    in_xdist_worker = "PYTEST_XDIST_WORKER" in os.environ
    pool = ThreadPoolExecutor(max_workers=1 if in_xdist_worker else max(2, min(4, os.cpu_count() or 2)))
    request.addfinalizer(lambda: pool.shutdown(wait=True))
    futures = {}
    for page in selected:
        tmp = tmp_path_factory.mktemp("doc-" + page.replace("/", "-").removesuffix(".md"))
        futures[page] = pool.submit(_run_page, page, tmp)
    return futures


def test_pages_follow_the_block_convention():
    for page in doc_pages():
        parse_page(page)  # raises DocBlockError naming page and line


@pytest.mark.parametrize("page", PAGES)
def test_page_code_blocks(page: str, page_runs: dict[str, Future]):
    result = page_runs[page].result(timeout=PAGE_TIMEOUT_S + 30)
    _doc_blocks.RESULTS[page] = result
    if result["returncode"] != 0:
        pytest.fail(f"a python block of docs/{page} failed:\n{result['output']}", pytrace=False)
    assert result["ran"] == len(parse_page(DOCS / page).runnable)


def test_the_harness_fails_on_a_broken_block_and_skips_marked_ones(tmp_path):
    page = tmp_path / "broken.md"
    page.write_text(
        "# t\n\n```python\nvalue = 41\n```\n\n<!-- not-run: needs a unicorn -->\n```python\nimport unicorn\n```\n\n"
        "```bash\nfalse\n```\n\n```python\nassert value == 42, 'off by one'\n```\n",
        encoding="utf-8",
    )
    result = _run_page(page, tmp_path)
    assert result["ran"] == 2 and result["not_run"] == ["needs a unicorn"]
    assert result["returncode"] == 1
    assert 'File "docs/broken.md", line 17' in result["output"] and "off by one" in result["output"]

    marker_without_block = tmp_path / "marker.md"
    marker_without_block.write_text("<!-- not-run: why -->\nsome text\n", encoding="utf-8")
    with pytest.raises(_doc_blocks.DocBlockError, match="not followed by a python block"):
        parse_page(marker_without_block)
