"""The Grafana dashboard and its provisioning, checked without Grafana (none runs here): the
dashboard model's structure, variables, trace links (interpolated as Grafana would and parsed
back), and that the compose setup provisions it. Its queries run against a live Prometheus in
test_prometheus_end_to_end.py."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workloads import rmsnorm_naive

import neuronscope as ns

yaml = pytest.importorskip("yaml", reason='PyYAML comes with the docs extra: pip install -e ".[docs]"')

ROOT = Path(__file__).resolve().parents[2]
OBS = ROOT / "examples" / "observability"
DASHBOARD_FILE = OBS / "grafana" / "neuronscope-dashboard.json"
BUILTINS = {"__range", "__rate_interval", "__interval", "__from", "__to", "__all"}
PANEL_TYPES = {"stat", "bargauge", "timeseries", "piechart", "row"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))


def _vars_in(text: str) -> set[str]:
    return {a or b for a, b in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", text) if not (a or b).startswith("__field")}


def _links(dashboard: dict) -> list[dict]:
    out = list(dashboard.get("links", []))
    for p in dashboard["panels"]:
        out += p.get("fieldConfig", {}).get("defaults", {}).get("links", [])
    return out


def test_dashboard_model(dashboard):
    assert dashboard["uid"] == "neuronscope-overview" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert "__inputs" not in dashboard, "provisioned dashboards do not resolve __inputs: use the datasource variable"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("x", "y", "w", "h")) and 0 <= g["x"] and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["refId"] and t["expr"].strip() and t["datasource"]["uid"] == "${datasource}"
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for needed in ("Top ops by device time", "Device busy % over time", "Bound by", "Step time p50 / p99", "sampled / skipped"):
        assert needed in titles


def test_every_variable_used_is_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "traces", "job", "device", "profile", "jaeger_url"} <= defined
    texts = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    texts += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    texts += [link["url"] for link in _links(dashboard)]
    used = set().union(*(_vars_in(t) for t in texts))
    assert used - BUILTINS <= defined, used - BUILTINS - defined
    by_name = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert by_name["datasource"]["type"] == "datasource" and by_name["datasource"]["query"] == "prometheus"
    assert by_name["traces"]["type"] == "datasource" and by_name["traces"]["query"] == "tempo"
    for name in ("device", "profile"):  # "All" must be a regex for the =~ matchers
        assert by_name[name]["includeAll"] and by_name[name]["allValue"] == ".*"


def _interpolate(url: str, op: str = "aten::mm", profile: str = "serve") -> str:
    """What Grafana makes of a link: variables and field labels replaced, ``:percentencode``
    ones percent-encoded, ``:raw`` and plain ones as they are."""
    values = {
        "__field.labels.neuronscope_op_name": op, "__field.labels.neuronscope_profile_name": profile,
        "traces": "tempo", "__from": "1700000000000", "__to": "1700003600000",
        "jaeger_url": "http://localhost:16686", "job": "my-model",
    }
    def one(m: re.Match) -> str:
        value = values[m.group(1)]
        return urllib.parse.quote(value, safe="") if m.group(2) == "percentencode" else value

    return re.sub(r"\$\{([\w.]+)(?::(\w+))?\}", one, url)


def test_trace_links_are_well_formed(dashboard):
    seen = {"tempo": 0, "jaeger": 0}
    for link in _links(dashboard):
        # values that land inside a query string must be encoded: op names have ':' and more
        for var in re.findall(r"\$\{(__field[\w.]+|job)(?::(\w+))?\}", link["url"]):
            assert var[1] == "percentencode", (link["title"], var)
        url = urllib.parse.urlsplit(_interpolate(link["url"]))
        params = urllib.parse.parse_qs(url.query)
        if url.path == "/explore":
            seen["tempo"] += 1
            (pane,) = json.loads(params["panes"][0]).values()
            (query,) = pane["queries"]
            assert pane["datasource"] == query["datasource"]["uid"] == "tempo"
            assert query["queryType"] == "traceql" and query["query"].startswith("{ span.neuronscope.")
            assert pane["range"] == {"from": "1700000000000", "to": "1700003600000"}
            if "op.name" in query["query"]:
                assert query["query"] == '{ span.neuronscope.op.name = "aten::mm" }'
        else:
            seen["jaeger"] += 1
            assert url.netloc == "localhost:16686" and url.path == "/search" and params["service"] == ["my-model"]
            if "tags" in params:
                assert json.loads(params["tags"][0]) == {"neuronscope.op.name": "aten::mm"}
    assert seen["tempo"] >= 3 and seen["jaeger"] >= 2, seen


def test_trace_links_name_real_span_attributes(dashboard, xw):
    """The TraceQL in the links filters on attributes neuronscope's spans really carry."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ns.configure(tracer_provider=provider)
    try:
        with ns.profile_neuron(name="linked"):
            rmsnorm_naive(*xw)
        ns.flush(30)
    finally:
        ns.configure(tracer_provider=None)
    attributes = set().union(*(set(s.attributes) for s in exporter.get_finished_spans()))
    queried = set()
    for link in _links(dashboard):
        if "/explore" in link["url"]:
            panes = json.loads(urllib.parse.parse_qs(urllib.parse.urlsplit(_interpolate(link["url"])).query)["panes"][0])
            queried |= set(re.findall(r"span\.([\w.]+)", next(iter(panes.values()))["queries"][0]["query"]))
    assert queried and queried <= attributes, queried - attributes


def test_compose_setup_provisions_the_dashboard():
    compose = yaml.safe_load((OBS / "tempo" / "docker-compose.yaml").read_text(encoding="utf-8"))
    grafana = compose["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    provider_mount = next(dst for src, dst in mounts.items() if src.endswith("grafana/dashboards.yaml"))
    assert provider_mount.startswith("/etc/grafana/provisioning/dashboards/")
    (provider,) = yaml.safe_load((OBS / "grafana" / "dashboards.yaml").read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file"
    json_mount = next(dst for src, dst in mounts.items() if src.endswith("neuronscope-dashboard.json"))
    assert (OBS / "tempo" / next(src for src in mounts if src.endswith(".json"))).resolve() == DASHBOARD_FILE.resolve()
    assert Path(json_mount).parent == Path(provider["options"]["path"])
    # Exemplars: Prometheus stores them, Grafana sends their trace_id to the Tempo data source.
    assert "--enable-feature=exemplar-storage" in compose["services"]["prometheus"]["command"]
    sources = {d["uid"]: d for d in yaml.safe_load((OBS / "tempo" / "grafana" / "datasources.yaml").read_text(encoding="utf-8"))["datasources"]}
    (dest,) = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert dest["name"] == "trace_id" and sources[dest["datasourceUid"]]["type"] == "tempo"


def test_the_grafana_page_shows_every_query_as_it_is(dashboard):
    page = (ROOT / "docs" / "grafana.md").read_text(encoding="utf-8")
    for panel in dashboard["panels"]:
        assert panel["title"] in page or panel["type"] == "row" and panel["title"].split(" (")[0] in page, panel["title"]
        for target in panel.get("targets", []):
            assert target["expr"] in page, f"docs/grafana.md lacks the query of {panel['title']!r}"
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            assert var["query"]["query"] in page, var["name"]
