"""docs/roofline.md's device table is the code's table (analysis/roofs.py DEVICES), figure by figure."""

from __future__ import annotations

from pathlib import Path

from neuronscope.analysis.roofs import DEVICES

DOC = Path(__file__).resolve().parents[2] / "docs" / "roofline.md"
COLUMNS = ("matrix/fp64", "vector/fp32", "matrix/fp32", "matrix/tf32", "matrix/bf16", "matrix/fp16", "matrix/fp8", "matrix/int8")


def _cell(v: float | None) -> str:
    return "—" if not v else f"{v / 1e12:g}"


def device_rows() -> list[str]:
    rows = []
    for d in DEVICES.values():
        cells = [_cell(d.peak_flops.get(k)) for k in COLUMNS]
        rows.append(f"| {d.name} | {d.scope} | {' | '.join(cells)} | {d.memory_bandwidth / 1e9:g} | {d.source} |")
    return rows


def test_every_device_of_the_code_is_in_the_docs_with_the_same_figures():
    text = DOC.read_text()
    lines = {line.strip() for line in text.splitlines()}
    missing = [row for row in device_rows() if row not in lines]
    assert not missing, "docs/roofline.md lacks (or has other figures for):\n" + "\n".join(missing)


def test_the_docs_list_no_device_the_code_does_not_know():
    text = DOC.read_text()
    start = text.index("<!-- devices -->")
    end = text.index("<!-- /devices -->")
    rows = [line for line in text[start:end].splitlines() if line.startswith("| ") and not line.startswith("| device") and not line.startswith("|---")]
    assert sorted(rows) == sorted(device_rows())
