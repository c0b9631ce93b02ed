"""``neuronscope run script.py [args]``: the script's stdout, argv and exit status are its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from cli._profiles import PYTHON
from neuronscope.cli import cli

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import neuronscope as ns

    x, w = torch.randn(4, 64), torch.randn(64)
    with ns.region("forward"):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}))
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
    if mode == "raise":
        raise ValueError("boom from the script")
    if mode == "exit-message":
        sys.exit("fatal: told to stop")
    """
)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "scripts" / "workload.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


def _runs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if (p / "manifest.json").is_file()) if out.is_dir() else []


def test_run_in_a_real_process_keeps_stdout_argv_and_exit_code(script, tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.run(
        [PYTHON, "-m", "neuronscope", "run", "--output-dir", str(out), "--device", "cpu", str(script), "exit", "3", "--help", "-o", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "NO_COLOR"},
    )
    assert proc.returncode == 3, proc.stderr
    # stdout starts with exactly what the script printed; options after SCRIPT are the script's own
    first, _, rest = proc.stdout.partition("\n")
    seen = json.loads(first)
    assert seen == {"argv": [str(script), "exit", "3", "--help", "-o", "x"], "name": "__main__", "path0": str(script.parent)}
    # then the summary, on stdout like cProfile's; stderr holds none of it
    assert "Self device time total" in rest and "aten::mul" in rest
    assert "Self device time total" not in proc.stderr
    (run_dir,) = _runs(out)
    assert f"run directory: {run_dir}" in rest
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["name"] == "workload" and manifest["device"] == "cpu" and manifest["error"] is None
    assert "forward" in ns.load_run(run_dir).summary.regions


def test_run_in_process_with_clirunner(runner, script, tmp_path):
    out = tmp_path / "runs"
    argv_before, path0_before = sys.argv[:], sys.path[0]
    result = runner.invoke(cli, ["run", "--output-dir", str(out), str(script), "a b", "c"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["argv"] == [str(script), "a b", "c"]
    assert sys.argv == argv_before and sys.path[0] == path0_before  # restored
    assert "Self device time total" in result.stdout and len(_runs(out)) == 1


def test_script_exception_prints_its_traceback_exits_1_and_is_still_summarised(runner, script, tmp_path):
    out = tmp_path / "runs"
    result = runner.invoke(cli, ["run", "--output-dir", str(out), str(script), "raise"])
    assert result.exit_code == 1
    err = result.stderr
    assert "Traceback (most recent call last)" in err and "ValueError: boom from the script" in err
    assert str(script) in err
    assert "runpy" not in err and "neuronscope/cli" not in err  # the traceback starts at the script
    assert "Self device time total" in result.stdout  # summarised after the failure
    (run_dir,) = _runs(out)
    assert json.loads((run_dir / "manifest.json").read_text())["error"] == "ValueError"


def test_a_script_that_does_not_compile_is_not_profiled(runner, tmp_path):
    # nothing ran, so nothing is summarised or diagnosed: Python's own error, exit 1, no run
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\nx = (\n")
    out = tmp_path / "runs"
    result = runner.invoke(cli, ["run", "--output-dir", str(out), str(bad)])
    assert result.exit_code == 1
    assert "SyntaxError" in result.stderr and "broken.py" in result.stderr and "line 2" in result.stderr
    assert result.stdout == "" and not out.exists()


def test_sys_exit_with_a_message(runner, script, tmp_path):
    result = runner.invoke(cli, ["run", "--output-dir", str(tmp_path / "runs"), str(script), "exit-message"])
    assert result.exit_code == 1
    assert "fatal: told to stop" in result.stderr and "Traceback" not in result.stderr


def test_run_a_module(runner, script, tmp_path, monkeypatch):
    monkeypatch.chdir(script.parent)
    result = runner.invoke(cli, ["run", "--output-dir", str(tmp_path / "runs"), "-m", "workload", "exit", "0"])
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen["name"] == "__main__" and seen["argv"][1:] == ["exit", "0"] and seen["argv"][0].endswith("workload.py")
    assert "Self device time total" in result.stdout


def test_quiet_prints_no_summary_and_output_sends_it_to_a_file(runner, script, tmp_path):
    result = runner.invoke(cli, ["run", "-q", "--output-dir", str(tmp_path / "runs"), str(script)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["name"] == "__main__"  # the script's output, nothing else
    assert "Self device time total" not in result.stderr and len(_runs(tmp_path / "runs")) == 1
    target = tmp_path / "summary.txt"
    result = runner.invoke(cli, ["run", "-o", str(target), "--output-dir", str(tmp_path / "runs"), str(script), "exit", "4"])
    assert result.exit_code == 4  # still the script's exit code
    assert json.loads(result.stdout)["argv"][1:] == ["exit", "4"]
    text = target.read_text()
    assert "Self device time total" in text and "aten::mul" in text and "run directory:" in text


def test_an_output_file_that_cannot_be_written_is_refused_before_the_script_runs(runner, script, tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "summary.txt"
    result = runner.invoke(cli, ["run", "-o", str(missing), "--output-dir", str(tmp_path / "runs"), str(script), "exit", "3"])
    assert result.exit_code == 2, (result.stdout, result.stderr)  # a usage error, not the script's 3 or a failure's 1
    assert "--output" in result.stderr and "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == "" and not (tmp_path / "runs").exists()  # the script did not run


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["run"], 2, "SCRIPT"),
        (["run", "--device", "tpu", "x.py"], 2, "--device"),
        (["run", "--op-spans", "all", "x.py"], 2, "--op-spans"),
        (["run", "does/not/exist.py"], 1, "does/not/exist.py"),
        (["run", "-m", "no_such_module_neuronscope_test"], 1, "no_such_module_neuronscope_test"),
    ],
)
def test_run_errors(runner, args, code, needle):
    result = runner.invoke(cli, args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_run_on_an_absent_device_is_a_clear_failure(runner, script):
    result = runner.invoke(cli, ["run", "--device", "cuda", str(script)])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "--device cuda" in result.stderr and "not available" in result.stderr
    assert result.stdout == ""  # the script did not run
