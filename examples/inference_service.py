"""A small HTTP inference service with neuronscope left in production code.

FastAPI + OpenTelemetry's FastAPI instrumentation: every request gets a server span; the
handler is decorated with ``profile_neuron(sample=...)`` and regions, so a sampled request's
trace holds the profile (root span, regions, per-op aggregate spans) under its request span.

The service sets up OpenTelemetry as any service does (``setup_telemetry``): its own global
TracerProvider and MeterProvider, exporting over OTLP where the standard variables say. The
FastAPI instrumentation makes its request spans with that provider, and neuronscope uses it too
— request and profile in one trace. (neuronscope's own providers, the ones it builds when only
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, are for scripts: they never become the global
provider, so without the application's the request spans are never recorded.)

Long inputs (more than 1024 rows) take a slow path: the projection runs chunk by chunk. A
``SlowCalls`` trigger keyed by input size catches it: when a request is slower than the p99,
the next long requests are profiled and compared with a normal one (``run.explanation``).
Arm it from a shell too: ``neuronscope arm --list``, ``neuronscope arm PID --wait``.

    pip install -e ".[examples]"
    python examples/inference_service.py --port 8000 --sample 0.1
    curl -X POST localhost:8000/infer -H 'content-type: application/json' -d '{"rows": 8}'

    python examples/inference_service.py --self-test 20 --sample 0.5   # serve, send 20 requests, exit
    python examples/inference_service.py --self-test --sample 0        # the tail trigger at work

``--self-test`` alone sends 1,050 requests, one in 150 of them long (``--long-every``): rare
enough to be slower than the p99 of all requests, and seven of them, so that three are profiled
even when the first long ones come before the trigger knows its threshold (on a busy machine,
calls that overlap neuronscope's own processing are not timed, and 200 timed calls take
longer). (One in 10 would not do: a tenth of the calls *is* the slowest percent, so the p99 is
a long request's time and none is slower than it.)

Point it at Jaeger/Tempo with the standard variables (see examples/observability/):
OTEL_SERVICE_NAME=llm-api OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 python examples/inference_service.py
(``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` with port 4317; ``OTEL_METRICS_EXPORTER=none`` for a
backend that takes traces only.)
"""

from __future__ import annotations

import argparse
import os

import torch
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from pydantic import BaseModel

import neuronscope as ns

HIDDEN = 256
LONG_ROWS = 1024  # longer inputs take the slow path
SELF_TEST_REQUESTS = 1050  # --self-test with no number: 7 long requests (module doc)
LONG_EVERY = 150  # self-test: one long request in 150 (under 1 %: slower than the p99)


def setup_telemetry() -> bool:
    """What a service does at start-up: its own global providers, exporting over OTLP to where
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) says, with the protocol, headers
    and service name of the standard variables. False (nothing set up) when no endpoint is set.
    """
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]

    # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES are read here; a name of our own otherwise
    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "inference-example"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # the endpoint: from the variables
    trace.set_tracer_provider(tracer_provider)
    if os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none":
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    return True


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.weight = torch.nn.Parameter(torch.ones(HIDDEN))

    @ns.region("rmsnorm")
    def norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with ns.region("proj"):
            if x.shape[0] > LONG_ROWS:  # the slow path: 8 rows at a time, as an unbatched fallback would
                x = torch.cat([self.proj(chunk) for chunk in x.split(8)])
            else:
                x = self.proj(x)
        return self.norm(x)


class InferRequest(BaseModel):
    rows: int = 8


class InferResponse(BaseModel):
    rows: int
    checksum: float


def size_class(rows: int) -> str:
    """The trigger's key: slow calls of one class arm captures of that class only."""
    return "long" if rows > LONG_ROWS else "short"


def create_app(sample: float = 0.1, seed: int | None = None, tracer_provider=None, min_calls: int = 200) -> FastAPI:
    """The service. ``tracer_provider`` is used for both the request spans and neuronscope's."""
    app = FastAPI(title="neuronscope inference example")
    model = Model().eval()
    trigger = ns.SlowCalls(quantile=0.99, min_calls=min_calls, capture=3, max_per_hour=6, key=size_class)

    @ns.profile_neuron(name="infer", sample=sample, seed=seed, trigger=trigger)
    async def infer(rows: int) -> torch.Tensor:
        with torch.inference_mode():
            x = torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(rows))
            return model(x)

    @app.post("/infer", response_model=InferResponse)
    async def infer_endpoint(req: InferRequest) -> InferResponse:
        if not 1 <= req.rows <= 4096:
            from fastapi import HTTPException

            raise HTTPException(status_code=422, detail="rows must be between 1 and 4096")
        out = await infer(req.rows)
        return InferResponse(rows=req.rows, checksum=float(out.sum()))

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"ok": True, "neuronscope": ns.stats()}

    FastAPIInstrumentor.instrument_app(app, tracer_provider=tracer_provider or trace.get_tracer_provider())
    return app


def main(argv: list[str] | None = None) -> dict[str, int] | None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--sample", type=float, default=float(os.environ.get("NEURONSCOPE_SAMPLE", "0.1")))
    parser.add_argument(
        "--self-test", type=int, nargs="?", const=SELF_TEST_REQUESTS, default=0, metavar="N",
        help=f"serve on a free port, send N requests (default {SELF_TEST_REQUESTS}), print what neuronscope did, exit",
    )  # fmt: skip
    parser.add_argument(
        "--long-every", type=int, default=LONG_EVERY, metavar="K",
        help=f"self-test: every Kth request is long (2048 rows); 0: none (default {LONG_EVERY})",
    )  # fmt: skip
    parser.add_argument("--min-calls", type=int, default=200, help="calls the tail trigger watches before it may fire")
    args = parser.parse_args(argv)
    setup_telemetry()  # before the app: the instrumentation and neuronscope both use these providers
    if args.self_test:
        return self_test(create_app(args.sample, seed=0, min_calls=args.min_calls), args.self_test, args.long_every)
    uvicorn.run(create_app(args.sample, min_calls=args.min_calls), host=args.host, port=args.port)
    return None


def self_test(app: FastAPI, requests: int, long_every: int = 0) -> dict[str, int]:
    """Serve ``app`` on a free loopback port in a thread, send ``requests`` requests, stop.
    Prints and returns neuronscope's counters."""
    import socket
    import sys
    import threading
    import time

    import httpx
    import uvicorn

    if long_every and 0 < long_every <= 100:
        print(
            f"note: --long-every {long_every} makes {100 / long_every:.0f} % of the requests long: they are the p99 "
            "rather than slower than it, so the tail trigger has nothing to fire on; use more than 100",
            file=sys.stderr,
        )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for i in range(requests):
            rows = 2048 if long_every and i % long_every == long_every - 1 else 8 + i % 64
            r = client.post("/infer", json={"rows": rows})
            r.raise_for_status()
        health = client.get("/healthz").json()
    server.should_exit = True
    thread.join(30)
    ns.flush(30)
    provider = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):  # the request spans (and the profiles' in them) go out now
        provider.force_flush()
    stats = ns.stats()
    print(f"{requests} requests served; neuronscope: {stats['profiled']} profiled, "
          f"{health['neuronscope']['unsampled']} unsampled, {stats['triggered']} triggered by slow calls, "
          f"{stats['trigger_baselines']} baselines")
    report_triggered_runs()
    return {
        "requests": requests,
        "profiled": stats["profiled"],
        "unsampled": health["neuronscope"]["unsampled"],
        "triggered": stats["triggered"],
        "trigger_baselines": stats["trigger_baselines"],
    }


def report_triggered_runs() -> None:
    """What the tail trigger captured: each run's reason and where its extra time went."""
    from pathlib import Path

    out = Path(os.environ.get("NEURONSCOPE_OUTPUT_DIR") or "neuronscope-runs")
    for path in sorted(out.glob("infer-*")) if out.is_dir() else ():
        if not (path / "manifest.json").is_file():
            continue
        run = ns.load_run(path)
        if run.trigger is None or run.trigger.kind != "slow":
            continue
        print(f"triggered: {run.trigger.reason}  ->  {path}")
        if run.explanation is not None:
            for line in run.explanation.lines(top=3)[1:]:
                print("   " + line.strip())


if __name__ == "__main__":
    main()
