"""The ``neuronscope`` click group and its error policy.

Every command is one function decorated with ``@cli.command()`` in a module named in
:data:`COMMAND_MODULES`, imported when the command is looked up. Errors never show a traceback unless ``--debug`` (or
``NEURONSCOPE_DEBUG=1``) is given; each is one line on stderr:

* exit 2: usage errors (bad option value, unknown flag, missing argument);
* exit 1: failures (missing or corrupt file, unwritable output, a failed CI gate);
* any other exit code: a command's own result (``run`` passes the script's through).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from .._version import __version__
from ..errors import NeuronscopeError

__all__ = ["COMMAND_MODULES", "EXIT_FAILURE", "EXIT_USAGE", "Failure", "NeuronscopeGroup", "cli"]

#: command name -> the module of this package that defines it (imported on first use: each
#: command pays only for its own imports, so ``show`` starts without ``run``'s or ``ranks``')
COMMAND_MODULES = {
    "arm": "arm",
    "artifacts": "artifacts",
    "diff": "diff",
    "export": "export",
    "ranks": "ranks",
    "report": "report",
    "run": "run",
    "show": "show",
}

EXIT_FAILURE = 1
EXIT_USAGE = 2
_EXIT_INTERRUPTED = 130


class Failure(click.ClickException):
    """A failure to report as one line and exit 1 (a missing file, an unwritable output...)."""

    exit_code = EXIT_FAILURE


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _env_debug() -> bool:
    from .. import _env

    return bool(_env.DEBUG.get(lenient=True))  # read while reporting an error: never raise there


class NeuronscopeGroup(click.Group):
    """A click Group whose ``main`` applies the one-line error policy (also under CliRunner)."""

    debug: bool = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{module}")  # its @cli.command registers it
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        self.debug = _env_debug()
        prog = prog_name or "neuronscope"
        try:
            rv = super().main(args, prog_name=prog, complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare `neuronscope`
                exc.show()
                code = EXIT_USAGE
            else:
                where = exc.ctx.command_path if exc.ctx is not None else prog
                hint = f" (see '{where} --help')"
                _error(f"{where}: error: {_one_line(exc.format_message())}{hint}")
                code = EXIT_USAGE
        except click.ClickException as exc:
            _error(f"{prog}: error: {_one_line(exc.format_message())}")
            code = exc.exit_code
        except click.Abort:
            _error(f"{prog}: interrupted")
            code = _EXIT_INTERRUPTED
        except BrokenPipeError:
            code = _quiet_broken_pipe()
        except (NeuronscopeError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                code = _quiet_broken_pipe()
            elif self.debug:
                raise
            else:
                _error(f"{prog}: error: {_describe(exc)}")
                code = EXIT_FAILURE
        except Exception as exc:  # a bug in neuronscope: one line, unless asked for details
            if self.debug:
                raise
            _error(
                f"{prog}: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                "(re-run with --debug for the traceback, and please report it)"
            )
            code = EXIT_FAILURE
        if standalone_mode:
            sys.exit(code)
        return code


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return _one_line(str(exc)) or type(exc).__name__


def _error(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _quiet_broken_pipe() -> int:
    """``neuronscope show run | head``: the reader left; exit quietly like other Unix tools."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_FAILURE


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and isinstance(ctx.command, NeuronscopeGroup):
        ctx.command.debug = True


@click.group(
    name="neuronscope",
    cls=NeuronscopeGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="neuronscope")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_set_debug,
    help="Show tracebacks for errors (also NEURONSCOPE_DEBUG=1).",
)
def cli() -> None:
    """neuronscope: why is my model slow? Per-op device time from torch.profiler traces.

    \b
    Examples:
      neuronscope run train.py --steps 10        profile a script, print its summary
      neuronscope show neuronscope-runs/infer-…  the op table of a run or trace.json(.gz)
      neuronscope diff before/ after/ --fail-if-slower 5
      neuronscope report before/ after/ -o report.html
      neuronscope arm 4242 --calls 3 --wait      profile the next 3 calls of a running process
    """
