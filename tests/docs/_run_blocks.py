"""Run one documentation page's python blocks, in order, in one namespace.

    python _run_blocks.py < blocks.json        # [{"label": "page.md:12", "code": "..."}, ...]

Exit 0 when every block ran; otherwise the traceback names the page and line.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def main() -> int:
    blocks = json.load(sys.stdin)
    namespace: dict = {"__name__": "__main__"}
    for block in blocks:
        label = block["label"]
        t0 = time.perf_counter()
        print(f"--- running {label}", flush=True)
        try:
            # Padded so that tracebacks name the page and its line: File "docs/index.md", line 42.
            page, _, fence_line = label.rpartition(":")
            source = "\n" * int(fence_line) + block["code"]
            exec(compile(source, f"docs/{page}", "exec"), namespace)
        except BaseException:  # noqa: BLE001 - report anything, including SystemExit
            sys.stdout.flush()
            print(f"--- FAILED {label}", file=sys.stderr, flush=True)
            traceback.print_exc()
            return 1
        print(f"--- ok {label} ({time.perf_counter() - t0:.2f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
