"""One OpenTelemetry trace per distributed step: every rank's root span under one step span.

Ranks are separate processes with nothing to pass a trace context through, so the context is
*derived*: the trace id and the step span's id are hashes of (job id, restart count, profile
name, call index, schedule window). Every rank computes the same ones for the same step — the
n-th call of a profile is the n-th on every rank, since ranks run the same code — and parents
its root span ``"<name> rank <N>"`` to that remote span context. The step span itself,
``"<name> step <n>"``, is emitted once, by the lowest rank that profiles (rank 0 with
``ranks="all"``), with that rank's start and end; so Jaeger, Tempo and Phoenix show one
trace per step with one child per rank.

A span the application made current when the profile started (a request span) wins: the
root span goes under it, as in a single process, and no step span is made. What breaks the
derivation: ranks calling the profiled function different numbers of times (rank 0 also
evaluating, say), and a job id shared by two launches (a fixed MASTER_ADDR:MASTER_PORT with
no run id: set ``NEURONSCOPE_JOB_ID``).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

__all__ = ["StepContext", "emit_step_span", "rank_attributes", "rank_resource_attributes", "step_context"]

log = logging.getLogger("neuronscope")


@dataclass(frozen=True)
class StepContext:
    trace_id: int
    span_id: int  #: the step span's id
    index: int
    window: int
    rank: int
    emits_root: bool  #: this rank emits the step span
    context: Any  #: an OpenTelemetry Context holding the remote step span

    @property
    def trace_id_hex(self) -> str:
        return format(self.trace_id, "032x")


def _hash(text: str, nbytes: int) -> int:
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=nbytes).digest(), "big")
    return value or 1  # an all-zero id is invalid


def _has_user_span(parent: Any) -> bool:
    if parent is None:
        return False
    return trace.get_current_span(parent).get_span_context().is_valid


def step_context(run: Any, parent: Any) -> StepContext | None:
    """The derived step context of a rank's run; None for a single-process run, or when the
    application's own span is the parent."""
    m = run.manifest
    dist = m.get("distributed")
    if "rank" not in m or not isinstance(dist, dict) or _has_user_span(parent):
        return None
    index = int(dist.get("call_index", 0))
    window = int(m.get("window") or 0)
    launch = dist.get("launch_id")  # absent before the process group is up: the job id alone
    seed = f"{m.get('job_id')}|{dist.get('restart_count', 0)}|{run.name}|{index}|{window}"
    if launch:
        seed = f"{launch}|{seed}"
    trace_id, span_id = _hash(seed, 16), _hash(seed + "|step", 8)
    profiled = dist.get("profiled_ranks", "all")
    first = 0 if profiled == "all" or not profiled else min(int(r) for r in profiled)
    remote = trace.NonRecordingSpan(
        trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    )
    base = parent if parent is not None else otel_context.Context()
    return StepContext(
        trace_id=trace_id,
        span_id=span_id,
        index=index,
        window=window,
        rank=int(m["rank"]),
        emits_root=int(m["rank"]) == first,
        context=trace.set_span_in_context(remote, base),
    )


class _FixedIds:
    """An IdGenerator that hands out the derived ids (the step span's only)."""

    def __init__(self, trace_id: int, span_id: int) -> None:
        self._trace_id, self._span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        return self._trace_id

    def generate_span_id(self) -> int:
        return self._span_id

    def is_trace_id_random(self) -> bool:
        return False


def emit_step_span(tracer: Any, run: Any, step: StepContext) -> bool:
    """Emit the step span with its derived ids (an SDK tracer only: other tracers choose ids
    themselves, and the ranks' spans then stay in one trace without a recorded root)."""
    if not hasattr(tracer, "id_generator"):
        log.debug("neuronscope: tracer %r cannot emit a span with a given id; no step span", type(tracer).__name__)
        return False
    fixed = copy.copy(tracer)  # shares the provider's processors, sampler and resource
    fixed.id_generator = _FixedIds(step.trace_id, step.span_id)
    m = run.manifest
    attrs = {
        "neuronscope.run.name": run.name[:256],
        "neuronscope.step.index": step.index,
        "neuronscope.world_size": int(m.get("world_size") or 0),
        "neuronscope.job.id": str(m.get("job_id"))[:256],
        "neuronscope.distributed.step": True,
    }
    if step.window:
        attrs["neuronscope.window"] = step.window
    label = f"{run.name} step {step.index}" + (f" window {step.window}" if step.window else "")
    span = fixed.start_span(label[:256], context=otel_context.Context(), start_time=run.start_ns, attributes=attrs)
    span.end(end_time=run.end_ns)
    return True


def rank_attributes(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Root-span attributes of a rank's run (none for a single-process run)."""
    if "rank" not in manifest:
        return {}
    dist = v if isinstance(v := manifest.get("distributed"), dict) else {}
    attrs: dict[str, Any] = {
        "neuronscope.rank": int(manifest["rank"]),
        "neuronscope.world_size": int(manifest.get("world_size") or 0),
        "neuronscope.job.id": str(manifest.get("job_id"))[:256],
        "neuronscope.step.index": int(dist.get("call_index", 0)),
    }
    for key, attr in (("local_rank", "neuronscope.local_rank"), ("node_rank", "neuronscope.node_rank")):
        if manifest.get(key) is not None:
            attrs[attr] = int(manifest[key])
    if dist.get("backend"):
        attrs["neuronscope.distributed.backend"] = str(dist["backend"])
    if manifest.get("host"):
        attrs["host.name"] = str(manifest["host"])  # semantic convention (a resource attribute too)
    return attrs


def rank_resource_attributes() -> dict[str, Any]:
    """Resource attributes of the providers neuronscope builds itself, in a distributed job:
    ``service.instance.id`` is ``<job id>/rank<N>`` (unique per rank, as the convention asks).
    What ``OTEL_RESOURCE_ATTRIBUTES`` sets is left out: the user's setting wins."""
    from opentelemetry.sdk.resources import OTELResourceDetector

    from ..._ranks import current

    info = current()
    if info is None:
        return {}
    attrs: dict[str, Any] = {
        "service.instance.id": f"{info.job_id}/rank{info.rank}",
        "host.name": info.host or socket.gethostname(),
        "neuronscope.rank": info.rank,
        "neuronscope.world_size": info.world_size,
        "neuronscope.job.id": info.job_id,
    }
    if info.local_rank is not None:
        attrs["neuronscope.local_rank"] = info.local_rank
    if info.node_rank is not None:
        attrs["neuronscope.node_rank"] = info.node_rank
    from_env = OTELResourceDetector().detect().attributes
    return {k: v for k, v in attrs.items() if k not in from_env}
