"""Print how many documentation code blocks ran and how many were marked not-run."""

from __future__ import annotations

from collections import Counter

import _doc_blocks


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
