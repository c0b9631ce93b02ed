"""The README's first screen: its python block runs as written, and its figures match the docs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_python_blocks_run_as_written(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    first = blocks[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NEURONSCOPE_OUTPUT_DIR"] = str(tmp_path / "runs")
    proc = subprocess.run([sys.executable, "-c", first], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "aten::addmm" in proc.stdout and "decode" not in proc.stderr
    assert len(list((tmp_path / "runs").iterdir())) == 2  # the block, and the decorated call


def test_one_measured_speed_figure():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    figures = set(re.findall(r"~(\d+)x faster", readme + index))
    assert figures == {"20"}, figures  # docs/performance.md: block exit -> run.summary, 0.050 of key_averages()
    assert "0.050" in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
