"""The ``neuronscope`` command line: ``arm``, ``show``, ``diff``, ``report``, ``run``, ``export``, ``artifacts``, ``ranks``.

Adding a command is one function: decorate it with ``@cli.command()`` (``from
neuronscope.cli._group import cli``) in a module of this package, and name that module in
``_group.COMMAND_MODULES``: a command's module is imported when the command is used (``show``
does not pay for ``run``'s or ``ranks``' imports). Errors follow the policy in
:mod:`neuronscope.cli._group` (one line on stderr; exit 2 usage, 1 failure).
"""

from __future__ import annotations

from typing import Any

from ._group import cli

__all__ = ["cli", "main"]


def main(args: list[str] | None = None) -> Any:
    """Console entry point (``neuronscope``, ``python -m neuronscope``)."""
    return cli.main(args=args, prog_name="neuronscope")
