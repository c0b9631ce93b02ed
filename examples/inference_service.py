"""A small HTTP inference service with neuronscope left in production code.

FastAPI + OpenTelemetry's FastAPI instrumentation: every request gets a server span; the
handler is decorated with ``profile_neuron(sample=...)`` and regions, so a sampled request's
trace holds the profile (root span, regions, per-op aggregate spans) under its request span.

Long inputs (more than 1024 rows) take a slow path: the projection runs chunk by chunk. A
``SlowCalls`` trigger keyed by input size catches it: when a request is slower than the p99,
the next long requests are profiled and compared with a normal one (``run.explanation``).
Arm it from a shell too: ``neuronscope arm --list``, ``neuronscope arm PID --wait``.

    pip install -e ".[examples]"
    python examples/inference_service.py --port 8000 --sample 0.1
    curl -X POST localhost:8000/infer -H 'content-type: application/json' -d '{"rows": 8}'

    python examples/inference_service.py --self-test 20 --sample 0.5   # serve, send 20 requests, exit
    python examples/inference_service.py --self-test 400 --sample 0 --long-every 10   # the tail trigger at work

Point it at Jaeger/Tempo with the standard variables (see examples/observability/):
OTEL_SERVICE_NAME=llm-api OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 python examples/inference_service.py
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


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--sample", type=float, default=float(os.environ.get("NEURONSCOPE_SAMPLE", "0.1")))
    parser.add_argument("--self-test", type=int, default=0, metavar="N", help="serve on a free port, send N requests, exit")
    parser.add_argument("--long-every", type=int, default=0, metavar="K", help="self-test: every Kth request is long (2048 rows)")
    parser.add_argument("--min-calls", type=int, default=200, help="calls the tail trigger watches before it may fire")
    args = parser.parse_args()
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        ns.configure(exporter="otlp")
    if args.self_test:
        return self_test(create_app(args.sample, seed=0, min_calls=args.min_calls), args.self_test, args.long_every)
    uvicorn.run(create_app(args.sample, min_calls=args.min_calls), host=args.host, port=args.port)


def self_test(app: FastAPI, requests: int, long_every: int = 0) -> None:
    """Serve ``app`` on a free loopback port in a thread, send ``requests`` requests, stop."""
    import socket
    import threading
    import time

    import httpx
    import uvicorn

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
    stats = ns.stats()
    print(f"{requests} requests served; neuronscope: {stats['profiled']} profiled, "
          f"{health['neuronscope']['unsampled']} unsampled, {stats['triggered']} triggered by slow calls, "
          f"{stats['trigger_baselines']} baselines")
    report_triggered_runs()


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
