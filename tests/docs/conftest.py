"""Print how many documentation code blocks ran and how many were marked not-run.

Under pytest-xdist (``make test``) the pages run in a worker: it hands its results to the
controller, which prints the line."""

from __future__ import annotations

import json
from collections import Counter

import _doc_blocks


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and _doc_blocks.RESULTS:  # an xdist worker: to the controller
        workeroutput["doc_blocks"] = json.dumps(_doc_blocks.RESULTS)


def pytest_testnodedown(node, error):  # the controller: a worker's results  # noqa: ARG001
    results = getattr(node, "workeroutput", {}).get("doc_blocks")
    if results:
        _doc_blocks.RESULTS.update(json.loads(results))


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # pytest passes all three by name
    results = _doc_blocks.RESULTS
    if not results:
        return
    ran = sum(r["ran"] for r in results.values())
    reasons = Counter(reason for r in results.values() for reason in r["not_run"])
    skipped = sum(reasons.values())
    terminalreporter.write_sep("-", "documentation code blocks")
    terminalreporter.write_line(
        f"{ran} python blocks ran on {len(results)} pages; {skipped} marked not-run"
        + (": " + "; ".join(f"{n} x {reason}" for reason, n in sorted(reasons.items())) if skipped else "")
    )
