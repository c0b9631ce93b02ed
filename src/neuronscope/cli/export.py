"""``neuronscope export PATH``: send a saved run's spans and metrics to OTLP."""

from __future__ import annotations

from typing import Any

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
    changes: dict[str, Any] = {"exporter": "otlp", "otlp_endpoint": otlp_endpoint}
    if service_name:
        changes["service_name"] = service_name
    try:
        ns.configure(**changes)
    except ns.ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    trace_id = ns.export_run(path, op_spans=op_spans)  # sends, and flushes within 30 s
    click.echo(_verdict(path, trace_id))


def _verdict(path: str, trace_id: str | None) -> str:
    """What arrived: the line to print, or a Failure (exit 1) when the spans did not arrive or
    metrics failed for another reason than the endpoint not taking them (a traces-only backend:
    said in one line by the exporter's health, and the export succeeds for the spans)."""
    import neuronscope as ns
    from neuronscope.sinks.otel import export_outcome

    outcome = export_outcome()
    if trace_id is None or outcome is None:
        raise Failure(f"{path}: nothing to export to: no OpenTelemetry tracer provider (OTEL_TRACES_EXPORTER=none?)")
    traces, metrics = outcome["traces"], outcome["metrics"]
    dropped = ns.stats()["telemetry_dropped"]
    if traces["lost"] or not traces["delivered"]:
        why = traces["reason"] or "the endpoint did not answer within 30 s"
        raise Failure(f"{path}: the spans did not reach the OTLP endpoint ({why}); {dropped} items dropped")
    if metrics["lost"] and not metrics["not_taken"]:
        raise Failure(f"{path}: spans exported as trace {trace_id}, but the metrics were not ({metrics['reason']})")
    if metrics["not_taken"]:
        return f"exported {path} as trace {trace_id} (spans only: the endpoint does not take metrics)"
    return f"exported {path} as trace {trace_id}"
