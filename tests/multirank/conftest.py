"""Fixtures of the multi-rank tests: a process that looks like a torchrun rank, in-memory spans."""

from __future__ import annotations

import pytest

from neuronscope import _ranks


@pytest.fixture
def torchrun_env(monkeypatch):
    """Make this process look like torchrun's rank ``rank`` of ``world`` (and forget it after)."""

    def set_rank(rank: int, world: int = 2, *, port: int = 29999, run_id: str = "none", **extra: str) -> None:
        env = {
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_RESTART_COUNT": "0", **extra,
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        _ranks._reset()

    yield set_rank
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "NEURONSCOPE_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    _ranks._reset()


class Telemetry:
    """In-memory OpenTelemetry spans for the tests of one process."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def finished(self) -> list:
        import neuronscope as ns

        ns.flush(30)
        return list(self.spans.get_finished_spans())


@pytest.fixture
def telemetry():
    import neuronscope as ns

    t = Telemetry()
    ns.configure(tracer_provider=t.tracer_provider)
    yield t
    ns.flush(30)
    ns.configure(tracer_provider=None)
