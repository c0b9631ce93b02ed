"""The ``neuronscope`` command line: ``arm``, ``show``, ``diff``, ``report``, ``run``, ``export``, ``artifacts``, ``ranks``.

Adding a command is one function: decorate it with ``@cli.command()`` (``from
neuronscope.cli._group import cli``) in a module imported below. Errors follow the policy
in :mod:`neuronscope.cli._group` (one line on stderr; exit 2 usage, 1 failure).
"""

from __future__ import annotations

from typing import Any

from . import arm, artifacts, diff, export, ranks, report, run, show  # noqa: F401 - importing registers the commands
from ._group import cli

__all__ = ["cli", "main"]


def main(args: list[str] | None = None) -> Any:
    """Console entry point (``neuronscope``, ``python -m neuronscope``)."""
    return cli.main(args=args, prog_name="neuronscope")
