"""A real headless Chromium for the HTML tests (Playwright driving the system's chromium).

Skipped when playwright or a chromium is missing, unless NEURONSCOPE_REQUIRE_BROWSER=1 (CI),
which turns the skip into a failure. NEURONSCOPE_CHROMIUM names a binary explicitly.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRED = os.environ.get("NEURONSCOPE_REQUIRE_BROWSER", "") == "1"


def chromium() -> str | None:
    explicit = os.environ.get("NEURONSCOPE_CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"NEURONSCOPE_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def launch() -> Iterator[Any]:
    """Yield a launched browser (for a module-scoped fixture); closed afterwards."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install playwright)")
    executable = chromium()
    if executable is None:
        unavailable("no chromium found (apt-get install -y chromium, or set NEURONSCOPE_CHROMIUM)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()
