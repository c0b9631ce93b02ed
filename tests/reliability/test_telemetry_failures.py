"""OTLP endpoint dead, slow (2 s per request), answering 500 / UNAVAILABLE: the caller's
results are identical to an uninstrumented run, no exception reaches it, and the p99 of the
work neuronscope does on the calling thread
(Run.caller_overhead_cpu_ns: everything but torch's own profiler start/stop, in this
thread's CPU time) is <= 5 ms. Wall-clock p99s are printed too: their tails include waiting
for the GIL while the SDK's export thread serialises spans, which on a 2-core machine moves
by more than 5 ms from run to run (see docs/performance.md)."""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch
from support.otlp_receiver import OtlpReceiver, dead_endpoint
from workloads import rmsnorm_naive

import neuronscope as ns
from neuronscope._worker import flush_all

CALLS = 100
PAUSE_S = 0.02  # a service between requests; lets the worker keep up so every call's figure is kept


def _serve_calls(x, w, n, runs=None):
    @ns.profile_neuron(name="serve")
    def serve(a):
        with ns.region("decode"):
            return rmsnorm_naive(a, w)

    latencies, results, errors = [], [], 0
    last = ns.last_run()
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            results.append(serve(x))
        except Exception:  # noqa: BLE001 - counting is the point
            errors += 1
        latencies.append(time.perf_counter() - t0)
        if runs is not None and ns.last_run() is not last:  # the handle of the call just profiled
            last = ns.last_run()
            runs.append(last)
        time.sleep(PAUSE_S)
    flush_all(30)  # processing done; the exporter may still be retrying, which is the point
    return latencies, results, errors


def _p99(values):
    return sorted(values)[max(int(0.99 * len(values)) - 1, 0)]


def _serve_broken(scenario: str, x, w, runs: list) -> tuple[list, list, int, int | None]:
    """CALLS calls against a broken endpoint: (latencies, results, errors, OTLP requests seen)."""
    if scenario == "dead":
        ns.configure(exporter="otlp", otlp_endpoint=dead_endpoint())
        return (*_serve_calls(x, w, CALLS, runs), None)
    protocol = "grpc" if scenario.startswith("grpc") else "http"
    mode = {"slow_2s": "slow", "http_500": "fail500", "grpc_unavailable": "unavailable"}[scenario]
    with OtlpReceiver(protocol, mode=mode, delay_s=2.0) as rx:
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc" if protocol == "grpc" else "http/protobuf"
        try:
            ns.configure(exporter="otlp", otlp_endpoint=rx.endpoint)
            served = _serve_calls(x, w, CALLS, runs)
            ns.flush(5)
            return (*served, rx.requests)
        finally:
            os.environ.pop("OTEL_EXPORTER_OTLP_PROTOCOL", None)


@pytest.mark.timing
@pytest.mark.parametrize("scenario", ["dead", "slow_2s", "http_500", "grpc_unavailable"])
def test_broken_endpoint_p99_added_latency_under_5ms_and_no_exceptions(scenario, xw):
    x, w = xw
    uninstrumented = [rmsnorm_naive(x, w) for _ in range(3)]
    ns.configure(exporter="none")
    baseline, _, _ = _serve_calls(x, w, CALLS)
    ns.flush(30)
    runs: list = []
    skipped_before, profiled_before = ns.stats()["skipped_backpressure"], ns.stats()["profiled"]
    latencies, results, errors, requests, calls = [], [], 0, None, 0
    # a p99 over 100 calls is their 2nd slowest: near the bound (half of it), the estimate is
    # taken over more calls (up to 300) before it is judged -- beside two busy processes one
    # batch read 5.012 ms where the others of that run read under the bound
    for _batch in range(3):
        got = _serve_broken(scenario, x, w, runs)
        latencies += got[0]
        results += got[1]
        errors += got[2]
        requests = got[3]
        calls += CALLS
        if _p99([r.caller_overhead_cpu_ns for r in runs]) / 1e6 <= 2.5:
            break
    ns.flush(5)
    overhead_p99_ms = _p99([r.caller_overhead_cpu_ns for r in runs]) / 1e6
    wall_p99_ms = _p99([r.caller_overhead_ns for r in runs]) / 1e6
    print(
        f"{scenario}: neuronscope on the calling thread p99 {overhead_p99_ms:.3f} ms CPU, {wall_p99_ms:.3f} ms wall, "
        f"over {len(runs)} profiled calls; "
        f"wall p99 {_p99(latencies) * 1e3:.2f} ms vs {_p99(baseline) * 1e3:.2f} ms without export, "
        f"median {statistics.median(latencies) * 1e3:.2f} vs {statistics.median(baseline) * 1e3:.2f} ms; "
        f"exceptions {errors}; OTLP requests seen {requests}"
    )
    assert errors == 0
    assert all(torch.equal(r, uninstrumented[0]) for r in results)
    # Every call was profiled and counted as such, or (under real overload only) skipped before profiling.
    assert ns.stats()["profiled"] - profiled_before == len(runs)
    assert len(runs) + ns.stats()["skipped_backpressure"] - skipped_before == calls and len(runs) > 0
    assert overhead_p99_ms <= 5.0
    assert ns.stats()["errors"] == 0
