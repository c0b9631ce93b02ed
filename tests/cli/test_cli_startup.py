"""Commands that only read files start without torch: ``--help``, ``show``, ``diff``,
``report``, ``artifacts``, ``export`` (bench/bench_cli_startup.py times them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import sys
from neuronscope.cli import cli
code = cli.main(args=sys.argv[1:], prog_name="neuronscope", standalone_mode=False)
sys.stderr.write("\\nTORCH_LOADED=%s CODE=%s\\n" % ("torch" in sys.modules, code))
"""


def _run(*args: str) -> tuple[bool, int, str]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120)
    tail = next((ln for ln in out.stderr.splitlines() if ln.startswith("TORCH_LOADED=")), None)
    assert tail is not None, out.stderr
    loaded, code = tail.split()
    return loaded.endswith("True"), int(code.split("=")[1]), out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["show", "{small}"],
        ["show", "{small}", "--json"],
        ["show", "{trace}"],
        ["diff", "{small}", "{big}"],
        ["report", "{small}", "-o", "{tmp}/r.html"],
        ["artifacts", "{small}", "--json"],
        ["export", "{small}", "--otlp-endpoint", "{otlp}"],
        ["arm", "--list"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_file_commands_never_import_torch(args, profiles, tmp_path):
    from cli._profiles import COMMITTED_TRACE

    from support.otlp_receiver import OtlpReceiver

    with OtlpReceiver("http") as rx:
        filled = [
            a.format(small=profiles.small, big=profiles.big, trace=COMMITTED_TRACE, tmp=tmp_path, otlp=rx.endpoint)
            for a in args
        ]
        loaded, code, stdout = _run(*filled)
    assert not loaded, f"`neuronscope {' '.join(filled)}` imported torch"
    assert code == 0
    if "--json" in args and args[0] == "show":
        assert json.loads(stdout)["ops"]


_IMPORTS_PROBE = """
import sys
from neuronscope.cli import cli
code = cli.main(args=sys.argv[1:], prog_name="neuronscope", standalone_mode=False)
sys.stderr.write("\\nMODULES=%s\\n" % ",".join(sorted(sys.modules)))
"""


def test_show_imports_only_what_it_uses(profiles):
    """``show`` starts in <= 10x a bare interpreter (bench/bench_cli_startup.py) by importing
    neither numpy (the rank analysis' constant once pulled it in) nor the other commands
    (``run``'s, ``ranks``' process pool...): each command's module is imported when it is used."""
    out = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE, "show", str(profiles.small)], capture_output=True, text=True, timeout=120)
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("MODULES="))
    modules = set(line.removeprefix("MODULES=").split(","))
    assert "neuronscope.cli.show" in modules
    for heavy in ("torch", "numpy", "concurrent.futures.process", "neuronscope.analysis.ranks", "opentelemetry.sdk"):
        assert heavy not in modules, heavy
    others = {f"neuronscope.cli.{m}" for m in ("arm", "artifacts", "diff", "export", "ranks", "report", "run")}
    assert not others & modules, others & modules


def test_every_command_is_listed_and_runs_from_its_own_module():
    from click.testing import CliRunner

    from neuronscope.cli import cli
    from neuronscope.cli._group import COMMAND_MODULES

    listed = cli.list_commands(None)  # type: ignore[arg-type]
    assert listed == sorted(COMMAND_MODULES)
    help_text = CliRunner().invoke(cli, ["--help"]).output
    for name in listed:
        assert f"  {name} " in help_text, name
        assert cli.get_command(None, name).name == name  # type: ignore[arg-type, union-attr]


def test_the_run_directory_names_the_rank_file_as_the_rank_analysis_does():
    from neuronscope.analysis.ranks import RANK_FILE
    from neuronscope.sinks import run_format

    assert run_format.RANK_FILE == RANK_FILE
