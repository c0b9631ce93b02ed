"""Metric names, units, attributes, cardinality and exemplars with the SDK's in-memory reader,
and the Prometheus endpoint's configuration (ports, errors, the environment variable)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from types import SimpleNamespace
import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workloads import rmsnorm_naive

import neuronscope as ns
from metrics.conftest import custom_ops
from neuronscope.analysis.diagnosis.model import Diagnosis, Gaps, Step, Steps
from neuronscope.analysis import analyse
from neuronscope.sinks import otel
from neuronscope.sinks.otel import metrics as m

pytestmark = pytest.mark.usefixtures("reset_otel")


class Reader:
    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    def metrics(self) -> dict:
        out = {}
        for rm in self.reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out[metric.name] = metric
        return out


@pytest.fixture
def reader() -> Reader:
    r = Reader()
    ns.configure(meter_provider=r.provider)
    return r


def _points(metric, profile):
    return [p for p in metric.data.data_points if p.attributes.get("neuronscope.profile.name") == profile]


def test_names_units_and_attributes(reader, xw):
    with ns.profile_neuron(name="m") as run:
        rmsnorm_naive(*xw)
    ns.flush(30)
    got = reader.metrics()
    assert {m.OP_DEVICE_TIME, m.PROFILE_DURATION, m.PROFILE_CALLS} <= set(got)
    assert got[m.OP_DEVICE_TIME].unit == "s" and got[m.PROFILE_DURATION].unit == "s" and got[m.PROFILE_CALLS].unit == "{call}"
    # Every run is diagnosed: its device utilization and verdict are recorded.
    d = run.diagnosis
    assert d is not None and d.steps is None
    (util,) = _points(got[m.DEVICE_BUSY], "m")
    assert util.sum == pytest.approx(d.device_busy_pct / 100) and util.count == 1
    (verdict,) = _points(got[m.DIAGNOSIS_RUNS], "m")
    assert verdict.attributes["neuronscope.bound_by"] == d.bound_by and verdict.value == 1
    # No step markers: the profile is one step (the call), so step-time dashboards have data.
    (step,) = _points(got[m.STEP_DURATION], "m")
    assert step.count == 1 and step.sum == pytest.approx((run.end_ns - run.start_ns) / 1e9)
    mul = next(p for p in got[m.OP_DEVICE_TIME].data.data_points if p.attributes["neuronscope.op.name"] == "aten::mul")
    assert dict(mul.attributes) == {"neuronscope.device": "cpu", "neuronscope.profile.name": "m", "neuronscope.op.name": "aten::mul"}
    assert mul.sum == pytest.approx(run.summary["aten::mul"].self_device_time_us / 1e6)
    # Bucket boundaries are in seconds, not the SDK's millisecond default.
    assert tuple(mul.explicit_bounds) == m.OP_TIME_BUCKETS_S
    outcomes = {p.attributes["neuronscope.outcome"]: p.value for p in got[m.PROFILE_CALLS].data.data_points}
    assert outcomes["profiled"] == ns.stats()["profiled"] == 1


def _diagnosis(run, busy: float, bound: str, steps_us: tuple[float, ...]) -> Diagnosis:
    per_step = tuple(Step(i, run.start_ns, us, busy, bound) for i, us in enumerate(steps_us))
    steps = Steps("ns.step", "ns.step", len(per_step), 0, 0, 0, max(steps_us), 0, per_step) if per_step else None
    return Diagnosis(
        device=run.device, timeline="cpu_main_thread", window_start_ns=run.start_ns, window_end_ns=run.end_ns,
        device_busy_us=0.0, device_idle_us=0.0, device_busy_pct=busy, idle_us_by_class={},
        gaps=Gaps(50.0, 0, 0.0, {}, {}), steps=steps, bound_by=bound, evidence={},
    )


def test_diagnosis_metrics_read_run_diagnosis(reader, xw):
    plan = iter([(72.5, "host", (1500.0, 2500.0)), (95.0, "device", (3000.0,)), (10.0, "host", ())])

    def planned(trace, summary, options):  # stands in for the diagnosis stage
        busy, bound, steps = next(plan)
        start, end = trace.start_time_ns, trace.end_time_ns
        return _diagnosis(SimpleNamespace(device="cpu", start_ns=start, end_ns=end), busy, bound, steps)

    profiled = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analyse, "_diagnose", planned)
        for _ in range(3):
            with ns.profile_neuron(name="d") as run:
                rmsnorm_naive(*xw)
            profiled.append(run)
        ns.flush(30)
    got = reader.metrics()
    util = got[m.DEVICE_BUSY]
    assert util.unit == "1"
    (p,) = util.data.data_points
    assert p.count == 3 and p.sum == pytest.approx(0.725 + 0.95 + 0.10) and p.max == pytest.approx(0.95)
    runs = {q.attributes["neuronscope.bound_by"]: q.value for q in got[m.DIAGNOSIS_RUNS].data.data_points}
    assert runs == {"host": 2, "device": 1} and got[m.DIAGNOSIS_RUNS].unit == "{run}"
    (s,) = got[m.STEP_DURATION].data.data_points
    # 3 steps of the first two runs, and the third (no steps) counted as one step: its call
    call_s = (profiled[2].end_ns - profiled[2].start_ns) / 1e9
    assert s.count == 4 and s.sum == pytest.approx(0.007 + call_s) and got[m.STEP_DURATION].unit == "s"


def test_hundreds_of_op_names_are_bounded_to_top_n_plus_other(reader):
    ns.configure(metrics_top_ops=5)
    ops = custom_ops()
    x = torch.randn(8)
    runs = []
    for shift in (0, 100, 200):  # each run in its own order: its heaviest ops differ
        with ns.profile_neuron(name="many") as run:
            for op in ops[shift:] + ops[:shift]:
                op(x)
        runs.append(run)
    ns.flush(30)
    points = _points(reader.metrics()[m.OP_DEVICE_TIME], "many")
    names = {p.attributes["neuronscope.op.name"] for p in points}
    assert all(len(r.summary) > 300 for r in runs)
    assert len(names) == 5 + 1 and m.OTHER in names
    assert {r.name for r in runs[0].summary.top(5)} == names - {m.OTHER}  # the first run's top 5 were admitted
    assert sum(p.sum for p in points) == pytest.approx(sum(r.summary.total_device_time_us for r in runs) / 1e6)
    # An admitted op keeps its series even where it was not among a run's heaviest.
    for p in points:
        if p.attributes["neuronscope.op.name"] != m.OTHER:
            assert p.count == 3


def test_profile_names_are_bounded_too(reader, xw, monkeypatch):
    monkeypatch.setattr(m, "MAX_PROFILE_NAMES", 3)
    m.reset_cardinality()
    for i in range(6):
        with ns.profile_neuron(name=f"request-{i}"):
            torch.relu(xw[0])
    ns.flush(30)
    points = reader.metrics()[m.PROFILE_DURATION].data.data_points
    names = {p.attributes["neuronscope.profile.name"] for p in points}
    # the first 3 names processed (the worker's order, not necessarily the calls') and "other"
    assert len(names) == 4 and m.OTHER in names and names - {m.OTHER} <= {f"request-{i}" for i in range(6)}
    assert sum(p.count for p in points) == 6
    m.reset_cardinality()


def test_neuron_device_metrics_share_the_profile_name_bound(monkeypatch):
    from neuronscope.result import RunResult
    from neuronscope.sinks.otel.export import record_neuron_metrics

    monkeypatch.setattr(m, "MAX_PROFILE_NAMES", 3)
    m.reset_cardinality()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    explorer = {"metrics": {"mfu_percent": 40.0, "total_time_s": 0.5, "hbm_read_bytes": 1024}}
    for i in range(6):
        run = RunResult(name=f"request-{i}", device="neuron", status="complete", start_ns=0, end_ns=0,
                        manifest={"neuron": {"explorer": explorer}})
        record_neuron_metrics(run, provider)
    got = {mt.name: mt for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for mt in sm.metrics}
    for name in ("neuronscope.neuron.utilization", "neuronscope.neuron.device_time", "neuronscope.neuron.memory.io"):
        names = {p.attributes["neuronscope.profile.name"] for p in got[name].data.data_points}
        assert len(names) == 4 and m.OTHER in names, (name, names)
    assert got["neuronscope.neuron.utilization"].unit == "1"
    assert {p.value for p in got["neuronscope.neuron.utilization"].data.data_points} == {0.4}
    m.reset_cardinality()


def test_exemplars_carry_the_root_span(reader, xw):
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    ns.configure(tracer_provider=tp)
    with ns.profile_neuron(name="ex") as run:
        rmsnorm_naive(*xw)
    assert run.wait(30)  # not ns.flush(): it would collect the in-memory reader, and a collection hands exemplars out once
    root = next(s for s in spans.get_finished_spans() if s.name == "ex")
    exemplars = [e for p in reader.metrics()[m.OP_DEVICE_TIME].data.data_points for e in p.exemplars]
    assert exemplars
    assert {(e.trace_id, e.span_id) for e in exemplars} == {(root.context.trace_id, root.context.span_id)}
    assert run.manifest["otel"]["trace_id"] == format(root.context.trace_id, "032x")


def _points_named(points, profile):
    return [p for p in points if p.attributes.get("neuronscope.profile.name") == profile]


def test_no_exemplars_without_a_sampled_trace(reader, xw):
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    ns.configure(tracer_provider=TracerProvider(sampler=ALWAYS_OFF))
    with ns.profile_neuron(name="unsampled-trace") as run:
        rmsnorm_naive(*xw)
    assert run.wait(30)
    assert _points(reader.metrics()[m.OP_DEVICE_TIME], "unsampled-trace")
    ns.configure(tracer_provider=None)
    with ns.profile_neuron(name="no-tracer") as run:
        rmsnorm_naive(*xw)
    assert run.wait(30)
    points = reader.metrics()[m.OP_DEVICE_TIME].data.data_points
    assert _points_named(points, "no-tracer") and not [e for p in points for e in p.exemplars]


def test_a_failing_meter_provider_is_logged_and_counted_never_raised(xw, caplog):
    class Broken:
        def get_meter(self, *a, **k):
            raise RuntimeError("meter backend exploded")

    ns.configure(meter_provider=Broken(), prometheus_port=0)
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        with ns.profile_neuron(name="survives") as run:
            out = rmsnorm_naive(*xw)
        ns.flush(30)
    assert out.shape == xw[0].shape and run.status == "complete"
    assert ns.stats()["errors"] == 1
    assert "meter backend exploded" in caplog.text
    # ... and the other provider (the Prometheus endpoint's) still got the run
    body = _scrape(otel.prometheus_endpoint().url)
    assert 'neuronscope_profile_duration_seconds_count{neuronscope_device="cpu",neuronscope_profile_name="survives"' in body


def test_metrics_top_ops_is_validated():
    for bad in (0, -1, True, 2.5, "10", 10_000):
        with pytest.raises(ns.ConfigurationError, match="metrics_top_ops"):
            ns.configure(metrics_top_ops=bad)
    ns.configure(metrics_top_ops=3)
    assert otel.settings().metrics_top_ops == 3


# -- the Prometheus endpoint ---------------------------------------------------------------

def _scrape(url: str, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return r.read().decode()


def test_endpoint_serves_the_exporters_names_and_stops(xw, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    ns.configure(prometheus_port=0)
    endpoint = otel.prometheus_endpoint()
    assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics" and endpoint.port > 0
    with ns.profile_neuron(name="scraped"):
        rmsnorm_naive(*xw)
    ns.flush(30)
    body = _scrape(endpoint.url)
    for name in ("neuronscope_op_device_time_seconds_bucket", "neuronscope_profile_duration_seconds_sum", "neuronscope_profile_calls_total"):
        assert f"\n{name}{{" in body, name
    assert 'neuronscope_outcome="profiled"' in body
    # The same port again is a no-op; None stops the server and frees the port.
    ns.configure(prometheus_port=endpoint.port)
    assert otel.prometheus_endpoint() is endpoint
    ns.configure(prometheus_port=None)
    assert otel.prometheus_endpoint() is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", endpoint.port), timeout=5).close()
    with socket.socket() as s:  # the port can be listened on again (REUSEADDR: the scrape's TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", endpoint.port))
        s.listen()


def test_port_in_use_is_a_clear_configuration_error(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ns.ConfigurationError, match=rf"prometheus_port\)={port}: port {port} on 127.0.0.1 is already in use; choose another port"):
            ns.configure(prometheus_port=port)
    assert otel.prometheus_endpoint() is None


def test_configure_errors_change_nothing(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    for bad in (-1, 70000, "abc", 1.5, True):
        with pytest.raises(ns.ConfigurationError, match="prometheus_port"):
            ns.configure(prometheus_port=bad)
    # an invalid option next to a valid port: no endpoint is started
    with pytest.raises(ns.ConfigurationError, match="op_spans"):
        ns.configure(prometheus_port=0, op_spans="bogus")
    assert otel.prometheus_endpoint() is None


def test_missing_exporter_gives_an_install_hint(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("opentelemetry.exporter.prometheus") else real(name, *a)
    )
    with pytest.raises(ns.ConfigurationError, match=r"neuronscope\[prometheus\]"):
        ns.configure(prometheus_port=0)


_ENV_SCRIPT = """
import json, sys, urllib.request
import torch
import neuronscope as ns
from neuronscope.sinks import otel
profile = ns.profile_neuron(name="from-env")  # first use of neuronscope: the endpoint starts
ep = otel.prometheus_endpoint()
if ep is None:
    print(json.dumps({"endpoint": None})); sys.exit(0)
with profile:
    torch.relu(torch.ones(8))
ns.flush(30)
body = urllib.request.urlopen(ep.url, timeout=10).read().decode()
target = next((line for line in body.splitlines() if line.startswith("target_info{")), "")
rank = {"target_info_rank": 'neuronscope_rank="1"' in target} if "neuronscope_rank" in target else {}
print(json.dumps({"endpoint": ep.port, "has_run": 'neuronscope_profile_name="from-env"' in body, **rank}))
"""


def _run_with_env(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {
        "NEURONSCOPE_OUTPUT_DIR": str(tmp_path / "runs"), "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1"
    } | env
    proc = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], env=full, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_environment_variable_starts_the_endpoint(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result, _ = _run_with_env(tmp_path, NEURONSCOPE_PROMETHEUS_PORT=str(port))
    assert result == {"endpoint": port, "has_run": True}


def test_environment_variable_with_a_busy_port_only_warns(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, stderr = _run_with_env(tmp_path, NEURONSCOPE_PROMETHEUS_PORT=str(port))
    assert result == {"endpoint": None}  # the program ran on, without an endpoint
    assert f"NEURONSCOPE_PROMETHEUS_PORT={port}: port {port} on 127.0.0.1 is already in use" in stderr


def test_no_endpoint_when_neuronscope_is_disabled(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result, _ = _run_with_env(tmp_path, NEURONSCOPE_PROMETHEUS_PORT=str(port), NEURONSCOPE_DISABLED="1")
    assert result == {"endpoint": None}


def test_under_torchrun_each_local_rank_serves_the_next_port(tmp_path):
    """Every rank inherits NEURONSCOPE_PROMETHEUS_PORT: local rank N serves port + N, and
    target_info carries the rank."""
    for _ in range(20):  # two free ports in a row
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                continue
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    result, _ = _run_with_env(tmp_path, NEURONSCOPE_PROMETHEUS_PORT=str(port), **torchrun)
    assert result == {"endpoint": port + 1, "has_run": True, "target_info_rank": True}
