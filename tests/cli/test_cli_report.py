"""``neuronscope report``: writes the HTML file; errors name the path."""

from __future__ import annotations

import re

from cli._profiles import COMMITTED_TRACE
from neuronscope.cli import cli


def test_report_single_and_diff(runner, profiles, tmp_path):
    out = tmp_path / "one.html"
    result = runner.invoke(cli, ["report", str(profiles.small), "-o", str(out), "--title", "My <run>"])
    assert result.exit_code == 0, result.stderr
    assert f"wrote {out}" in result.stderr and result.stdout == ""
    html = out.read_text()
    assert "<title>My &lt;run&gt;</title>" in html and 'id="op-chart-a"' in html and 'id="diff-chart"' not in html

    both = tmp_path / "both.html"
    result = runner.invoke(cli, ["report", str(profiles.small), str(profiles.big), "-o", str(both), "--top", "5"])
    assert result.exit_code == 0, result.stderr
    html = both.read_text()
    assert 'id="diff-chart"' in html and 'id="op-chart-b"' in html
    assert len(re.findall(r'class="op-bar"', html)) == 10  # 5 per run


def test_report_default_output_in_cwd(runner, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["report", str(COMMITTED_TRACE)])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "neuronscope-report.html").stat().st_size > 5000


def test_report_errors(runner, profiles, tmp_path):
    missing = runner.invoke(cli, ["report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")])
    assert missing.exit_code == 1 and str(tmp_path / "missing") in missing.stderr and missing.stderr.count("\n") == 1
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    bad_out = runner.invoke(cli, ["report", str(profiles.small), "-o", str(unwritable / "r.html")])
    assert bad_out.exit_code == 1 and "r.html" in bad_out.stderr and bad_out.stderr.count("\n") == 1
    assert "Traceback" not in bad_out.stderr
    is_dir = runner.invoke(cli, ["report", str(profiles.small), "-o", str(tmp_path)])
    assert is_dir.exit_code == 2 and "--output" in is_dir.stderr
    too_many = runner.invoke(cli, ["report", "a", "b", "c"])
    assert too_many.exit_code == 2 and too_many.stderr.count("\n") == 1
