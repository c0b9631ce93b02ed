"""``neuronscope show``: tables, --json schema, sorting, regions, widths, colour, errors, exit codes."""

from __future__ import annotations

import gzip
import json
import os
import pty
import re
import subprocess
import sys

import pytest

import neuronscope as ns
from cli._profiles import COMMITTED_TRACE, PYTHON
from neuronscope.cli import cli

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # SGR: colour and text style (not cursor movement)
OP_KEYS = {
    "name",
    "calls",
    "self_device_time_us",
    "device_time_us",
    "device_pct",
    "self_cpu_time_us",
    "cpu_time_us",
    "first_start_ns",
    "last_end_ns",
    "compile",
    "compile_time_us",
    "work",
    "roofline",
}


def _one_line_error(result, *needles: str) -> str:
    """stderr is exactly one line, names what is wrong, and shows no traceback."""
    err = result.stderr
    assert err.count("\n") == 1 and err.endswith("\n"), repr(err)
    assert "Traceback" not in err and "Traceback" not in result.stdout
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# -- output -------------------------------------------------------------------------------------


def test_show_committed_trace(runner):
    result = runner.invoke(cli, ["show", str(COMMITTED_TRACE)])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "cpu_rmsnorm.trace.json.gz" in out and "device time = CPU op time" in out
    assert "aten::pow" in out and "Self device time total: 514.072us" in out
    assert not ANSI.search(out)  # not a terminal: no colour


def test_show_a_trace_with_device_kernels(runner):
    """Device time comes from the kernels linked to each op (an emulated Neuron trace)."""
    trace = COMMITTED_TRACE.parent / "emulated_neuron_rmsnorm.trace.json.gz"
    result = runner.invoke(cli, ["show", str(trace), "--json", "--top", "0"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["total_device_time_us"] == pytest.approx(61.730, abs=1e-3)
    assert data["ops"][0]["name"] == "aten::pow" and data["ops"][0]["device_pct"] > 50
    assert data["total_cpu_time_us"] > data["total_device_time_us"]


def test_show_json_schema_matches_the_run(runner, profiles):
    result = runner.invoke(cli, ["show", str(profiles.small), "--json", "--top", "3"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    summary = ns.load_run(profiles.small).summary
    assert data["schema_version"] == 1
    assert set(data) == {
        "schema_version", "source", "device", "total_device_time_us", "total_cpu_time_us",
        "compile_time_us", "op_count", "sort", "top", "ops", "regions", "warnings", "notes", "diagnosis", "memory",
        "limits", "roofline", "device_classes",
    }  # fmt: skip
    assert data["limits"] is None and data["roofline"] is None  # no record_shapes: no roofline
    # a CPU profile: each op's device time (its CPU time) in its op's class, summing to the total
    classes = data["device_classes"]
    assert set(classes) == {"by_class_us", "by_op_us", "outside_ops_us", "graph_us", "total_us", "classified_pct"}
    assert classes["total_us"] == pytest.approx(data["total_device_time_us"])
    assert sum(classes["by_class_us"].values()) == pytest.approx(data["total_device_time_us"])
    assert classes["outside_ops_us"] == {} and classes["graph_us"] == 0.0  # no kernels on a CPU
    by_row = {r.name: r.self_device_time_us for r in summary.rows}
    expected = {"elementwise": 0.0, "reduction": 0.0, "copy": 0.0, "other": 0.0}
    for name, us in by_row.items():  # the naive RMSNorm's ops, by what they do
        kind = (
            "elementwise" if re.fullmatch(r"aten::(pow|add|sub|mul|div|rsqrt)_?", name)
            else "reduction" if name in ("aten::mean", "aten::sum")
            else "copy" if name in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::fill_")
            else "other"
        )  # fmt: skip
        expected[kind] += us
    assert set(classes["by_class_us"]) == {k for k, us in expected.items() if us > 0}
    for kind, us in expected.items():
        assert classes["by_class_us"].get(kind, 0.0) == pytest.approx(us, abs=1e-6), kind
    assert data["source"] == {"label": "small", "kind": "run", "path": str(profiles.small), "device": "cpu"}
    assert data["device"] == "cpu" and data["sort"] == "self_device" and data["top"] == 3
    assert data["op_count"] == len(summary) > 3
    assert data["total_device_time_us"] == pytest.approx(summary.total_device_time_us)
    assert [o["name"] for o in data["ops"]] == [r.name for r in summary.top(3)]
    assert all(set(o) == OP_KEYS for o in data["ops"])
    assert data["ops"][0]["calls"] == summary.rows[0].calls
    assert [r["path"] for r in data["regions"]] == ["forward", "forward/norm"]
    norm = data["regions"][1]
    assert norm["occurrences"] == 2 and norm["op_count"] == len(summary.regions["forward/norm"])
    assert len(norm["ops"]) == 3 and all(set(o) == OP_KEYS for o in norm["ops"])
    assert isinstance(data["warnings"], list) and isinstance(data["notes"], list)


@pytest.mark.parametrize(
    "sort, key, reverse",
    [
        ("calls", lambda o: o["calls"], True),
        ("name", lambda o: o["name"], False),
        ("cpu", lambda o: o["cpu_time_us"], True),
        ("self_cpu", lambda o: o["self_cpu_time_us"], True),
        ("device", lambda o: o["device_time_us"], True),
    ],
)
def test_show_sort(runner, sort, key, reverse):
    result = runner.invoke(cli, ["show", str(COMMITTED_TRACE), "--json", "--sort", sort, "--top", "0"])
    assert result.exit_code == 0, result.stderr
    ops = json.loads(result.stdout)["ops"]
    assert len(ops) == 13
    values = [key(o) for o in ops]
    assert values == sorted(values, reverse=reverse)


def test_show_top_limits_rows_and_says_how_many_are_hidden(runner):
    result = runner.invoke(cli, ["show", str(COMMITTED_TRACE), "--top", "2"])
    assert result.exit_code == 0
    assert "aten::pow" in result.stdout and "aten::result_type" not in result.stdout
    assert "11 more ops not shown" in result.stdout


def test_show_by_region(runner, profiles):
    result = runner.invoke(cli, ["show", str(profiles.small), "--by-region"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Regions" in out and "region forward/norm" in out and "region forward\n" in out
    # the region table lists occurrences: 2 steps
    row = next(line for line in out.splitlines() if line.startswith("forward/norm "))
    assert row.split()[1] == "2"


def test_show_directory_holding_just_a_trace(runner, tmp_path):
    (tmp_path / "host_1.pt.trace.json").write_bytes(gzip.decompress(COMMITTED_TRACE.read_bytes()))
    result = runner.invoke(cli, ["show", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["source"]["kind"] == "trace"


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_show_fits_the_terminal_width(runner, profiles, columns):
    result = runner.invoke(cli, ["show", str(profiles.small), "--by-region"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    table = [line for line in lines if line.startswith("aten::")]
    assert table
    # numbers are never cut short; only long names may be
    for line in table:
        assert re.search(r"\d(us|ms|s|%)$", line), line
    header = next(line for line in lines if line.startswith("Name"))
    assert "Self device" in header and "%" in header
    assert ("CPU total" in header) == (columns >= 80)


# -- colour ------------------------------------------------------------------------------------


def _run_in_pty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "neuronscope", *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(60), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_colour_on_a_tty_and_never_with_no_color():
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    code, tty_out = _run_in_pty(["show", str(COMMITTED_TRACE)], env)
    assert code == 0 and "aten::pow" in tty_out
    assert ANSI.search(tty_out), "a terminal should get colour"
    code, plain = _run_in_pty(["show", str(COMMITTED_TRACE)], {**env, "NO_COLOR": "1"})
    assert code == 0 and "aten::pow" in plain
    assert not ANSI.search(plain), plain[:500]


def test_no_color_via_clirunner(runner):
    result = runner.invoke(cli, ["show", str(COMMITTED_TRACE)], env={"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert result.exit_code == 0 and not ANSI.search(result.stdout)


# -- errors and exit codes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["show"], "PATH"),
        (["show", "x", "--top", "many"], "--top"),
        (["show", "x", "--top", "-1"], "--top"),
        (["show", "x", "--sort", "speed"], "--sort"),
        (["show", "x", "--frobnicate"], "--frobnicate"),
        (["nonsense"], "nonsense"),
    ],
)
def test_usage_errors_exit_2_with_one_line(runner, args, needle):
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    line = _one_line_error(result, needle)
    assert "--help" in line


def test_missing_file_exits_1_naming_it(runner, tmp_path):
    missing = tmp_path / "nope" / "trace.json.gz"
    result = runner.invoke(cli, ["show", str(missing)])
    assert result.exit_code == 1
    _one_line_error(result, str(missing), "run directory")


@pytest.mark.parametrize(
    "content",
    [b"", b"\x1f\x8b\x08\x00garbage", b'{"traceEvents": [{"ph": "X"', b'{"schemaVersion": 1}'],
)
def test_corrupt_trace_exits_1_naming_it(runner, tmp_path, content):
    bad = tmp_path / "bad.trace.json"
    bad.write_bytes(content)
    result = runner.invoke(cli, ["show", str(bad)])
    assert result.exit_code == 1
    _one_line_error(result, str(bad))


def test_corrupt_run_directory_exits_1(runner, tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    result = runner.invoke(cli, ["show", str(tmp_path)])
    assert result.exit_code == 1
    _one_line_error(result, "manifest.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli, ["show", str(empty)])
    assert result.exit_code == 1
    _one_line_error(result, str(empty), "trace.json")


@pytest.mark.parametrize("command", [[], ["show"], ["diff"], ["report"], ["run"]])
def test_help_everywhere(runner, command):
    result = runner.invoke(cli, [*command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.stdout and "--help" in result.stdout


def test_show_help_documents_the_json_schema(runner):
    text = runner.invoke(cli, ["show", "--help"]).stdout
    assert '"schema_version": 1' in text and "device_pct" in text and '"regions"' in text


def test_version(runner):
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0 and ns.__version__ in result.stdout


# -- a real process: what a shell or CI sees -----------------------------------------------------


def _python_m(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "neuronscope", *args], capture_output=True, text=True, timeout=120, env=env or dict(os.environ)
    )


def test_subprocess_exit_codes(tmp_path):
    ok = _python_m("show", str(COMMITTED_TRACE), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["op_count"] == 13

    missing = _python_m("show", str(tmp_path / "missing.json"))
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "missing.json" in missing.stderr
    assert "Traceback" not in missing.stderr

    usage = _python_m("show", str(COMMITTED_TRACE), "--sort", "nope")
    assert usage.returncode == 2 and usage.stderr.strip().count("\n") == 0 and "--sort" in usage.stderr

    debug = _python_m("--debug", "show", str(tmp_path / "missing.json"))
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "TraceLoadError" in debug.stderr


def test_broken_pipe_is_quiet():
    """`neuronscope show ... | head` must not print a BrokenPipeError traceback when the reader leaves."""
    # `true` exits at once, long before python has imported torch: every write hits a closed pipe.
    proc = subprocess.run(
        f"'{PYTHON}' -m neuronscope show '{COMMITTED_TRACE}' --top 0 | true",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr


def test_show_starts_with_the_diagnosis_and_json_carries_it(runner, profiles):
    import json as _json

    text = runner.invoke(cli, ["show", str(profiles.small)], env={"COLUMNS": "160"}).stdout
    head = text.split("Name")[0]
    assert "busy" in head and "-bound" in head  # the verdict comes before the op table
    data = _json.loads(runner.invoke(cli, ["show", str(profiles.small), "--json"]).stdout)
    d = data["diagnosis"]
    assert d["bound_by"] in ("device", "host", "launch", "sync", "data", "compile")
    assert abs(sum(d["idle_us_by_class"].values()) - d["device_idle_us"]) < 0.01
    from neuronscope.analysis.diagnosis import Diagnosis

    assert Diagnosis.from_dict(d).bound_by == d["bound_by"]
