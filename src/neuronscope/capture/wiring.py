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
    if not flush(timeout):
        log.warning("neuronscope: pending profiles/telemetry not finished within %.0f s at exit", timeout)
    sinks.shutdown()


_otel.start_prometheus_from_environment()  # NEURONSCOPE_PROMETHEUS_PORT; problems are only logged
atexit.register(_flush_at_exit)
