"""The documentation site builds with ``mkdocs build --strict``, and the API page is complete.

Strict mode turns every warning into a failure: a page missing from (or absent but listed
in) the nav, a broken link or anchor, an API reference that does not resolve.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from _doc_blocks import DOCS, ROOT

MKDOCS_YML = ROOT / "mkdocs.yml"


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason='the docs extra is not installed: pip install -e ".[docs]"')
    pytest.importorskip("material", reason='the docs extra is not installed: pip install -e ".[docs]"')
    pytest.importorskip("mkdocstrings_handlers.python", reason='the docs extra is not installed: pip install -e ".[docs]"')
    missing = [p for p in _nav_pages() if not (DOCS / p).is_file()]
    assert not missing, f"pages in the mkdocs.yml nav that do not exist under docs/: {missing}"
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's end-of-life banner
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(MKDOCS_YML), "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    for page in _nav_pages():
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), f"{page} was not built ({built})"
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="neuronscope.profile_neuron"' in api and 'id="neuronscope.testing.install_emulated_neuron"' in api


def _nav_pages() -> list[str]:
    yaml = pytest.importorskip("yaml")
    nav = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))["nav"]
    pages: list[str] = []

    def walk(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                if isinstance(value, list):
                    walk(value)
                elif isinstance(value, str) and value.endswith(".md"):
                    pages.append(value)

    walk(nav)
    return pages


def test_every_docs_page_is_in_the_nav():
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith("_")}
    assert on_disk <= set(_nav_pages()), f"pages missing from the nav: {sorted(on_disk - set(_nav_pages()))}"


def test_api_reference_covers_the_public_api():
    import neuronscope
    import neuronscope.testing

    api = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: neuronscope\.(\w+)\s*$", api, re.M))
    missing = sorted(set(neuronscope.__all__) - documented - {"__version__"})
    assert not missing, f"public names without an entry in docs/api.md: {missing}"
    assert "__version__" in api
    testing_documented = set(re.findall(r"^::: neuronscope\.testing\.(\w+)\s*$", api, re.M))
    assert set(neuronscope.testing.__all__) <= testing_documented
    unknown = sorted(documented - set(neuronscope.__all__) - {"testing"})
    assert not unknown, f"docs/api.md documents names that are not public: {unknown}"
