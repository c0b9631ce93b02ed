"""What every profile needs wired once per process, whichever entry point came first
(``ns.profile_neuron`` or an ``api`` function): the Prometheus endpoint from the environment
and a bounded flush at interpreter exit. The sinks a run goes to are chosen per run
(:func:`neuronscope.sinks.active_sinks`)."""

from __future__ import annotations

import atexit
import logging
import time

from .. import _env, sinks
from .._worker import flush_all
from ..sinks import otel as _otel

log = logging.getLogger("neuronscope")


def flush(timeout: float | None = 30.0) -> bool:
    """Wait for every finished profile to be processed and its telemetry exported (``ns.flush``):
    the workers, then every sink's ``force_flush``, within one deadline."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = flush_all(timeout)
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    return sinks.flush(remaining) and done


def _flush_at_exit() -> None:
    # lenient: a malformed value is one warning and the default, never a skipped shutdown
    timeout = _env.EXIT_FLUSH_TIMEOUT.get(lenient=True)
    # Flush and shutdown together keep within the timeout: the OpenTelemetry flush leaves the
    # shutdown its share and aborts an export still retrying when its time is up (_otel.exiting).
    with _otel.exiting(timeout):
        # A failed export was already reported, in one line: the timeout is its consequence.
        if not flush(timeout) and not _otel.export_failure_reported():
            log.warning(
                "neuronscope: pending profiles/telemetry not finished within %g s at exit "
                "(NEURONSCOPE_EXIT_FLUSH_TIMEOUT); the rest is dropped",
                timeout,
            )
        sinks.shutdown()


_otel.start_prometheus_from_environment()  # NEURONSCOPE_PROMETHEUS_PORT; problems are only logged
atexit.register(_flush_at_exit)
# ahead of the atexit hooks of the application's OpenTelemetry providers, made after this import
_otel.exit_handler_first(_flush_at_exit)
