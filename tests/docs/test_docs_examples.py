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
PAGES = [p.relative_to(DOCS).as_posix() for p in doc_pages()]


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "NEURON_RT_INSPECT")) and k not in ("NEURONSCOPE_DISABLED", "NEURONSCOPE_OUTPUT_DIR")
    }
    env["NEURONSCOPE_OUTPUT_DIR"] = str(tmp / "runs")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_page(page: str, tmp: Path) -> dict:
    parsed = parse_page(DOCS / page)
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
    """Start every selected page at once on a small pool (2 cores: ~2x faster than in turn)."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_page_code_blocks"
    ]
    pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)))
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
    if result["ran"] == 0 and not result["not_run"]:
        pytest.skip(f"docs/{page} has no python blocks")
    if result["ran"] == 0:
        pytest.skip(f"docs/{page}: all {len(result['not_run'])} python blocks are marked not-run")
