"""The Prometheus scrape endpoint's lifecycle: started from ``configure(prometheus_port=...)``
or ``NEURONSCOPE_PROMETHEUS_PORT``, moved, stopped, and forgotten in a forked child."""

from __future__ import annotations

import logging
import os
import threading

from ...errors import ConfigurationError
from .prometheus import PROMETHEUS_PORT_ENV, PrometheusEndpoint, start_endpoint

__all__ = ["prometheus_endpoint", "set_prometheus", "start_prometheus_from_environment", "stop_prometheus"]

log = logging.getLogger("neuronscope")
_prometheus: PrometheusEndpoint | None = None  # the scrape endpoint, when one was asked for
_prometheus_lock = threading.Lock()  # start/stop of the endpoint (binding a port can take a while)


def _port_for_this_rank(port: int | None) -> int | None:
    """Under torchrun every local rank inherits the same port: local rank N serves port + N."""
    if not port:
        return port  # None (stop) or 0 (a free port)
    from ..._ranks import current

    info = current()
    return port + info.local_rank if info is not None and info.local_rank else port


def set_prometheus(port: int | None, service_name: str | None, *, source: str) -> None:
    """Start, move or stop the endpoint. Raises ConfigurationError (nothing changed) on failure."""
    global _prometheus
    port = _port_for_this_rank(port)
    with _prometheus_lock:
        current = _prometheus
        if current is not None and port is not None and port in (current.requested_port, current.port):
            return  # already serving there
        new = start_endpoint(port, service_name, source=source) if port is not None else None
        _prometheus = new
    if current is not None:
        _stop(current)


def start_prometheus_from_environment() -> None:
    """``NEURONSCOPE_PROMETHEUS_PORT``: start the endpoint; problems are only logged, never raised."""
    from ... import _env
    from ..._config import disabled_by_environment

    if _prometheus is not None or disabled_by_environment():
        return  # (NEURONSCOPE_DISABLED=1: no profiles, so no server either)
    port = _env.PROMETHEUS_PORT.get(lenient=True)  # malformed: one warning naming it, no endpoint
    if port is None:
        return
    from . import settings

    try:
        set_prometheus(port, settings().service_name, source=PROMETHEUS_PORT_ENV)
    except ConfigurationError as exc:  # the port is in use, the exporter is missing
        log.warning("neuronscope: no Prometheus endpoint: %s", exc)


def prometheus_endpoint() -> PrometheusEndpoint | None:
    """The running scrape endpoint, or None: ``.url`` (``http://HOST:PORT/metrics``), ``.host``,
    ``.port`` (the one bound: with ``prometheus_port=0``, the free port picked). Public, for a
    service to register its scrape target::

        from neuronscope.sinks.otel import prometheus_endpoint
        ns.configure(prometheus_port=0)
        print(prometheus_endpoint().url)
    """
    return _prometheus


def _forget_prometheus_in_child() -> None:
    # A forked child has the listening socket but not the server thread: close its copy (the
    # parent keeps serving) and forget it; shutdown() would wait for a loop that is not running.
    global _prometheus
    endpoint, _prometheus = _prometheus, None
    if endpoint is not None:
        try:
            endpoint.close_socket_in_child()
        except Exception:  # noqa: BLE001
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_prometheus_in_child)


def stop_prometheus() -> None:
    """Stop serving (at shutdown)."""
    global _prometheus
    with _prometheus_lock:
        endpoint, _prometheus = _prometheus, None
    if endpoint is not None:
        _stop(endpoint)


def _stop(endpoint: PrometheusEndpoint) -> None:
    try:
        endpoint.stop()
    except Exception as exc:  # noqa: BLE001 - telemetry never raises into user code
        log.warning("neuronscope: stopping the Prometheus endpoint failed: %s", exc)
