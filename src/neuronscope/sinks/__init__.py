"""Where a finished run goes: the :class:`Sink` interface and the sinks in use.

Shaped like OpenTelemetry's ``SpanExporter``: the output worker hands each
:class:`~neuronscope.result.RunResult` to :func:`export`, which calls every sink's ``export`` in
order, and ``force_flush`` / ``shutdown`` go through :func:`flush` and :func:`shutdown` — one
path, one deadline. A sink's failure is contained here, in :func:`_contained` (logged and
counted); it never reaches the user's code nor stops the other sinks.

The sinks, in the order they run (chosen by configuration, :func:`active_sinks`):

* :class:`~neuronscope.sinks.run_format.RunDirectorySink` — summary.json and rank.json in the
  run directory (always, when the directory could be made; the output stage wrote the trace
  there before any sink);
* :class:`~neuronscope.sinks.otel.export.OtelSink` — spans and pushed metrics, when OpenTelemetry
  providers are configured;
* :class:`~neuronscope.sinks.otel.export.PrometheusSink` — the scrape endpoint's metrics, while
  one is serving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..result import RunResult

__all__ = ["CallbackSink", "Sink", "active_sinks", "add_sink", "export", "flush", "remove_sink", "shutdown"]


@runtime_checkable
class Sink(Protocol):
    """What a destination of finished runs implements."""

    name: str

    def export(self, result: RunResult) -> Mapping[str, Any] | None:
        """Send one finished run. Returns manifest fields to record (e.g. the trace id), or None."""

    def force_flush(self, timeout_s: float | None) -> bool:
        """Push out what is buffered; False when ``timeout_s`` ran out first."""

    def shutdown(self) -> None:
        """Release what the sink holds (providers it built, servers), at exit."""


class CallbackSink:
    """A :class:`Sink` that calls ``fn(result)`` for every finished run (nothing to flush)."""

    def __init__(self, fn: Any, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", repr(fn))

    def export(self, result: RunResult) -> None:
        self.fn(result)

    def force_flush(self, timeout_s: float | None) -> bool:
        return True

    def shutdown(self) -> None:
        pass


_extra: list[Sink] = []  # sinks added by code (tests, integrations), after the built-in ones
_lock = threading.Lock()


def add_sink(sink: Sink) -> None:
    """Also send every finished run to ``sink`` (after the built-in sinks)."""
    if not isinstance(sink, Sink):
        from ..errors import ConfigurationError

        raise ConfigurationError(
            f"add_sink({sink!r}): pass an object with name, export(result), force_flush(timeout_s) and shutdown()"
        )
    with _lock:
        if sink not in _extra:
            _extra.append(sink)


def remove_sink(sink: Sink) -> None:
    with _lock:
        if sink in _extra:
            _extra.remove(sink)


def active_sinks() -> list[Sink]:
    """The sinks a run goes to now, in order: the run directory, OpenTelemetry when configured,
    Prometheus while serving, then any added with :func:`add_sink`."""
    from .otel.export import active_otel_sinks

    return _with_run_directory_and_added(active_otel_sinks())


def _all_sinks() -> list[Sink]:
    """Every sink, serving or not: what flush and shutdown go through."""
    from .otel.export import all_otel_sinks

    return _with_run_directory_and_added(all_otel_sinks())


def _with_run_directory_and_added(otel: list[Any]) -> list[Sink]:
    from .run_format import RUN_DIRECTORY

    with _lock:
        extra = list(_extra)
    return [RUN_DIRECTORY, *otel, *extra]


def export(result: RunResult) -> RunResult:
    """Every active sink in order, each with the result as the ones before it left it (the run
    directory first: the spans point at its files); the manifest fields they return are added."""
    from dataclasses import replace

    manifest = dict(result.manifest)
    for sink in active_sinks():
        added = _contained(sink, "", sink.export, result, exc_info=False)
        if added:
            manifest.update(added)
            result = replace(result, manifest=dict(manifest))
    return result


def flush(timeout_s: float | None) -> bool:
    """``force_flush`` every sink within one deadline; False when any ran out of time."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    ok = True
    for sink in _all_sinks():
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        ok = _contained(sink, "flush", sink.force_flush, left) is not False and ok
    return ok


def shutdown() -> None:
    """``shutdown`` every sink (at interpreter exit, after :func:`flush`)."""
    for sink in _all_sinks():
        _contained(sink, "shutdown", sink.shutdown)


def _contained(sink: Sink, what: str, fn: Any, *args: Any, exc_info: bool = True) -> Any:
    """The one place a sink's failure stops: counted, logged (``sink 'otel' flush failed``), False."""
    from .. import _stats

    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a sink never raises into user code nor stops the others
        _stats.contain(f"sink {getattr(sink, 'name', sink)!r}{' ' + what if what else ''}", exc, exc_info=exc_info)
        return False
