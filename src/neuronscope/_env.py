"""Every ``NEURONSCOPE_*`` environment variable, and the one way they are read.

:data:`VARIABLES` lists each one (name, default, accepted form, what it does); docs/production.md
("Environment variables") is the same table for users. Read a registered variable with its
entry (``MAX_RUNS.get()``) and anything else with the typed readers (:func:`env_int`,
:func:`env_float`, :func:`env_bool`, :func:`env_str`, :func:`env_path`, :func:`env_choice`).
Surrounding whitespace is ignored; an unset or empty variable means its default.

What a malformed value does depends on where it is read:

* On the user's call path, where the user can fix it at once: raise
  :class:`~neuronscope.errors.ConfigurationError` naming the variable, the value and the
  accepted form, e.g. ``NEURONSCOPE_MAX_RUNS='ten': use a whole number >= 0 (0 = no limit)``.
  ``configure()`` and decorating a function with ``profile_neuron`` call :func:`check`, which
  validates every library variable at once; the ``neuronscope.testing`` tools read theirs
  with the default, raising ``.get()``.
* Everywhere else (import, a profiled call, the background workers, the exit flush):
  ``lenient=True``. One warning per variable and value names the variable and the default
  used, and the default is used: a typo never raises into the user's code nor skips the
  shutdown at exit.

Variables of other tools (torchrun's ``RANK``, ``OTEL_*``, ``NEURON_RT_*``) are read the way
those tools document, through the typed readers where they fit, and are not listed here.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .errors import ConfigurationError

__all__ = [
    "VARIABLES",
    "EnvVar",
    "check",
    "env_bool",
    "env_choice",
    "env_float",
    "env_int",
    "env_json_object",
    "env_path",
    "env_str",
]

log = logging.getLogger("neuronscope")

T = TypeVar("T")
D = TypeVar("D")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
BOOL_FORM = "1, true, yes or on (0, false, no or off to turn it off)"

_warned: set[tuple[str, str]] = set()  # (name, value): each bad value is warned about once


def _read(
    name: str,
    default: D,
    parse: Callable[[str], T],
    form: str,
    lenient: bool,
    environ: Mapping[str, str] | None,
    shown: str | None = None,
) -> T | D:
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except (ValueError, TypeError):
        message = f"{name}={raw!r}: use {form}"
    if not lenient:
        raise ConfigurationError(message)
    if (name, raw) not in _warned:
        _warned.add((name, raw))
        used = "ignoring it" if default is None else f"using the default ({shown or default})"
        log.warning("neuronscope: %s; %s", message, used)
    return default


# -- parsers: raise ValueError or TypeError on a malformed value ---------------------------------------------


def _parse_bool(raw: str) -> bool:
    word = raw.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(raw)


def _int_parser(lo: int | None, hi: int | None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(raw)
        return value

    return parse


def _int_form(lo: int | None, hi: int | None, note: str) -> str:
    if lo is not None and hi is not None:
        form = f"a whole number {lo}-{hi}"
    elif lo is not None:
        form = f"a whole number >= {lo}"
    elif hi is not None:
        form = f"a whole number <= {hi}"
    else:
        form = "a whole number"
    return f"{form} ({note})" if note else form


def _float_parser(lo: float | None) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if not math.isfinite(value) or (lo is not None and value < lo):  # inf would wait forever
            raise ValueError(raw)
        return value

    return parse


def _float_form(lo: float | None, unit: str) -> str:
    what = f"a number of {unit}" if unit else "a number"
    return f"{what} >= {lo:g}" if lo is not None else what


def _choice_parser(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(raw)
        return raw

    return parse


def _parse_json_object(raw: str) -> dict[str, Any]:
    value = json.loads(raw)  # JSONDecodeError is a ValueError
    if not isinstance(value, dict):
        raise TypeError(raw)
    return value


# -- typed readers --------------------------------------------------------------------------------


def env_bool(
    name: str,
    default: bool,
    *,
    lenient: bool = False,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case)."""
    return _read(name, default, _parse_bool, BOOL_FORM, lenient, environ)


def env_int(
    name: str,
    default: D,
    *,
    min: int | None = None,
    max: int | None = None,
    note: str = "",
    lenient: bool = False,
    environ: Mapping[str, str] | None = None,
) -> int | D:
    """A whole number within ``min``..``max``; ``note`` says what a special value means."""
    return _read(
        name,
        default,
        _int_parser(min, max),
        _int_form(min, max, note),
        lenient,
        environ,
    )


def env_float(
    name: str,
    default: D,
    *,
    min: float | None = None,
    unit: str = "",
    lenient: bool = False,
    environ: Mapping[str, str] | None = None,
) -> float | D:
    """A finite number >= ``min``."""
    return _read(name, default, _float_parser(min), _float_form(min, unit), lenient, environ)


def env_str(name: str, default: D, *, environ: Mapping[str, str] | None = None) -> str | D:
    """The value as text (never malformed); ``default`` when unset or blank."""
    return _read(name, default, str, "text", False, environ)


def env_path(name: str, default: D, *, environ: Mapping[str, str] | None = None) -> Path | D:
    """The value as a path, as given (never malformed); ``default`` when unset or blank."""
    return _read(name, default, Path, "a path", False, environ)


def env_choice(
    name: str,
    default: str,
    choices: Iterable[str],
    *,
    lenient: bool = False,
    environ: Mapping[str, str] | None = None,
) -> str:
    """One of ``choices`` (exactly as written)."""
    options = tuple(choices)
    return _read(
        name,
        default,
        _choice_parser(options),
        "one of " + ", ".join(options),
        lenient,
        environ,
    )


def env_json_object(
    name: str,
    default: D,
    *,
    lenient: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any] | D:
    """A JSON object (``{"key": value}``)."""
    return _read(
        name,
        default,
        _parse_json_object,
        'a JSON object such as {"key": 1}',
        lenient,
        environ,
    )


# -- the registry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One ``NEURONSCOPE_*`` variable: how it is parsed, its default and what it does."""

    name: str
    default: T
    parse: Callable[[str], T]  #: raises ValueError (or TypeError) on a malformed value
    form: str  #: what a good value looks like, for the error message and the docs
    shown_default: str  #: the default as the docs say it
    what: str
    scope: str = "library"  #: "library", "cli" (the neuronscope command) or "testing"

    def get(self, *, lenient: bool = False, environ: Mapping[str, str] | None = None) -> T:
        """The value; malformed: ConfigurationError, or with ``lenient`` one warning and the default."""
        return _read(
            self.name,
            self.default,
            self.parse,
            self.form,
            lenient,
            environ,
            self.shown_default.strip("`"),
        )


VARIABLES: dict[str, EnvVar[Any]] = {}


def _var(var: EnvVar[T]) -> EnvVar[T]:
    VARIABLES[var.name] = var
    return var


def _int_var(
    name: str,
    default: int,
    shown: str,
    what: str,
    *,
    lo: int = 0,
    hi: int | None = None,
    note: str = "0 = no limit",
) -> EnvVar[int]:
    return _var(EnvVar(name, default, _int_parser(lo, hi), _int_form(lo, hi, note), shown, what))


def _bool_var(name: str, default: bool, what: str, scope: str = "library") -> EnvVar[bool]:
    return _var(
        EnvVar(
            name,
            default,
            _parse_bool,
            BOOL_FORM,
            "on" if default else "off",
            what,
            scope,
        )
    )


def _path_var(name: str, default: D, shown: str, what: str, scope: str = "library") -> EnvVar[Path | D]:
    return _var(EnvVar[Path | D](name, default, Path, "a path", shown, what, scope))


DISABLED = _bool_var(
    "NEURONSCOPE_DISABLED",
    False,
    "the kill switch, read at import and when a function is decorated: decorators return the function "
    "itself, `with` blocks and regions do nothing",
)
OUTPUT_DIR = _path_var(
    "NEURONSCOPE_OUTPUT_DIR",
    Path("neuronscope-runs"),
    "`./neuronscope-runs`",
    "where run directories go, read per run (`output_dir=` and `configure(output_dir=)` win)",
)
MAX_RUNS = _int_var(
    "NEURONSCOPE_MAX_RUNS",
    100,
    "100",
    "retention: run directories kept in the output dir, oldest removed first (`configure(max_runs=)` wins)",
)
MAX_BYTES = _int_var(
    "NEURONSCOPE_MAX_BYTES",
    10 * 1024**3,
    "10 GiB",
    "retention: bytes of run directories kept in the output dir (`configure(max_bytes=)` wins)",
)
MAX_PENDING_BYTES = _int_var(
    "NEURONSCOPE_MAX_PENDING_BYTES",
    256 * 1024**2,
    "256 MiB",
    "backpressure: memory the profiles waiting to be written may hold before new samples are skipped "
    "(`configure(max_pending_bytes=)` wins)",
)
WORKER_NICE = _int_var(
    "NEURONSCOPE_WORKER_NICE",
    5,
    "5",
    "how far below the program's the priority (nice) of the thread that analyses a profile's windows is: "
    "when both want a core, the program gets it (`configure(worker_nice=)` wins)",
    hi=19,
    note="0 = the program's priority",
)
KEEP_USDT = _bool_var(
    "NEURONSCOPE_KEEP_USDT",
    False,
    "keep Kineto's `USDT: ... profiler_start/stop` stderr lines (`configure(keep_usdt_lines=)` wins)",
)
CONTROL = _bool_var(
    "NEURONSCOPE_CONTROL",
    True,
    "the local control channel `neuronscope arm PID` talks to (`configure(control=)` wins)",
)
CACHE_DIR = _path_var(
    "NEURONSCOPE_CACHE_DIR",
    None,
    "`$XDG_CACHE_HOME/neuronscope` (`~/.cache/neuronscope`)",
    "where the CPU's measured limits (the roofline's roofs) are cached, per host, torch version and thread count",
)
CONTROL_DIR = _path_var(
    "NEURONSCOPE_CONTROL_DIR",
    None,
    "`/tmp/neuronscope-<uid>`",
    "the private directory of the control sockets (the same for `neuronscope arm`)",
)
PROMETHEUS_PORT = _var(
    EnvVar[int | None](
        "NEURONSCOPE_PROMETHEUS_PORT",
        None,
        _int_parser(0, 65535),
        _int_form(0, 65535, "0 picks a free one"),
        "unset (no endpoint)",
        "serve metrics for Prometheus at `http://localhost:PORT/metrics`, read at import "
        "(`configure(prometheus_port=)` wins; local rank N of a torchrun job serves PORT + N)",
    )
)
EXIT_FLUSH_TIMEOUT = _var(
    EnvVar(
        "NEURONSCOPE_EXIT_FLUSH_TIMEOUT",
        10.0,
        _float_parser(0.0),
        _float_form(0.0, "seconds"),
        "10",
        "seconds the interpreter's exit may take for pending profiles and telemetry, the exporters' shutdown included",
    )
)
JOB_ID = _var(
    EnvVar[str | None](
        "NEURONSCOPE_JOB_ID",
        None,
        str,
        "text",
        "`TORCHELASTIC_RUN_ID`, else `MASTER_ADDR:MASTER_PORT`",
        "the distributed job's id: names `<output_dir>/<job id>/` and seeds its trace ids; the same on every rank",
    )
)
DEBUG = _bool_var(
    "NEURONSCOPE_DEBUG",
    False,
    "the `neuronscope` command prints tracebacks (as `--debug`)",
    "cli",
)
NEURON_MEM_TABLE_DIR = _path_var(
    "NEURONSCOPE_NEURON_MEM_TABLE_DIR",
    Path("/tmp"),
    "`/tmp`",
    "where the Neuron runtime's out-of-memory table is looked for (and where the emulator writes it)",
)
EMULATOR_BUILD_DIR = _path_var(
    "NEURONSCOPE_EMULATOR_BUILD_DIR",
    None,
    "`~/.cache/neuronscope/emulator-<torch version>`",
    "`neuronscope.testing`: where the emulated Neuron device's extension is built",
    "testing",
)
FAKE_EXPLORER_SUMMARY = _var(
    EnvVar[dict[str, Any]](
        "NEURONSCOPE_FAKE_EXPLORER_SUMMARY",
        {},
        _parse_json_object,
        'a JSON object such as {"key": 1}',
        "`{}`",
        "`neuronscope.testing`: fields the fake `neuron-explorer` merges into every summary",
        "testing",
    )
)
FAKE_EXPLORER_SCHEMA = _var(
    EnvVar(
        "NEURONSCOPE_FAKE_EXPLORER_SCHEMA",
        "7.4",
        _choice_parser(("7.4", "2.34")),
        "one of 7.4, 2.34",
        "`7.4`",
        "`neuronscope.testing`: `2.34` makes the fake `neuron-explorer` use the field names of Neuron 2.34",
        "testing",
    )
)


def check(scopes: Iterable[str] = ("library",), environ: Mapping[str, str] | None = None) -> None:
    """Raise one ConfigurationError naming every malformed variable of ``scopes`` (for the
    user's call path: ``configure()``, decorating a function)."""
    wanted = set(scopes)
    problems = []
    for var in VARIABLES.values():
        if var.scope in wanted:
            try:
                var.get(environ=environ)
            except ConfigurationError as exc:
                problems.append(str(exc))
    if problems:
        raise ConfigurationError("; ".join(problems))
