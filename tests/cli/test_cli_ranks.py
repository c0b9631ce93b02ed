"""``neuronscope ranks``: the table, --steps, --json, --html, --fail-on-straggler, its errors,
and that it starts without torch (on synthetic jobs, tests/multirank/synthetic.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from multirank.synthetic import make_job

from neuronscope.cli import cli


@pytest.fixture
def job(tmp_path):
    return make_job(tmp_path / "runs", ranks=4, steps=5, data_us={3: 2500})


def _run(args, capsys):
    code = cli.main(args=[str(a) for a in args], prog_name="neuronscope", standalone_mode=False)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table(job, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    code, out, _ = _run(["ranks", job, "--steps"], capsys)
    assert code == 0
    assert "STRAGGLER rank 3" in out and "cause: data" in out
    assert "rank 3 *" in out and "Steps (wall time per rank)" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("rank ")]
    assert [r.split()[1] for r in rows] == ["0", "1", "2", "3"]


def test_json(job, capsys):
    code, out, _ = _run(["ranks", job, "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["schema_version"] == 1
    assert d["straggler"]["rank"] == 3 and d["straggler"]["cause"] == "data"
    assert d["clock"]["method"] == "collective_ends" and len(d["steps"]) == 5
    assert set(d["ranks"][0]) >= {"rank", "step_p50_us", "device_busy_pct", "collective_us", "collective_wait_us", "late_us", "clock_offset_us"}


def test_html_and_the_ci_gate(job, tmp_path, capsys):
    page = tmp_path / "r.html"
    code, _, err = _run(["ranks", job, "--html", page, "--fail-on-straggler"], capsys)
    assert code == 1  # a straggler was found
    assert f"wrote {page}" in err
    assert page.read_text().count('class="rank-lane"') == 4
    balanced = make_job(tmp_path / "b", ranks=2, steps=4)
    assert _run(["ranks", balanced, "--fail-on-straggler"], capsys)[0] == 0


def test_errors_are_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "neuronscope", "ranks", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().startswith("neuronscope: error:") and "no runs found" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, "-m", "neuronscope", "ranks"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Missing argument" in out.stderr


_PROBE = """
import sys
from neuronscope.cli import cli
code = cli.main(args=sys.argv[1:], prog_name="neuronscope", standalone_mode=False)
sys.stderr.write("\\nTORCH_LOADED=%s CODE=%s\\n" % ("torch" in sys.modules, code))
"""


@pytest.mark.parametrize("from_traces", [False, True])
def test_ranks_never_imports_torch(tmp_path, from_traces):
    job = make_job(tmp_path / "runs", ranks=2, steps=3, host_us={1: 2000}, save_trace=from_traces)
    if from_traces:  # runs of an older neuronscope: only the traces; rank.json is computed from them
        for f in job.glob("rank*/*/rank.json"):
            f.unlink()
    out = subprocess.run([sys.executable, "-c", _PROBE, "ranks", str(job), "--json"], capture_output=True, text=True, timeout=120)
    tail = next(ln for ln in out.stderr.splitlines() if ln.startswith("TORCH_LOADED="))
    assert tail == "TORCH_LOADED=False CODE=0", out.stderr
    d = json.loads(out.stdout)
    assert d["straggler"]["rank"] == 1 and d["collectives"] == 3
