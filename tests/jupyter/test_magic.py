"""``%load_ext neuronscope`` and ``%%neuronscope`` in an IPython shell of this process: the
options, what is displayed, the cell's value and namespace, ``ns.last_run()``, errors."""

from __future__ import annotations

import builtins
import sys
import warnings

import pytest

import neuronscope as ns

from ._html import table, text

IPython = pytest.importorskip("IPython")

CELL = """
import torch
import neuronscope as ns
x, w = torch.randn(64, 64), torch.randn(64)
for _ in range(3):
    y = torch.relu(x @ x)
    (y * w).sum().item()
    ns.step()
y.shape
"""


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    # the shell changes this process: __main__, builtins (__IPYTHON__, display), warning filters;
    # all put back afterwards, so no later test thinks it runs in IPython
    main, builtin_names, filters = sys.modules["__main__"], set(vars(builtins)), list(warnings.filters)
    mp = pytest.MonkeyPatch()
    mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))  # nothing written under $HOME
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=config)
    try:
        sh.run_line_magic("load_ext", "neuronscope")
        yield sh
    finally:
        InteractiveShell.clear_instance()
        mp.undo()
        sys.modules["__main__"] = main
        for name in set(vars(builtins)) - builtin_names:
            delattr(builtins, name)
        warnings.filters[:] = filters


def _run_magic(shell, line: str, cell: str):
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        value = shell.run_cell_magic("neuronscope", line, cell)
    return value, cap.outputs


def test_the_magic_profiles_the_cell_and_shows_the_run(shell):
    value, outputs = _run_magic(shell, "--name magic --top 3 --record-shapes", CELL)
    run = ns.last_run()
    assert run is not None and run.name == "magic" and run.status == "complete"
    assert tuple(value) == (64, 64)  # the cell's last expression is its value
    assert tuple(shell.user_ns["y"].shape) == (64, 64)  # it ran in the notebook's namespace
    assert len(outputs) == 1
    data = outputs[0].data
    assert data["text/plain"] == repr(run)
    html = data["text/html"]
    assert "neuronscope run magic" in text(html) and "status complete" in text(html)
    t = table(html, "nsnb-ops")
    assert len(t.rows) == 3 and "% of roof" in t.header  # --top 3, --record-shapes
    assert [a["data-op"] for a in t.row_attrs] == [r.name for r in run.summary.rows[:3]]
    assert run.summary["aten::mm"].calls == 3


def test_defaults_name_cell_and_top_10(shell):
    value, outputs = _run_magic(shell, "", "import torch\nfor _ in range(3): torch.relu(torch.ones(8, 8) @ torch.ones(8, 8))\n")
    run = ns.last_run()
    assert value is None and run.name == "cell"
    t = table(outputs[0].data["text/html"], "nsnb-ops")
    assert len(t.rows) == min(10, len([r for r in run.summary.rows if not r.compile])) and "% of roof" not in t.header


def test_an_error_in_the_cell_is_raised_after_the_run_is_shown(shell):
    with pytest.raises(ValueError, match="boom"):
        _run_magic(shell, "--name failing", "import torch\ntorch.ones(4).sum()\nraise ValueError('boom')\n")
    run = ns.last_run()
    assert run.name == "failing" and run.status == "error" and run.error == "ValueError"
    # and through run_cell, as a notebook runs it: the error is the cell's
    result = shell.run_cell("%%neuronscope --name failing2\nraise KeyError('k')\n")
    assert isinstance(result.error_in_exec, KeyError) and ns.last_run().name == "failing2"


def test_bad_options_are_usage_errors(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--top"):
        shell.run_cell_magic("neuronscope", "--top -1", "pass")
    with pytest.raises(UsageError):
        shell.run_cell_magic("neuronscope", "--no-such-option", "pass")
