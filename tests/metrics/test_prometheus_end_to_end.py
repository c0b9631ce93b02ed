"""End to end: profiled workloads -> neuronscope's Prometheus endpoint (the real
opentelemetry-exporter-prometheus reader behind prometheus_client's HTTP server) -> a real
Prometheus scraping it over loopback -> PromQL through Prometheus' HTTP API.

One workload runs for the whole module (rounds of calls with a scrape in between, so rates and
increases have something to see); every test then queries Prometheus at the instant the
workload ended (``T_END``), which later tests' counter resets cannot change.

The per-run diagnosis metrics (device utilization, bound-by, step time) come from each run's
real diagnosis (``run.diagnosis``, computed before the sinks run); the ``diagnosed`` runs have
three steps each (a repeated top-level region), every other run (``serve``, a decorated call)
is one step.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.prometheus import SCRAPE_INTERVAL_S, PrometheusServer
from workloads import rmsnorm_naive

import neuronscope as ns
from metrics.conftest import DEFAULTS, custom_ops, prometheus_or_skip
from neuronscope import _stats
from neuronscope.analysis.diagnosis.model import Diagnosis
from neuronscope.sinks import CallbackSink, add_sink, remove_sink
from neuronscope.sinks import otel
from neuronscope.sinks.otel.metrics import OTHER, PROMETHEUS_NAMES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "observability" / "grafana" / "neuronscope-dashboard.json"
TOP_OPS = 6
ROUNDS = 4
JOB = "neuronscope"  # the scrape job name in support/prometheus.py
# Step durations (us) of the diagnosed runs' steps: spread over several buckets
STEP_US = (1_800.0, 2_600.0, 4_100.0, 7_500.0, 12_000.0, 45_000.0)
BUSY_PCT = (91.0, 64.5, 37.25, 12.0, 83.0)


class Workload:
    """What ran, as the tests need to know it to check Prometheus' answers."""

    def __init__(self) -> None:
        self.runs: dict[str, list] = {}
        self.diagnoses: list[Diagnosis] = []
        self.lock = threading.Lock()
        self.t0 = 0.0
        self.t_end = 0.0
        self.stats: dict[str, int] = {}
        self.spans: list = []

    def sink_first(self, run) -> None:  # the result the OpenTelemetry sink recorded (immutable)
        assert run.diagnosis is not None, run
        if run.name == "diagnosed":
            with self.lock:
                self.diagnoses.append(run.diagnosis)

    def sink_last(self, run) -> None:
        with self.lock:
            self.runs.setdefault(run.name, []).append(run)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    prometheus_or_skip()
    work = Workload()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    ops = custom_ops()
    x, w = torch.randn(16, 256), torch.randn(256)
    # a real gloo collective without a default process group (one rank: its own store)
    gloo = torch.distributed.ProcessGroupGloo(torch.distributed.HashStore(), 0, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path_factory.mktemp("runs")))
        mp.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
        ns.flush(30)
        _stats.reset()
        ns.configure(**DEFAULTS)
        ns.configure(tracer_provider=tracer_provider, prometheus_port=0, metrics_top_ops=TOP_OPS)
        endpoint = otel.prometheus_endpoint()
        first, last = CallbackSink(work.sink_first), CallbackSink(work.sink_last)
        add_sink(first)
        add_sink(last)
        prom = PrometheusServer([f"127.0.0.1:{endpoint.port}"], tmp_path_factory.mktemp("prometheus"))
        try:
            prom.start()
            prom.wait_for(lambda: prom.targets_up(), 30, "the neuronscope endpoint to be up")
            work.t0 = time.time()

            @ns.profile_neuron(name="serve", every=2, record_shapes=True)  # + neuronscope.roofline.fraction
            def serve(a):
                with ns.region("decode"):
                    y = rmsnorm_naive(a, w)
                return torch.relu(y @ w.new_ones(256, 64)).sum()

            @ns.profile_neuron(name="on_demand", warmup=1_000_000)  # profiled only when armed
            def on_demand(a):
                return rmsnorm_naive(a, w).sum()

            for r in range(ROUNDS):
                for _ in range(4):
                    serve(x)  # 2 profiled, 2 unsampled
                ns.arm(1, name="on_demand")
                on_demand(x)  # 1 profiled (armed)
                _contended_call()  # 1 skipped
                for _ in range(2):
                    with ns.profile_neuron(name="diagnosed", memory=True):  # + neuronscope.memory.peak
                        for _ in range(3):
                            with ns.region("step"):
                                rmsnorm_naive(x, w)
                                gloo.allreduce([x]).wait()  # + neuronscope.communication.*
                if r % 2 == 0:
                    with ns.profile_neuron(name="many_ops"):
                        for op in ops[r:] + ops[:r]:  # each run in its own order: different ops weigh most
                            op(x)
                assert ns.flush(60)
                prom.wait_for_scrapes(2)
            work.t_end = time.time()
            work.stats = ns.stats()
            work.spans = list(spans.get_finished_spans())
            yield prom, work
        finally:
            remove_sink(first)
            remove_sink(last)
            prom.stop()
            ns.flush(30)
            ns.configure(**DEFAULTS)


def _contended_call() -> None:
    """A profiled call while another thread holds a capture: it runs, unprofiled ("skipped")."""
    holding, done = threading.Event(), threading.Event()

    def hold():
        with ns.profile_neuron(name="holder"):
            holding.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(30)
    with ns.profile_neuron(name="contended") as run:
        torch.ones(4).sum()
    done.set()
    t.join(30)
    assert run.status == "skipped"


def _at_end(prom: PrometheusServer, work: Workload, expr: str) -> list[dict]:
    return prom.query(expr, at=work.t_end)


def _value(sample: dict) -> float:
    return float(sample["value"][1])


def test_per_op_device_time_series_match_the_summaries(live):
    prom, work = live
    runs = [r for r in work.runs["serve"] if r.status == "complete"]
    assert len(runs) == ROUNDS * 2
    sums = {s["metric"]["neuronscope_op_name"]: _value(s) for s in _at_end(prom, work, 'neuronscope_op_device_time_seconds_sum{neuronscope_profile_name="serve"}')}
    counts = {s["metric"]["neuronscope_op_name"]: _value(s) for s in _at_end(prom, work, 'neuronscope_op_device_time_seconds_count{neuronscope_profile_name="serve"}')}
    assert OTHER in sums, "the serve workload has more ops than metrics_top_ops: some must be folded into 'other'"
    admitted = set(sums) - {OTHER}
    assert len(admitted) == TOP_OPS
    errors = {}
    for name in admitted:
        expected = sum(r.summary[name].self_device_time_us for r in runs if name in r.summary) / 1e6
        assert counts[name] == sum(1 for r in runs if name in r.summary)
        errors[name] = abs(sums[name] - expected) / expected
    total = sum(r.summary.total_device_time_us for r in runs) / 1e6
    other_expected = total - sum(sum(r.summary[n].self_device_time_us for n in admitted if n in r.summary) for r in runs) / 1e6
    errors[OTHER] = abs(sums[OTHER] - other_expected) / other_expected
    # The heaviest ops of the first run got their own series.
    assert {row.name for row in runs[0].summary.top(TOP_OPS)} <= admitted
    worst = max(errors.values())
    print(f"\nper-op device time, Prometheus vs summaries: {len(errors)} series, max relative error {worst:.3g}")
    assert worst < 0.01, errors


def test_hundreds_of_op_names_make_at_most_top_n_plus_one_series(live):
    prom, work = live
    runs = work.runs["many_ops"]
    assert len(runs) == 2 and all(len(r.summary) > 300 for r in runs)
    for metric in ("neuronscope_op_device_time_seconds_count", "neuronscope_op_device_time_seconds_sum", "neuronscope_op_device_time_seconds_bucket"):
        names = {s["metric"]["neuronscope_op_name"] for s in _at_end(prom, work, f'{metric}{{neuronscope_profile_name="many_ops"}}')}
        assert len(names) == TOP_OPS + 1 and OTHER in names, (metric, names)
    total = sum(r.summary.total_device_time_us for r in runs) / 1e6
    got = _value(_at_end(prom, work, 'sum(neuronscope_op_device_time_seconds_sum{neuronscope_profile_name="many_ops"})')[0])
    assert got == pytest.approx(total, rel=1e-6)  # folding into "other" keeps every microsecond


def test_calls_profiled_on_demand_are_counted_by_trigger_kind(live):
    prom, work = live
    assert work.stats["armed"] == ROUNDS and len(work.runs["on_demand"]) == ROUNDS
    assert all(r.trigger is not None and r.trigger.kind == "arm" for r in work.runs["on_demand"])
    got = {s["metric"]["neuronscope_trigger_kind"]: _value(s) for s in _at_end(prom, work, f'neuronscope_profile_triggered_total{{job="{JOB}"}}')}
    assert got == {"arm": ROUNDS, "slow": 0, "baseline": 0}


def test_outcome_counters_match_ns_stats(live):
    prom, work = live
    got = {s["metric"]["neuronscope_outcome"]: _value(s) for s in _at_end(prom, work, f'neuronscope_profile_calls_total{{job="{JOB}"}}')}
    assert work.stats["unsampled"] == ROUNDS * 2
    assert work.stats["skipped"] == ROUNDS
    for outcome in ("profiled", "unsampled", "skipped", "errors", "telemetry_dropped"):
        assert got[outcome] == work.stats[outcome], outcome
    assert got["profiled"] >= ROUNDS * (2 + 1 + 2)  # serve, holder, diagnosed (+ many_ops)


def test_profile_duration_histogram(live):
    prom, work = live
    runs = work.runs["diagnosed"]
    count = _value(_at_end(prom, work, 'neuronscope_profile_duration_seconds_count{neuronscope_profile_name="diagnosed"}')[0])
    total = _value(_at_end(prom, work, 'neuronscope_profile_duration_seconds_sum{neuronscope_profile_name="diagnosed"}')[0])
    assert count == len(runs) == ROUNDS * 2
    assert total == pytest.approx(sum(r.end_ns - r.start_ns for r in runs) / 1e9, rel=1e-9)


def test_diagnosis_metrics(live):
    prom, work = live
    diagnoses = work.diagnoses
    assert len(diagnoses) == ROUNDS * 2
    sel = '{neuronscope_profile_name="diagnosed"}'
    mean = _value(_at_end(prom, work, f"neuronscope_device_busy_sum{sel} / neuronscope_device_busy_count{sel}")[0])
    assert mean == pytest.approx(sum(d.device_busy_pct for d in diagnoses) / 100 / len(diagnoses), rel=1e-9)
    bound = {s["metric"]["neuronscope_bound_by"]: _value(s) for s in _at_end(prom, work, f"neuronscope_diagnosis_runs_total{sel}")}
    expected: dict[str, int] = {}
    for d in diagnoses:
        expected[d.bound_by] = expected.get(d.bound_by, 0) + 1
    assert bound == expected
    steps = sorted(s.duration_us / 1e6 for d in diagnoses for s in d.steps.per_step)
    count = _value(_at_end(prom, work, f"neuronscope_step_duration_seconds_count{sel}")[0])
    assert count == len(steps)
    # histogram_quantile interpolates inside the bucket that holds the true quantile
    buckets = sorted(float(s["metric"]["le"]) for s in _at_end(prom, work, f"neuronscope_step_duration_seconds_bucket{sel}"))
    for q in (0.5, 0.99):
        got = _value(_at_end(prom, work, f"histogram_quantile({q}, sum by (le) (neuronscope_step_duration_seconds_bucket{sel}))")[0])
        true = steps[min(math.ceil(q * len(steps)) - 1, len(steps) - 1)]
        upper = next(b for b in buckets if b >= true)
        lower = max([b for b in buckets if b < true], default=0.0)
        assert lower <= got <= upper, (q, got, true, lower, upper)


def test_communication_metrics_match_the_diagnoses(live):
    """The gloo all-reduce of each diagnosed step: the exposed share and the time per kind
    Prometheus holds are the diagnoses' own."""
    prom, work = live
    diagnoses = work.diagnoses
    comms = [d.communication for d in diagnoses]
    assert all(c is not None and c.backend == "gloo" for c in comms), comms
    sel = '{neuronscope_profile_name="diagnosed"}'
    mean = _value(_at_end(prom, work, f"neuronscope_communication_exposed_sum{sel} / neuronscope_communication_exposed_count{sel}")[0])
    assert mean == pytest.approx(sum(c.exposed_pct_of_window for c in comms) / 100 / len(comms), rel=1e-6)
    by_kind = {s["metric"]["neuronscope_collective_kind"]: _value(s) for s in _at_end(prom, work, f"neuronscope_communication_time_seconds_sum{sel}")}
    assert set(by_kind) == {"all_reduce"}
    assert by_kind["all_reduce"] == pytest.approx(sum(k.time_us for c in comms for k in c.by_kind) / 1e6, rel=1e-6)


def test_memory_peak_histogram(live):
    prom, work = live
    runs = work.runs["diagnosed"]
    assert all(r.memory is not None and r.memory.peak_bytes > 0 for r in runs)
    sel = '{neuronscope_profile_name="diagnosed"}'
    assert _value(_at_end(prom, work, f"neuronscope_memory_peak_bytes_count{sel}")[0]) == len(runs)
    total = _value(_at_end(prom, work, f"neuronscope_memory_peak_bytes_sum{sel}")[0])
    assert total == sum(r.memory.peak_bytes for r in runs)
    # only memory=True profiles record it
    names = {s["metric"]["neuronscope_profile_name"] for s in _at_end(prom, work, "neuronscope_memory_peak_bytes_count")}
    assert names == {"diagnosed"}


def test_every_profiled_run_records_its_diagnosis_and_its_step_times(live):
    prom, work = live
    profiled = set(work.runs)
    for metric in ("neuronscope_device_busy_count", "neuronscope_diagnosis_runs_total", "neuronscope_step_duration_seconds_count"):
        names = {s["metric"]["neuronscope_profile_name"] for s in _at_end(prom, work, metric)}
        assert names == profiled, metric
    with_steps = {name for name, runs in work.runs.items() if any(r.diagnosis.steps for r in runs)}
    assert with_steps == {"diagnosed"}


def test_a_decorated_call_without_steps_is_one_step_on_the_dashboard(live):
    """A service's profile is one decorated call (no ns.step()): each call is one step, so the
    step-time panels show the calls' durations, not "No data"."""
    prom, work = live
    runs = work.runs["serve"]
    assert runs and all(r.diagnosis.steps is None for r in runs)
    sel = '{neuronscope_profile_name="serve"}'
    count = _value(_at_end(prom, work, f"neuronscope_step_duration_seconds_count{sel}")[0])
    total = _value(_at_end(prom, work, f"neuronscope_step_duration_seconds_sum{sel}")[0])
    assert count == len(runs)
    assert total == pytest.approx(sum(r.end_ns - r.start_ns for r in runs) / 1e9, rel=1e-9)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    range_s = int(work.t_end - work.t0) + 1
    step_targets = [(p["title"], t) for p in _panels(dashboard) for t in p["targets"] if "neuronscope_step_duration_seconds" in t["expr"]]
    assert len(step_targets) == 3  # Step time p99 (overview), Step time p50 / p99
    for title, target in step_targets:
        expr = _substitute(target["expr"], range_s, profile="serve")
        if target.get("instant"):
            values = [float(s["value"][1]) for s in prom.query(expr, at=work.t_end)]
        else:
            values = [float(v) for s in prom.query_range(expr, work.t0, work.t_end, 1.0) for _, v in s["values"]]
        assert any(math.isfinite(v) and v > 0 for v in values), (title, expr)


def test_exemplars_carry_the_trace_ids_of_the_runs(live):
    prom, work = live
    roots = {format(s.context.trace_id, "032x"): s for s in work.spans if s.parent is None}
    for profile, metric in (("serve", "neuronscope_op_device_time_seconds_bucket"), ("diagnosed", "neuronscope_step_duration_seconds_bucket"),
                            ("serve", "neuronscope_profile_duration_seconds_bucket")):
        result = prom.query_exemplars(f'{metric}{{neuronscope_profile_name="{profile}"}}', work.t0 - 60, work.t_end + 1)
        exemplars = [e for series in result for e in series["exemplars"]]
        assert exemplars, f"no exemplars stored for {metric}"
        run_traces = {r.manifest["otel"]["trace_id"]: r.manifest["otel"]["span_id"] for r in work.runs[profile] if "otel" in r.manifest}
        for e in exemplars:
            trace_id, span_id = e["labels"]["trace_id"], e["labels"]["span_id"]
            assert run_traces.get(trace_id) == span_id, "an exemplar must point at a run's root span"
            root = roots[trace_id]  # ... and that trace was really exported
            assert root.name == profile
            assert root.start_time / 1e9 <= e["timestamp"] <= root.end_time / 1e9 + 60
    # Re-serving a bucket's latest exemplar on every scrape is accepted as a duplicate, never an error.
    import urllib.request

    own = urllib.request.urlopen(prom.url + "/metrics", timeout=10).read().decode()
    counters = dict(line.rsplit(" ", 1) for line in own.splitlines() if line.startswith("prometheus_target_scrapes_exemplar_out_of_order_total"))
    assert counters and all(float(v) == 0 for v in counters.values()), counters


# -- the Grafana dashboard, against the same Prometheus ---------------------------------------

def _substitute(expr: str, range_s: int, profile: str = ".*") -> str:
    """Grafana's variable interpolation, for the values a user picking "All" (or one profile) would get."""
    rate_interval = f"{int(max(4 * SCRAPE_INTERVAL_S, 1 + SCRAPE_INTERVAL_S))}s"
    values = {"job": JOB, "device": ".*", "profile": profile, "__range": f"{range_s}s", "__rate_interval": rate_interval, "__interval": "1s"}
    out = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)
    assert "$" not in out, out
    return out


def _panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_every_dashboard_panel_returns_data(live):
    prom, work = live
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    range_s = int(work.t_end - work.t0) + 1
    report, empty = [], []
    for panel in _panels(dashboard):
        for target in panel["targets"]:
            expr = _substitute(target["expr"], range_s)
            if target.get("instant"):
                result = prom.query(expr, at=work.t_end)
                values = [float(s["value"][1]) for s in result]
            else:
                result = prom.query_range(expr, work.t0, work.t_end, 1.0)
                values = [float(v) for s in result for _, v in s["values"]]
            finite = [v for v in values if math.isfinite(v)]
            ok = bool(finite) and any(v != 0 for v in finite) or panel["title"].startswith("neuronscope errors") and bool(finite)
            report.append(f"{'ok   ' if ok else 'EMPTY'} {panel['title']} [{target['refId']}]: {len(result)} series")
            if not ok:
                empty.append((panel["title"], expr, values[:5]))
    print("\n" + "\n".join(report))
    assert not empty, empty


def test_dashboard_variables_resolve(live):
    prom, work = live
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert m, var["query"]
        match = _substitute(m.group(1), 60)
        values = prom.api(f"label/{m.group(2)}/values", **{"match[]": [match], "start": f"{work.t0:.3f}", "end": f"{work.t_end:.3f}"})
        assert values, (var["name"], match)
        if var["name"] == "profile":
            assert {"serve", "diagnosed", "many_ops"} <= set(values)


def test_dashboard_queries_use_the_exporters_real_names(live):
    prom, work = live
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in _panels(dashboard) for t in p["targets"]] + [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    # a metric name is followed by its selector; label names are not
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for e in exprs for n in re.findall(r"\b(neuronscope_[a-z_]+)\{", e)}
    assert used == set(PROMETHEUS_NAMES.values())
    # ... and each is a series Prometheus scraped from the exporter under exactly that name
    for name in used:
        histograms_without_unit = ("neuronscope_device_busy", "neuronscope_communication_exposed", "neuronscope_roofline_fraction")
        suffix = "_count" if name.endswith(("_seconds", "_bytes")) or name in histograms_without_unit else ""
        assert _at_end(prom, work, f'{name}{suffix}{{job="{JOB}"}}'), name
