"""Exports keep their bounds (issue 35, item 3) against real OTLP peers on 127.0.0.1:

* a refused connection is not retried — by neuronscope's exporters; the stock exporter, on the
  same dead port, is (the control) — so ``neuronscope export`` to a dead endpoint fails at once,
  in one line, over HTTP and gRPC;
* ``ns.flush()`` is False when anything could not be delivered (dead endpoint, a 500), True
  when everything arrived;
* a traces-only backend (HTTP 405 / gRPC UNIMPLEMENTED on metrics, as Phoenix answers) gets
  one line naming the signal and the switch that turns it off, and ``neuronscope export``
  succeeds for the spans; with that switch set, nothing is asked of it and the flush is True.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.otlp_receiver import OtlpReceiver, dead_endpoint

import neuronscope as ns

PROTOCOLS = {"http": "http/protobuf", "grpc": "grpc"}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """A run directory, written with no endpoint configured (what `neuronscope export` replays)."""
    with ns.profile_neuron(name="saved", output_dir=tmp_path_factory.mktemp("runs")) as run:
        torch.relu(torch.randn(32, 32) @ torch.randn(32, 32))
    assert run.wait(60)
    return Path(run.path)


def _export(run: Path, endpoint: str, protocol: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full = {**clean, "OTEL_EXPORTER_OTLP_PROTOCOL": PROTOCOLS[protocol], **env}
    argv = [sys.executable, "-m", "neuronscope", "export", str(run), "--otlp-endpoint", endpoint]
    return subprocess.run(argv, capture_output=True, text=True, env=full, timeout=300)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _one_span(name: str = "s") -> object:
    from opentelemetry.sdk.trace import TracerProvider

    span = TracerProvider().get_tracer("t").start_span(name)
    span.end()
    return span


# -- a refused connection --------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_refused_connection_is_not_retried(protocol, monkeypatch, caplog):
    from neuronscope.sinks.otel.providers import _otlp_exporters

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", PROTOCOLS[protocol])
    url = dead_endpoint()
    ours, _ = _otlp_exporters(url)
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        stock = OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=2)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        stock = GrpcSpanExporter(endpoint=url, insecure=True, timeout=2)
    span = _one_span()
    with caplog.at_level(logging.INFO):
        # the control: the stock exporter retries the refused connection (then gives up)
        assert stock.export([span]).name == "FAILURE"
        assert any("retrying" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
        caplog.clear()
        if protocol == "http":  # the exporter logs the failure and returns
            assert ours.export([span]).name == "FAILURE"
            assert any("Connection refused" in r.getMessage() for r in caplog.records)
        else:  # not an RpcError: out of the exporter's retry loop at once (our wrapper catches it)
            with pytest.raises(ConnectionRefusedError):
                ours.export([span])
    assert not any("retrying" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    stock.shutdown()
    ours.shutdown()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_export_to_a_dead_endpoint_fails_in_one_line(saved_run, protocol):
    done = _export(saved_run, dead_endpoint(), protocol)
    assert done.returncode == 1, done.stderr
    lines = _lines(done.stderr)
    assert len(lines) == 2, done.stderr  # why the export failed, then the command's verdict
    assert lines[0].startswith("neuronscope: OTLP export to ") and "failed: Connection refused." in lines[0], lines
    assert lines[1].startswith("neuronscope: error: ") and "the spans did not reach the OTLP endpoint (Connection refused)" in lines[1]
    for noise in ("Transient error", "retrying", "Traceback"):
        assert noise not in done.stderr


# -- ns.flush() says whether everything arrived ----------------------------------------------


def _profile_and_flush(endpoint: str | None) -> tuple[bool, ns.Run]:
    """A profile, then ``ns.flush()``; ``endpoint``: configured first (new providers), None: as they are."""
    if endpoint is not None:
        ns.configure(exporter="otlp", otlp_endpoint=endpoint)
    with ns.profile_neuron(name="flushed") as run:
        torch.relu(torch.randn(16, 16))
    return ns.flush(30), run


def test_flush_is_false_when_an_export_failed_and_true_when_all_arrived(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    ok, _ = _profile_and_flush(dead_endpoint())
    assert ok is False
    with OtlpReceiver("http", mode="fail500") as rx:  # answered, not taken: 500 is not retried
        ok, _ = _profile_and_flush(rx.endpoint)
        assert ok is False and rx.requests >= 1
    with OtlpReceiver("http") as rx:
        ok, run = _profile_and_flush(rx.endpoint)
        assert ok is True
        assert any(s["trace_id"] == run.manifest["otel"]["trace_id"] for s in rx.spans)
        assert rx.metrics  # the flush exported the metrics too
        ns.configure(exporter="auto")  # shuts the providers down (a last metric export)
        assert {r["mode"] for r in rx.request_log} == {"ok"}


# -- a backend that takes traces but not metrics ------------------------------------------------


@pytest.mark.parametrize("protocol, status", [("http", 405), ("http", 404), ("grpc", None)], ids=["http-405", "http-404", "grpc"])
def test_export_to_a_traces_only_backend_succeeds_for_the_spans(saved_run, protocol, status):
    """405 (Phoenix) or gRPC UNIMPLEMENTED say it at once; a 404 says it because the spans
    arrived at the same base URL just before (else a 404 is a wrong URL, and said so)."""
    with OtlpReceiver(protocol, signals=("traces",), missing_status=status or 405) as rx:
        done = _export(saved_run, rx.endpoint, protocol)
        spans = list(rx.spans)
    assert done.returncode == 0, done.stderr
    trace_id = re.fullmatch(rf"exported {re.escape(str(saved_run))} as trace ([0-9a-f]{{32}}) "
                            r"\(spans only: the endpoint does not take metrics\)\n", done.stdout).group(1)  # fmt: skip
    assert any(s["trace_id"] == trace_id and s["name"] == "saved" and s["parent_span_id"] is None for s in spans)
    (line,) = _lines(done.stderr)  # one line: the signal it lacks and the switch that turns it off
    assert line.startswith("neuronscope: the OTLP endpoint ") and "does not take metrics" in line, line
    assert {405: "HTTP 405 Method Not Allowed", 404: "HTTP 404 Not Found", None: "gRPC UNIMPLEMENTED"}[status] in line
    assert line.endswith("To turn metrics off, set OTEL_METRICS_EXPORTER=none"), line


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_metrics_turned_off_are_not_sent(saved_run, protocol):
    with OtlpReceiver(protocol, signals=("traces",)) as rx:
        done = _export(saved_run, rx.endpoint, protocol, OTEL_METRICS_EXPORTER="none")
        log = list(rx.request_log)
        spans = list(rx.spans)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert re.fullmatch(rf"exported {re.escape(str(saved_run))} as trace [0-9a-f]{{32}}\n", done.stdout), done.stdout
    assert any(s["name"] == "saved" for s in spans)
    assert {r["signal"] for r in log} == {"traces"}  # over gRPC an unserved call never reaches the log anyway


def test_a_script_against_a_traces_only_backend(monkeypatch, caplog):
    """In a process: one line, the spans arrive, the flush says metrics were not delivered —
    until they are turned off as the line says."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    with OtlpReceiver("http", signals=("traces",)) as rx:
        with caplog.at_level(logging.WARNING, logger="neuronscope"):
            ok, run = _profile_and_flush(rx.endpoint)
            again, _ = _profile_and_flush(None)
        assert ok is False and again is False  # metrics were recorded and not delivered
        said = [r.getMessage() for r in caplog.records if r.name == "neuronscope"]
        assert len(said) == 1 and "does not take metrics (HTTP 405" in said[0], said
        assert sum(r["signal"] == "metrics" for r in rx.request_log) == 1  # asked once, not again
        assert any(s["trace_id"] == run.manifest["otel"]["trace_id"] for s in rx.spans)
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        ns.configure(exporter="auto")  # new providers for the next configure
        ok, run = _profile_and_flush(rx.endpoint)
        assert ok is True
        assert any(s["trace_id"] == run.manifest["otel"]["trace_id"] for s in rx.spans)
        assert sum(r["signal"] == "metrics" for r in rx.request_log) == 1
