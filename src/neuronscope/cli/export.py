"""``neuronscope export PATH``: send a saved run's spans and metrics to OTLP."""

from __future__ import annotations

import click

from ._group import Failure, cli


@cli.command("export")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--otlp-endpoint", metavar="URL", default=None, help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT).")
@click.option("--op-spans", type=click.Choice(("summary", "events", "none")), default=None, help="Span mode (default summary).")
@click.option("--service-name", default=None, help="service.name of the spans (default: OTEL_SERVICE_NAME).")
def export(path: str, otlp_endpoint: str | None, op_spans: str | None, service_name: str | None) -> None:
    """Replay the spans and metrics of the run directory PATH, with their original timestamps.

    For profiles captured where no collector was reachable. The protocol follows
    OTEL_EXPORTER_OTLP_PROTOCOL (grpc | http/protobuf); headers OTEL_EXPORTER_OTLP_HEADERS.
    """
    import neuronscope as ns
    from neuronscope import _env

    if otlp_endpoint is None and not (
        _env.env_str("OTEL_EXPORTER_OTLP_ENDPOINT", None) or _env.env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    ):
        raise click.UsageError("no OTLP endpoint: pass --otlp-endpoint URL or set OTEL_EXPORTER_OTLP_ENDPOINT")
    changes: dict[str, object] = {"exporter": "otlp", "otlp_endpoint": otlp_endpoint}
    if service_name:
        changes["service_name"] = service_name
    try:
        ns.configure(**changes)
    except ns.ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    trace_id = ns.export_run(path, op_spans=op_spans)
    if trace_id is None or not ns.flush(30):
        raise Failure(f"{path}: export did not complete (endpoint unreachable?); see the log above")
    if ns.stats()["telemetry_dropped"]:
        raise Failure(f"{path}: the OTLP endpoint refused or did not answer; {ns.stats()['telemetry_dropped']} items dropped")
    click.echo(f"exported {path} as trace {trace_id}")
