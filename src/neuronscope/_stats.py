"""Process-wide counters: what happened to each call of a profiled function; and
:func:`contain`, the one way a failure inside neuronscope is counted, logged and noted."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

__all__ = ["OUTCOMES", "contain", "record", "reset", "stats"]

log = logging.getLogger("neuronscope")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
#: every call ends in exactly one of these (a call profiled in several windows of a schedule
#: counts once per window): calls == sum(stats()[k] for k in OUTCOMES)
OUTCOMES = ("profiled", "unsampled", "skipped", "skipped_backpressure", "joined", "failed")
_KEYS = (
    "calls",
    "profiled",
    "skipped",
    "skipped_backpressure",
    "backpressure_waits",
    "errors",
    "failed",
    "unsampled",
    "joined",
    "telemetry_dropped",
    "armed",
    "triggered",
    "arm_expired",
    "triggers_fired",
    "triggers_suppressed",
    "trigger_baselines",
)
# Counters kept elsewhere for speed (the sampling hot path), summed in at read time.
_sources: list[Callable[[], dict[str, int]]] = []
_offsets: Counter[str] = Counter()  # what reset() subtracts from those sources


def register_source(source: Callable[[], dict[str, int]]) -> None:
    _sources.append(source)


def _from_sources() -> Counter[str]:
    total: Counter[str] = Counter()
    for source in _sources:
        total.update(source())
    return total


def record(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def stats() -> dict[str, int]:
    """Counts since start (or the last fork):

    ``profiled`` captures completed; ``skipped`` calls that ran unprofiled because another
    capture was active (on another thread, or a foreign torch profiler);
    ``skipped_backpressure`` sampled calls not profiled because the profiles waiting to be
    written held more than ``max_pending_bytes`` (decided before profiling, so nothing is
    thrown away); ``backpressure_waits`` profiles without sampling options that waited for
    those to be written instead of being skipped; ``joined`` profiles nested in a scheduled
    one, recorded as its region;
    ``unsampled`` calls the sampler passed over (a decided sample is always processed: every
    sampled call ends up in ``profiled``, ``skipped``, ``skipped_backpressure`` or ``joined``);
    ``errors`` failures inside neuronscope (logged, never raised into user code);
    ``failed`` profiles that could not be started or processed (the call itself ran normally);
    ``calls`` every call of a profiled function or ``with`` block. The outcomes partition the
    calls exactly: ``calls == profiled + unsampled + skipped + skipped_backpressure + joined +
    failed`` (``OUTCOMES``; a schedule counts one ``profiled`` per window);
    ``telemetry_dropped`` spans/metrics the exporter could not deliver;
    ``armed`` calls profiled because of ``ns.arm()`` / ``neuronscope arm`` (``arm_expired``:
    arm requests dropped unfilled); ``triggered`` calls profiled because a
    :class:`~neuronscope.SlowCalls` trigger fired (``trigger_baselines``: normal calls it
    profiled to compare with). These three are also counted in ``profiled``.
    ``triggers_fired`` slow calls that armed a capture, ``triggers_suppressed`` slow calls that
    did not because of ``max_per_hour``.
    """
    external = _from_sources()
    with _lock:
        merged = Counter(_counts)
        for k, v in external.items():
            merged[k] += v - _offsets.get(k, 0)
        return {k: merged.get(k, 0) for k in _KEYS} | {k: v for k, v in merged.items() if k not in _KEYS}


def reset() -> None:
    external = _from_sources()
    with _lock:
        _counts.clear()
        _offsets.clear()
        _offsets.update(external)


_contained_once: set[str] = set()


def contain(
    what: str,
    exc: BaseException,
    *,
    name: str | None = None,
    warnings: list[str] | Callable[[str], object] | None = None,
    exc_info: bool = True,
    once: bool = False,
) -> None:
    """Contain a failure inside neuronscope so it never reaches the user's code: count it in
    ``stats()["errors"]``, log one warning and, given a run's ``warnings`` (a list, or a
    function such as ``run.warn``), note it there.

    Call it from the ``except`` block that stops the failure::

        except Exception as exc:  # noqa: BLE001 - a diagnosis bug must not cost the summary
            _stats.contain("diagnosis", exc, name=run.name, warnings=run.warnings)

    logs ``neuronscope: diagnosis of 'infer' failed: <exc>`` (with the traceback unless
    ``exc_info=False``) and appends ``diagnosis failed: <exc!r>`` to ``warnings``.
    ``once=True`` logs only the first failure of this ``what`` in the process (telemetry: a
    collector that is down fails every export); every failure is still counted and noted.
    """
    record("errors")
    note = f"{what} failed: {exc!r}"
    if isinstance(warnings, list):
        warnings.append(note)
    elif warnings is not None:
        warnings(note)
    if once:
        if what in _contained_once:
            return
        _contained_once.add(what)
    subject = what if name is None else f"{what} of {name!r}"
    log.warning("neuronscope: %s failed: %s", subject, exc, exc_info=exc if exc_info else None)
