"""A refused connection ends an export at once, instead of being retried for up to
``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s) per batch.

The official OTLP exporters retry a connection error with exponential backoff (1, 2, 4 s) until
their timeout: that is right for a collector that is restarting or overloaded (a reset, a
timeout, gRPC ``UNAVAILABLE`` from a server), but a *refused* connection — nothing listens on
that port — does not recover within a batch's few seconds, and those retries made
``neuronscope export`` to a dead endpoint take ~28 s and a script's exit 7-15 s.

So neuronscope's own exporters get, through their own options, a transport that reports a
refused connection as :class:`EndpointRefused` (a ``ConnectionRefusedError``), which neither
exporter counts among the errors it retries:

* OTLP/HTTP: the exporter's ``session=`` is a ``requests.Session`` that raises it;
* OTLP/gRPC: the exporter's channel gets a client interceptor that raises it when the call
  failed with ``UNAVAILABLE`` because the connection was refused (gRPC's own words).

Everything else (a 503, a timeout, a reset, an answer of ``UNAVAILABLE``) is retried by the
exporter as before, within its timeout — and at exit within ``NEURONSCOPE_EXIT_FLUSH_TIMEOUT``.
"""

from __future__ import annotations

import errno
from typing import Any

__all__ = ["EndpointRefused", "grpc_exporters", "http_session", "is_refused"]

#: what gRPC's core says when the TCP connection was refused (its status details)
_GRPC_REFUSED = "connection refused"


class EndpointRefused(ConnectionRefusedError):
    """Nothing listens at the OTLP endpoint: not retried. Its text keeps the system's words
    (``[Errno 111] Connection refused``), which the one-line failure report quotes."""


def is_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything it wraps (``__cause__``, ``__context__``, urllib3's
    ``reason``, the exception arguments requests wraps) is a refused connection."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen or len(seen) > 32:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return True
        todo += [e.__cause__, e.__context__, getattr(e, "reason", None)]
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
    return False


def http_session() -> Any:
    """A ``requests.Session`` for the OTLP/HTTP exporters' ``session=`` option."""
    import requests

    class _FailFastSession(requests.Session):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().request(*args, **kwargs)
            except requests.exceptions.ConnectionError as exc:
                if is_refused(exc):
                    raise EndpointRefused(errno.ECONNREFUSED, "Connection refused") from exc
                raise

    return _FailFastSession()


def grpc_exporters(endpoint: str | None, insecure: bool | None) -> tuple[Any, Any]:
    """The OTLP/gRPC span and metric exporters, whose channels fail at once on a refused
    connection. ``endpoint=None``: from the environment, as the exporters read it."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    kwargs: dict[str, Any] = {"endpoint": endpoint, "insecure": insecure} if endpoint else {}
    return _failing_fast(OTLPSpanExporter)(**kwargs), _failing_fast(OTLPMetricExporter)(**kwargs)


def _failing_fast(exporter_class: type) -> type:
    """``exporter_class`` with the interceptor on its channel. The exporter makes its channel in
    ``_initialize_channel_and_stub`` (again after an ``UNAVAILABLE``, to reconnect); where a
    version has no such method, the stock exporter is what runs, retries and all."""
    import grpc

    class _RefusalInterceptor(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
            outcome = continuation(client_call_details, request)
            if isinstance(outcome, grpc.RpcError) and outcome.code() == grpc.StatusCode.UNAVAILABLE:
                if _GRPC_REFUSED in str(outcome.details() or "").lower():
                    raise EndpointRefused(errno.ECONNREFUSED, "Connection refused") from outcome
            return outcome

    class FailFast(exporter_class):
        def _initialize_channel_and_stub(self) -> None:
            super()._initialize_channel_and_stub()
            channel, stub = getattr(self, "_channel", None), getattr(self, "_stub", None)
            if channel is not None and stub is not None:
                self._client = stub(grpc.intercept_channel(channel, _RefusalInterceptor()))

    FailFast.__name__ = FailFast.__qualname__ = exporter_class.__name__
    return FailFast
