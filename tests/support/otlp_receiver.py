"""A real OTLP protocol peer on 127.0.0.1, for tests of the real OTLP exporters.

    with OtlpReceiver("http") as rx:                       # or OtlpReceiver("grpc")
        exporter = OTLPSpanExporter(endpoint=rx.traces_url)   # grpc: endpoint=rx.endpoint, insecure=True
        ...
        spans = rx.wait_for_spans(2, timeout=5)
        assert spans[1]["parent_span_id"] == spans[0]["span_id"]

Requests are decoded with the official ``opentelemetry-proto`` messages and answered as the OTLP
specification says (specification/protocol/otlp.md):

=============  ===========================================  =======================================
mode           OTLP/HTTP                                    OTLP/gRPC
=============  ===========================================  =======================================
"ok"           200 + Export*ServiceResponse; data recorded  OK + Export*ServiceResponse; recorded
"fail500"      500 + google.rpc.Status (NOT retryable)      INTERNAL (NOT retryable)
"unavailable"  503 + google.rpc.Status (retryable)          UNAVAILABLE (retryable)
"slow"         sleeps ``delay_s``, then behaves as "ok"     same
=============  ===========================================  =======================================

``signals=("traces",)`` makes a traces-only backend, as Arize Phoenix is: a metrics export gets
HTTP 405 Method Not Allowed (what Phoenix answers on ``/v1/metrics``; ``missing_status=404``: a
404, as a receiver without that pipeline answers), over gRPC UNIMPLEMENTED
(no MetricsService registered). Over HTTP such requests count in ``rx.requests`` and
``rx.request_log`` (mode "not served"); over gRPC they never reach the receiver's code.

``mode`` may be changed while the receiver runs (``rx.mode = "ok"``). Every export request that
reaches the receiver counts in ``rx.requests``, whatever the mode; only answered-OK ones are
decoded into ``rx.spans`` / ``rx.metrics``. A "slow" request is recorded after its delay even if
the client has given up by then (a real slow backend does the same; retries may duplicate data).
``retry_after_s`` adds a ``Retry-After`` header (HTTP) / ``google.rpc.RetryInfo`` trailer (gRPC) to
"unavailable" answers, which the exporters honour: it makes retry tests fast.

For a dead endpoint (nothing listening) no receiver is needed: use :func:`dead_endpoint`.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as ms_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = ["OtlpReceiver", "dead_endpoint", "MODES"]

MODES = ("ok", "fail500", "slow", "unavailable")

# ---------------------------------------------------------------------------------------------
# protobuf -> plain Python
# ---------------------------------------------------------------------------------------------


def _any_value(v) -> Any:
    """opentelemetry.proto.common.v1.AnyValue -> str/bool/int/float/bytes/list/dict/None."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return _attrs(v.kvlist_value.values)
    return getattr(v, kind)


def _attrs(kvs) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def _hex_or_none(b: bytes) -> str | None:
    return b.hex() if b else None


def _decode_spans(req: ts_pb2.ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": _hex_or_none(s.parent_span_id),
                        # "SPAN_KIND_INTERNAL" -> "INTERNAL"
                        "kind": trace_pb2.Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        "start_time_unix_nano": s.start_time_unix_nano,
                        "end_time_unix_nano": s.end_time_unix_nano,
                        "attributes": _attrs(s.attributes),
                        "events": [
                            {"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": _attrs(e.attributes)}
                            for e in s.events
                        ],
                        "links": [
                            {"trace_id": ln.trace_id.hex(), "span_id": ln.span_id.hex(), "attributes": _attrs(ln.attributes)}
                            for ln in s.links
                        ],
                        # "STATUS_CODE_ERROR" -> "ERROR"
                        "status_code": trace_pb2.Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                        "status_message": s.status.message,
                        "resource": resource,
                        "scope": ss.scope.name,
                        "scope_version": ss.scope.version,
                    }
                )
    return out


def _number(p) -> int | float | None:
    kind = p.WhichOneof("value")  # as_int | as_double
    return getattr(p, kind) if kind else None


def _decode_metrics(req: ms_pb2.ExportMetricsServiceRequest) -> list[dict]:
    out = []
    for rm in req.resource_metrics:
        resource = _attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")  # gauge | sum | histogram | exponential_histogram | summary
                data = getattr(m, kind) if kind else None
                points = []
                for p in data.data_points if data is not None else ():
                    point = {
                        "attributes": _attrs(p.attributes),
                        "start_time_unix_nano": p.start_time_unix_nano,
                        "time_unix_nano": p.time_unix_nano,
                    }
                    if kind in ("gauge", "sum"):
                        point["value"] = _number(p)
                    elif kind == "histogram":
                        point.update(
                            count=p.count,
                            sum=p.sum if p.HasField("sum") else None,
                            min=p.min if p.HasField("min") else None,
                            max=p.max if p.HasField("max") else None,
                            bucket_counts=list(p.bucket_counts),
                            explicit_bounds=list(p.explicit_bounds),
                        )
                    elif kind == "exponential_histogram":
                        point.update(
                            count=p.count,
                            sum=p.sum if p.HasField("sum") else None,
                            scale=p.scale,
                            zero_count=p.zero_count,
                            positive={"offset": p.positive.offset, "bucket_counts": list(p.positive.bucket_counts)},
                            negative={"offset": p.negative.offset, "bucket_counts": list(p.negative.bucket_counts)},
                        )
                    elif kind == "summary":
                        point.update(
                            count=p.count,
                            sum=p.sum,
                            quantiles={q.quantile: q.value for q in p.quantile_values},
                        )
                    points.append(point)
                metric = {
                    "name": m.name,
                    "unit": m.unit,
                    "description": m.description,
                    "kind": kind,
                    "data_points": points,
                    "resource": resource,
                    "scope": sm.scope.name,
                }
                if kind == "sum":
                    metric["is_monotonic"] = data.is_monotonic
                if kind in ("sum", "histogram", "exponential_histogram"):
                    # "AGGREGATION_TEMPORALITY_CUMULATIVE" -> "CUMULATIVE"
                    metric["temporality"] = metrics_pb2.AggregationTemporality.Name(
                        data.aggregation_temporality
                    ).removeprefix("AGGREGATION_TEMPORALITY_")
                out.append(metric)
    return out


# signal -> (request message, response message, decoder)
_SIGNALS: dict[str, tuple[type, type, Callable]] = {
    "traces": (ts_pb2.ExportTraceServiceRequest, ts_pb2.ExportTraceServiceResponse, _decode_spans),
    "metrics": (ms_pb2.ExportMetricsServiceRequest, ms_pb2.ExportMetricsServiceResponse, _decode_metrics),
}


# ---------------------------------------------------------------------------------------------
# the receiver
# ---------------------------------------------------------------------------------------------


class OtlpReceiver:
    """OTLP/HTTP or OTLP/gRPC receiver on 127.0.0.1:<free port>; use as a context manager.

    Attributes once started:
      endpoint    "http://127.0.0.1:PORT" (HTTP: base URL; gRPC: what OTLPSpanExporter(endpoint=...,
                  insecure=True) expects — the "http" scheme also implies insecure)
      address     "127.0.0.1:PORT"
      traces_url  endpoint + "/v1/traces"   (HTTP exporters take the full signal URL)
      metrics_url endpoint + "/v1/metrics"
    """

    def __init__(
        self,
        protocol: str = "http",
        mode: str = "ok",
        delay_s: float = 2.0,
        retry_after_s: float | None = None,
        signals: tuple[str, ...] = ("traces", "metrics"),
        missing_status: int = 405,
    ) -> None:
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
        if not signals or set(signals) - set(_SIGNALS):
            raise ValueError(f"signals must be some of {tuple(_SIGNALS)}, not {signals!r}")
        self.protocol = protocol
        self.signals = tuple(signals)
        self.missing_status = missing_status  # HTTP answer to a signal not served (Jaeger, Tempo: 404)
        self.mode = mode  # validated by the property setter
        self.delay_s = delay_s
        self.retry_after_s = retry_after_s
        self.port: int | None = None
        self._cond = threading.Condition()
        self._closing = threading.Event()  # wakes "slow" handlers when the receiver stops
        self._spans: list[dict] = []
        self._metrics: list[dict] = []
        self._requests = 0
        self._request_log: list[dict] = []
        self._server: Any = None

    # -- mode, switchable at any time ---------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {value!r}")
        self._mode = value

    # -- addresses ----------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    @property
    def traces_url(self) -> str:
        return self.endpoint + "/v1/traces"

    @property
    def metrics_url(self) -> str:
        return self.endpoint + "/v1/metrics"

    # -- what arrived -------------------------------------------------------------------------
    @property
    def spans(self) -> list[dict]:
        """Decoded spans (see _decode_spans for the keys), in arrival order. A copy."""
        with self._cond:
            return list(self._spans)

    @property
    def metrics(self) -> list[dict]:
        """Decoded metrics, one dict per metric per export request (see _decode_metrics). A copy."""
        with self._cond:
            return list(self._metrics)

    @property
    def requests(self) -> int:
        """Export requests received (all modes, both signals), retries included."""
        with self._cond:
            return self._requests

    @property
    def request_log(self) -> list[dict]:
        """Per request: signal, mode it was answered in, headers (HTTP) / metadata (gRPC)."""
        with self._cond:
            return list(self._request_log)

    def clear(self) -> None:
        with self._cond:
            self._spans.clear()
            self._metrics.clear()
            self._request_log.clear()
            self._requests = 0

    def _wait(self, what: Callable[[], int], n: int, timeout: float, label: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while what() < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"OtlpReceiver: {what()} {label} after {timeout}s, wanted {n}")
                self._cond.wait(left)

    def wait_for_spans(self, n: int, timeout: float = 5.0) -> list[dict]:
        """Block until at least n spans arrived; return them all. TimeoutError otherwise."""
        self._wait(lambda: len(self._spans), n, timeout, "spans")
        return self.spans

    def wait_for_metrics(self, n: int = 1, timeout: float = 5.0) -> list[dict]:
        self._wait(lambda: len(self._metrics), n, timeout, "metrics")
        return self.metrics

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> int:
        self._wait(lambda: self._requests, n, timeout, "requests")
        return self.requests

    # -- the one place every request goes through ---------------------------------------------
    def _not_served(self, signal: str, headers: dict) -> None:
        with self._cond:
            self._requests += 1
            self._request_log.append({"signal": signal, "mode": "not served", "headers": headers})
            self._cond.notify_all()

    def _handle(self, signal: str, body: Any, headers: dict) -> str:
        """Count, delay, decode and record one export request (body: protobuf bytes or an
        already-parsed request message). Returns the mode it is to be answered in."""
        mode = self.mode
        with self._cond:
            self._requests += 1
            self._request_log.append({"signal": signal, "mode": mode, "headers": headers})
            self._cond.notify_all()
        if mode == "slow":
            self._closing.wait(self.delay_s)
        if mode in ("fail500", "unavailable"):
            return mode
        req_type, _, decode = _SIGNALS[signal]
        req = req_type.FromString(body) if isinstance(body, bytes) else body  # DecodeError -> 400
        decoded = decode(req)
        with self._cond:
            (self._spans if signal == "traces" else self._metrics).extend(decoded)
            self._cond.notify_all()
        return "ok"

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "OtlpReceiver":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "OtlpReceiver":
        self._closing.clear()
        if self.protocol == "http":
            self._server = _start_http(self)
            self.port = self._server.server_address[1]
        else:
            self._server, self.port = _start_grpc(self)
        return self

    def stop(self) -> None:
        self._closing.set()  # release "slow" handlers at once
        if self._server is None:
            return
        if self.protocol == "http":
            self._server.shutdown()
            self._server.server_close()
        else:
            self._server.stop(grace=None).wait(5)
        self._server = None


# ---------------------------------------------------------------------------------------------
# OTLP/HTTP (binary protobuf) on the standard library's threading HTTP server
# ---------------------------------------------------------------------------------------------


def _status_body(code: int, message: str) -> bytes:
    """google.rpc.Status, the body the spec requires on 4xx/5xx answers."""
    from google.rpc import status_pb2  # googleapis-common-protos (a dependency of the gRPC exporter)

    return status_pb2.Status(code=code, message=message).SerializeToString()


def _start_http(rx: OtlpReceiver) -> ThreadingHTTPServer:
    paths = {"/v1/traces": "traces", "/v1/metrics": "metrics"}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's session expects

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _reply(self, status: int, body: bytes, extra: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            signal = paths.get(self.path.split("?")[0])
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if signal is None:
                return self._reply(404, _status_body(5, f"no OTLP signal at {self.path}"))
            if signal not in rx.signals:  # a traces-only backend (Phoenix) on /v1/metrics
                rx._not_served(signal, dict(self.headers.items()))
                return self._reply(rx.missing_status, b"", {"Allow": "OPTIONS"} if rx.missing_status == 405 else None)
            if "json" in (self.headers.get("Content-Type") or ""):
                return self._reply(415, _status_body(3, "this receiver speaks binary protobuf only"))
            try:
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                outcome = rx._handle(signal, body, dict(self.headers.items()))
            except Exception as e:  # noqa: BLE001 - undecodable: "Bad Data" -> 400, not retryable
                return self._reply(400, _status_body(3, f"bad OTLP request: {e}"))
            try:
                if outcome == "ok":
                    self._reply(200, _SIGNALS[signal][1]().SerializeToString())
                elif outcome == "fail500":
                    self._reply(500, _status_body(13, "OtlpReceiver mode=fail500"))
                else:  # unavailable
                    extra = {"Retry-After": f"{rx.retry_after_s:g}"} if rx.retry_after_s is not None else None
                    self._reply(503, _status_body(14, "OtlpReceiver mode=unavailable"), extra)
            except OSError:
                pass  # client gave up (timeout) and closed the socket: fine for a "slow" answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a "slow" handler never holds up stop()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


# ---------------------------------------------------------------------------------------------
# OTLP/gRPC: the official TraceService / MetricsService servicers on grpcio
# ---------------------------------------------------------------------------------------------


def _start_grpc(rx: OtlpReceiver):
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as ms_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as ts_grpc

    def export(signal: str, request, context):
        outcome = rx._handle(signal, request, dict(context.invocation_metadata()))
        if outcome == "fail500":
            context.abort(grpc.StatusCode.INTERNAL, "OtlpReceiver mode=fail500")
        if outcome == "unavailable":
            if rx.retry_after_s is not None:
                from google.rpc import error_details_pb2

                delay = error_details_pb2.RetryInfo()
                delay.retry_delay.FromNanoseconds(int(rx.retry_after_s * 1e9))
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", delay.SerializeToString()),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "OtlpReceiver mode=unavailable")
        return _SIGNALS[signal][1]()  # Export*ServiceResponse, partial_success unset

    class Traces(ts_grpc.TraceServiceServicer):
        def Export(self, request, context):
            return export("traces", request, context)

    class Metrics(ms_grpc.MetricsServiceServicer):
        def Export(self, request, context):
            return export("metrics", request, context)

    # so_reuseport=0: the free port we get is ours alone.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
    if "traces" in rx.signals:  # a service not registered answers UNIMPLEMENTED
        ts_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    if "metrics" in rx.signals:
        ms_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


# ---------------------------------------------------------------------------------------------
# a dead endpoint
# ---------------------------------------------------------------------------------------------

_reserved: list[socket.socket] = []  # held for the life of the process; see dead_endpoint()


def dead_endpoint() -> str:
    """"http://127.0.0.1:PORT" where nothing listens: connections are refused at once.

    The port is bound (so no later test can take it) but never listened on, for the life of the
    process. Works as the HTTP base URL (append "/v1/traces") and as the gRPC endpoint.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    _reserved.append(s)
    return f"http://127.0.0.1:{s.getsockname()[1]}"
