"""What every profile needs wired once per process, whichever entry point came first
(``ns.profile_neuron`` or an ``api`` function): the OpenTelemetry sink on the output worker,
the Prometheus endpoint from the environment, and a bounded flush at interpreter exit."""

from __future__ import annotations

import atexit
import logging
import os
import time

from .._worker import flush_all
from ..sinks import otel as _otel
from .processing import add_sink

log = logging.getLogger("neuronscope")


def flush(timeout: float | None = 30.0) -> bool:
    """Wait for every finished profile to be processed and its telemetry exported (``ns.flush``)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = flush_all(timeout)
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    return _otel.flush_providers(remaining) and done


def _flush_at_exit() -> None:
    timeout = float(os.environ.get("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", "10"))
    if not flush(timeout):
        log.warning("neuronscope: pending profiles/telemetry not finished within %.0f s at exit", timeout)
    _otel.shutdown_providers()


add_sink(_otel.export_to_otel)
_otel.start_prometheus_from_environment()  # NEURONSCOPE_PROMETHEUS_PORT; problems are only logged
atexit.register(_flush_at_exit)
