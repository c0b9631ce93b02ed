"""OpenTelemetry: the settings ``configure()`` applies, the providers we built (flushed and shut
down through the sinks), and where the rest lives — :mod:`.export` (the sinks), :mod:`.endpoint`
(the Prometheus endpoint's lifecycle), :mod:`.spans`, :mod:`.metrics`, :mod:`.providers`.

At interpreter exit (:func:`exiting`, entered by neuronscope's exit handler) the flush and the
shutdown of the providers neuronscope built keep within ``NEURONSCOPE_EXIT_FLUSH_TIMEOUT`` in
all: the flush gets all but the last second (a quarter of the timeout when that is shorter),
the shutdown the rest; an export still running at the flush's end — a dead or silent endpoint
being retried — is aborted, so the exporters have nothing left to wait for."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context

from ... import _env
from . import bounded
from . import metrics as _metrics
from . import providers as _providers
from .endpoint import prometheus_endpoint, set_prometheus, start_prometheus_from_environment, stop_prometheus
from .export import emit_rank_run
from .prometheus import parse_port
from .providers import OtelSettings, export_failure_reported

__all__ = [
    "capture_parent_context",
    "configure_otel",
    "emit_rank_run",
    "exit_handler_first",
    "exiting",
    "export_failure_reported",
    "export_outcome",
    "flush_providers",
    "prometheus_endpoint",
    "settings",
    "shutdown_own_providers",
    "shutdown_providers",
    "start_prometheus_from_environment",
]

log = logging.getLogger("neuronscope")
_SCOPE = "neuronscope"
_settings = OtelSettings()
_lock = threading.Lock()


def settings() -> OtelSettings:
    return _settings


def configure_otel(**changes: Any) -> None:
    """Apply OpenTelemetry options (validated first; nothing changes on error).

    ``prometheus_port`` (an int, 0 for a free port, or None to stop) starts or stops the
    scrape endpoint; a port already in use raises ConfigurationError and changes nothing.
    """
    global _settings
    port_given = "prometheus_port" in changes
    port = parse_port(changes.pop("prometheus_port", None), "configure(prometheus_port)") if port_given else None
    candidate = OtelSettings(**{**_settings.__dict__, **changes, "_own": []})
    candidate.validate()
    if port_given:
        set_prometheus(port, candidate.service_name, source="configure(prometheus_port)")
        if not changes:
            return  # the endpoint only: the push providers stay as they are
    with _lock:
        old = _settings
        _settings = candidate
        _prepared[0] = False
    if old.metrics_top_ops != candidate.metrics_top_ops:
        _metrics.reset_cardinality()
    # Providers we built for the old settings are ours to close.
    for provider in old.own_providers:
        if provider is not None:
            _metrics.forget_provider(provider)
    _shut_down(old.own_providers)


def capture_parent_context() -> Any:
    """The context current on the calling thread (cheap: one contextvar read), at the start of
    a profile. The first time (for these settings) it also has the providers the profile will
    be exported to made in the background (:func:`_prepare`); later it notes an application's
    provider installed since (:func:`exit_handler_first`)."""
    if not _prepared[0]:
        _prepare()
    else:  # a provider the application installed since (a few attribute reads; once per profile)
        _providers.note_providers_in_use(_settings)
    return otel_context.get_current()


_prepared = [False]


def _prepare() -> None:
    """Build neuronscope's own providers now, on the helper thread, rather than when the first
    profile is exported: that may be at interpreter exit (a script that ends right after its
    profile), where the SDK can no longer start the threads its providers and resource
    detectors need. Or note the application's providers, for the same reason: at exit they may
    be shut down already."""
    _prepared[0] = True
    if _providers.wants_own(_settings):
        from .service import note_caller_module

        note_caller_module()  # unnamed, the service is named after the profiled code's module
        _finish_before_threads_stop(bounded.submit(_providers.resolve_providers, _settings))
    else:  # the application's providers: keep the exit handler ahead of theirs (exit_handler_first)
        _providers.note_providers_in_use(_settings)


#: the latest build of our providers (a bounded job), waited for at threading's exit; and
#: whether that wait is registered (once a process, however often configure() runs)
_build: list[Any] = [None, False]


def _finish_before_threads_stop(job: Any) -> None:
    """At exit, let the providers' build (on the helper thread) finish before Python's threads
    stop taking work: building them detects the resource on a ThreadPoolExecutor, which refuses
    new work once the main thread has ended ("cannot schedule new futures after interpreter
    shutdown": beside two busy processes a script that ended right after its profile lost its
    export so). Hooks given to threading's exit run before ``concurrent.futures``' own when
    registered after it, and before any atexit handler. Bounded by the exit flush's timeout."""
    _build[0] = job
    register = getattr(threading, "_register_atexit", None)
    if _build[1] or register is None:
        return
    import concurrent.futures.thread  # noqa: F401 - its exit hook is registered first, so runs after ours

    try:
        register(_wait_for_build)
        _build[1] = True
    except RuntimeError:  # threading's exit has begun: too late to wait
        pass


def _wait_for_build() -> None:
    job = _build[0]
    if job is not None:
        job.done.wait(_env.EXIT_FLUSH_TIMEOUT.get(lenient=True))


def _forget_build_after_fork() -> None:
    # a forked child has no helper thread: its parent's pending build would never finish there
    _build[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_build_after_fork)


def _providers_to_flush() -> list[Any]:
    """The injected providers and the ones we built (the application flushes its global ones)."""
    found: list[Any] = []
    for provider in (_settings.tracer_provider, _settings.meter_provider, *_settings.own_providers):
        if provider is not None and hasattr(provider, "force_flush") and not any(provider is p for p in found):
            found.append(provider)
    return found


# -- the exit: flush and shutdown within one deadline -----------------------------------------

#: what the shutdown after the exit flush may take (at most; a quarter of a shorter timeout)
SHUTDOWN_RESERVE_S = 1.0


class _Exit:
    def __init__(self, timeout_s: float) -> None:
        now = time.monotonic()
        reserve = min(SHUTDOWN_RESERVE_S, timeout_s / 4)
        self.deadline = now + timeout_s  # flush and shutdown are over by then
        self.flush_deadline = self.deadline - reserve
        self.abort_at = self.deadline - reserve / 2  # a shutdown still running then is aborted


_exit: _Exit | None = None


@contextmanager
def exiting(timeout_s: float) -> Iterator[None]:
    """Inside: neuronscope's exit handler. :func:`flush_providers` and
    :func:`shutdown_own_providers` keep within ``timeout_s`` from now, together."""
    global _exit
    _exit = _Exit(timeout_s)
    try:
        yield
    finally:
        _exit = None
        health = getattr(_settings.own_providers, "health", None)
        if health is not None and health.aborted:
            health.quiet = True  # an aborted export ending after the handler says nothing more


def exit_handler_first(handler: Any) -> None:
    """Keep the atexit ``handler`` (neuronscope's exit flush) ahead of the SDK's: an
    application's TracerProvider / MeterProvider registers its own shutdown at exit when it is
    made, and atexit runs the last registered first — a provider made after neuronscope was
    imported would be shut down before the profiles still being processed reach it. When a
    provider neuronscope did not build is first emitted to, ``handler`` is registered again
    (so it runs before every handler registered until then)."""

    def again() -> None:
        if _exit is None:  # never while the exit handlers run
            atexit.unregister(handler)
            atexit.register(handler)

    _providers.on_external_provider(again)


def flush_providers(timeout_s: float | None) -> bool:
    """``force_flush`` the providers within ``timeout_s`` (None: as long as it takes); False
    when the time ran out. An export still running then goes on in the background — unless this
    is the exit, where it is aborted."""
    ex = _exit
    deadline = time.monotonic() + (30.0 if timeout_s is None else timeout_s)
    if ex is not None:
        deadline = min(deadline, ex.flush_deadline)
    health = getattr(_settings.own_providers, "health", None)
    ok = True
    for provider in _providers_to_flush():
        if ex is not None and health is not None and health.failing and not health.aborted:
            _abort_own()  # its last export failed (and said so): the exit does not wait for it
        left = deadline - time.monotonic()
        if left <= 0:
            ok = False
            break
        if timeout_s is None and ex is None:
            job = bounded.run_inline(provider.force_flush, int(left * 1000))
        else:
            job = bounded.submit(provider.force_flush, int(left * 1000))
        if not job.done.wait(left) and ex is not None:
            # the exit's time for the flush is up: stop the export still retrying, and give it
            # a moment to end (and to say, in its one line, why it failed)
            _abort_own()
            job.done.wait(max(ex.abort_at - time.monotonic(), 0.0))
        if not job.done.is_set():
            ok = False
            break  # the next flush would wait behind it
        if isinstance(job.result, Exception):
            log.warning("neuronscope: %s failed: %s", getattr(provider.force_flush, "__qualname__", "force_flush"), job.result)
        ok = ok and job.result is not False and not isinstance(job.result, Exception)
    if health is not None and health.take_failed():
        ok = False  # an export failed since the last flush: not everything was delivered
    if not ok and ex is not None:
        _abort_own()
    return ok


def export_outcome() -> dict[str, dict[str, Any]] | None:
    """What neuronscope's own exporters delivered so far, per signal (``traces``,
    ``metrics``): ``delivered`` / ``lost`` export batches, ``not_taken`` (the endpoint's answer
    when it does not take that signal, else None), ``off`` (turned off with
    ``OTEL_<SIGNAL>_EXPORTER=none``), ``reason`` (why its first failed export failed). None
    when neuronscope built no exporting providers."""
    own = _settings.own_providers
    health = getattr(own, "health", None)
    if health is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for i, signal in enumerate(("traces", "metrics")):
        out[signal] = {
            "delivered": health.delivered[signal],
            "lost": health.lost[signal],
            "not_taken": health.not_taken.get(signal),
            "off": own[i] is None,
            "reason": health.reasons.get(signal),
        }
    return out


def _abort_own() -> None:
    health = getattr(_settings.own_providers, "health", None)
    if health is not None and not health.aborted:
        _safe(health.abort)


def shutdown_own_providers() -> None:
    """Shut down the providers neuronscope built (never the application's); at exit within the
    exit deadline."""
    _shut_down(_settings.own_providers)


def _shut_down(own: Any) -> None:
    providers = [p for p in own if p is not None]
    if not providers or getattr(own, "closed", False):
        return
    try:
        own.closed = True  # once: the SDK warns on a second shutdown
    except AttributeError:  # a plain list: nothing remembers it
        pass

    def shut() -> None:
        for provider in providers:
            _safe(provider.shutdown)

    ex = _exit
    if ex is None:
        shut()
        return
    job = bounded.submit(shut)
    if not job.done.wait(max(ex.abort_at - time.monotonic(), 0.0)):
        _abort_own()  # e.g. the final metric export meets an endpoint that just died
        job.done.wait(max(ex.deadline - time.monotonic(), 0.0))


def shutdown_providers() -> None:
    """Every OpenTelemetry sink's shutdown: our providers, then the Prometheus endpoint."""
    shutdown_own_providers()
    stop_prometheus()


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: %s failed: %s", getattr(fn, "__qualname__", fn), exc)
        return False
