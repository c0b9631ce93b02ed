"""The docker compose setups in examples/observability/ are well-formed (Docker is not run here).

Checks what can be checked without a Docker engine: every YAML file parses; each compose
file pins its images and mounts files that exist; the Collector configs define every
component their pipelines use and receive OTLP on 4317 (gRPC) and 4318 (HTTP); the backend
configs point where the compose services are; Grafana has the Tempo data source provisioned.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _doc_blocks import ROOT

yaml = pytest.importorskip("yaml", reason='PyYAML comes with the docs extra: pip install -e ".[docs]"')

OBS = ROOT / "examples" / "observability"
SETUPS = ("jaeger", "tempo")


def load(path: Path):
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_every_yaml_file_parses():
    files = sorted([*OBS.rglob("*.yaml"), *OBS.rglob("*.yml")])
    assert len(files) >= 7, files
    for f in files:
        assert isinstance(load(f), dict), f"{f} is not a YAML mapping"


@pytest.mark.parametrize("setup", SETUPS)
def test_compose_file(setup):
    compose = load(OBS / setup / "docker-compose.yaml")
    services = compose["services"]
    assert "otel-collector" in services
    for name, service in services.items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and "/" not in tag, f"{setup}/{name}: pin the image version ({image})"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (OBS / setup / source).exists(), f"{setup}/{name} mounts {source}, which does not exist"
            else:
                assert source in (compose.get("volumes") or {}), f"{setup}/{name}: undeclared named volume {source}"
        for dep in service.get("depends_on", []):
            assert dep in services, f"{setup}/{name} depends on unknown service {dep}"
    ports = {p.rsplit(":", 1)[-1] for p in services["otel-collector"]["ports"]}
    assert {"4317", "4318"} <= ports


@pytest.mark.parametrize("setup", SETUPS)
def test_collector_config(setup):
    config = load(OBS / setup / "otel-collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (config.get(kind) or {}), f"{setup}: pipeline {name} uses undefined {kind[:-1]} {component}"
    compose_services = set(load(OBS / setup / "docker-compose.yaml")["services"])
    for exporter in config["exporters"].values():
        endpoint = (exporter or {}).get("endpoint")
        if endpoint:
            host = endpoint.split("://")[-1].split(":")[0]
            assert host in compose_services, f"{setup}: exporter sends to {endpoint}, not a compose service"


def test_tempo_backend_and_grafana_provisioning():
    tempo = load(OBS / "tempo" / "tempo.yaml")
    assert tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert tempo["storage"]["trace"]["backend"] == "local"
    sources = {d["type"]: d for d in load(OBS / "tempo" / "grafana" / "datasources.yaml")["datasources"]}
    assert sources["tempo"]["url"] == "http://tempo:3200" and sources["tempo"]["isDefault"] is True
    assert sources["prometheus"]["url"] == "http://prometheus:9090"
    prometheus = load(OBS / "tempo" / "docker-compose.yaml")["services"]["prometheus"]
    assert "--web.enable-otlp-receiver" in prometheus["command"]


def test_readme_names_the_variables():
    readme = (OBS / "README.md").read_text(encoding="utf-8")
    for var in ("OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS"):
        assert var in readme
    assert "http://localhost:4318" in readme and "http://localhost:4317" in readme


def test_multirank_setup_agents_forward_to_a_gateway():
    setup = OBS / "multirank"
    compose = load(setup / "docker-compose.yaml")
    services = compose["services"]
    agents = [n for n in services if n.startswith("otel-agent-")]
    assert len(agents) >= 2 and "otel-gateway" in services and "jaeger" in services
    host_ports = []
    for name, service in services.items():
        repo, _, tag = service["image"].rpartition(":")
        assert repo and tag and tag != "latest", f"multirank/{name}: pin the image version"
        for volume in service.get("volumes", []):
            assert (setup / volume.split(":", 1)[0]).exists(), f"multirank/{name} mounts a missing file"
        for dep in service.get("depends_on", []):
            assert dep in services
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"multirank/{name} publishes {port} beyond loopback"
            host_ports.append(port.split(":")[1])
    assert len(host_ports) == len(set(host_ports)), "two services publish the same host port"
    for name, config_file, target in (("agent", "otel-agent.yaml", "otel-gateway"), ("gateway", "otel-gateway.yaml", "jaeger")):
        config = load(setup / config_file)
        protocols = config["receivers"]["otlp"]["protocols"]
        assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317" and protocols["http"]["endpoint"] == "0.0.0.0:4318"
        pipelines = config["service"]["pipelines"]
        assert {"traces", "metrics"} <= set(pipelines)
        for pipeline in pipelines.values():
            for kind in ("receivers", "processors", "exporters"):
                for component in pipeline.get(kind, []):
                    assert component in (config.get(kind) or {}), f"multirank {name}: undefined {kind[:-1]} {component}"
        trace_exporters = pipelines["traces"]["exporters"]
        hosts = {config["exporters"][e]["endpoint"].split(":")[0] for e in trace_exporters}
        assert hosts == {target}, f"multirank {name} sends traces to {hosts}, not {target}"
    for agent in agents:
        assert services[agent]["volumes"][0].startswith("./otel-agent.yaml")

