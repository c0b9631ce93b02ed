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
