"""Every corpus trace through the public ways of reading it: the proof that a refactor of the
analysis changed no answer (issue 38).

For each trace in the real-trace corpus (``NEURONSCOPE_REAL_TRACES``, default
/work/shared/real-traces) and ``tests/data``, writes one JSON line per way of reading it:
``ns.diagnose(path).to_dict()``, ``ns.diagnose_memory(path).to_dict()`` (or the error it
raised), and ``neuronscope show --json`` (the top 20 and ``--top 0 --by-region``). Run it
with two checkouts' ``src`` and compare the files byte for byte::

    PYTHONPATH=<before>/src python bench/corpus_outputs.py before.jsonl
    PYTHONPATH=<after>/src  python bench/corpus_outputs.py after.jsonl
    cmp before.jsonl after.jsonl   # or: python bench/corpus_outputs.py --diff before.jsonl after.jsonl
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def corpus() -> list[Path]:
    real = Path(os.environ.get("NEURONSCOPE_REAL_TRACES", "/work/shared/real-traces"))
    traces = sorted(real.glob("*.json.gz")) if real.is_dir() else []
    return traces + sorted((ROOT / "tests" / "data").glob("*.trace.json.gz"))


def _guarded(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - an error is an answer too: it must not change either
        return {"raised": type(exc).__name__, "message": str(exc)}


def _show(path: Path, *args: str) -> Any:
    from click.testing import CliRunner

    from neuronscope.cli import cli

    out = CliRunner().invoke(cli, ["show", "--json", *args, str(path)])
    if out.exit_code != 0:
        return {"exit_code": out.exit_code, "output": out.output}
    data = json.loads(out.stdout)
    data["source"]["path"] = path.name  # the checkout's absolute path is not an answer
    return data


def outputs(path: Path) -> dict[str, Any]:
    import neuronscope as ns

    return {
        "trace": path.name,
        "diagnose": _guarded(lambda: ns.diagnose(path).to_dict()),
        "diagnose_gap_20us": _guarded(lambda: ns.diagnose(path, gap_threshold_us=20).to_dict()),
        "diagnose_memory": _guarded(lambda: ns.diagnose_memory(path).to_dict()),
        "show": _show(path),
        "show_all_regions": _show(path, "--top", "0", "--by-region"),
    }


def _diff(before: Path, after: Path) -> int:
    a = [json.loads(line) for line in before.read_text().splitlines()]
    b = [json.loads(line) for line in after.read_text().splitlines()]
    differing = 0
    for x, y in zip(a, b):
        for key in x:
            if x[key] != y.get(key):
                differing += 1
                print(f"{x['trace']}: {key} differs")
    print(f"{len(a)} traces before, {len(b)} after; {differing} outputs differ")
    return 1 if differing or len(a) != len(b) else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--diff"]:
        return _diff(Path(argv[1]), Path(argv[2]))
    out = Path(argv[0])
    with out.open("w") as f:
        for path in corpus():
            f.write(json.dumps(outputs(path), sort_keys=True, default=str) + "\n")
            f.flush()
            print(path.name, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
