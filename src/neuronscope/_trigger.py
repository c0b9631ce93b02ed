"""``Trigger``: why a run was captured on demand (armed, or after a slow call).

Kept free of torch: ``ns.load_run`` and ``neuronscope show`` read it back from manifest.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Trigger", "explanation_from_dict", "key_for_manifest"]

TriggerKind = Literal["slow", "arm"]


@dataclass(frozen=True)
class Trigger:
    """Why this run was profiled although sampling did not choose it.

    ``kind`` is ``"arm"`` (``ns.arm()`` or ``neuronscope arm PID``) or ``"slow"`` (a
    :class:`~neuronscope.SlowCalls` trigger fired). ``reason`` is one line, e.g.
    ``"call 812 took 41.2 ms > p99 12.0 ms"``; ``call_ms`` the slow call's wall time and
    ``threshold_ms`` the threshold it crossed (None for arming); ``key`` the slow call's
    ``key(*args, **kwargs)`` when the trigger has a key (the captured calls share it).
    """

    kind: TriggerKind
    reason: str
    call_ms: float | None = None
    threshold_ms: float | None = None
    key: Any = None
    #: the OpenTelemetry span context current when the slow call ended (a span link), if any
    span_context: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "reason": self.reason,
            "call_ms": self.call_ms,
            "threshold_ms": self.threshold_ms,
            "key": key_for_manifest(self.key),
        }
        ctx = self.span_context
        if ctx is not None and getattr(ctx, "is_valid", False):
            data["link"] = {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trigger:
        kind = data.get("kind")
        if kind not in ("slow", "arm"):
            raise ValueError(f"unknown trigger kind {kind!r}")

        def num(k: str) -> float | None:
            v = data.get(k)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(
            kind=kind,
            reason=str(data.get("reason", "")),
            call_ms=num("call_ms"),
            threshold_ms=num("threshold_ms"),
            key=data.get("key"),
        )

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


def key_for_manifest(key: Any) -> Any:
    """A key as JSON keeps it: plain scalars as they are, anything else as its ``repr`` (capped)."""
    if key is None or isinstance(key, (bool, int, float, str)):
        return key if not isinstance(key, str) else key[:200]
    return repr(key)[:200]


def explanation_from_dict(data: dict[str, Any]) -> Any:
    """The :class:`~neuronscope.analysis.explain.Explanation` saved in a manifest, rebuilt."""
    from .analysis.diff import Delta, RegionDelta
    from .analysis.explain import Contribution, Explanation

    contributions = tuple(
        Contribution(c["kind"], str(c["name"]), float(c["a_us"]), float(c["b_us"])) for c in data.get("contributions", ())
    )
    regions = tuple(
        RegionDelta(
            path=str(r["path"]),
            presence=r["presence"],
            occurrences=Delta(r["occurrences"]["a"], r["occurrences"]["b"]),
            wall_time_us=Delta(r["wall_time_us"]["a"], r["wall_time_us"]["b"]),
            device_time_us=Delta(r["device_time_us"]["a"], r["device_time_us"]["b"]),
        )
        for r in data.get("regions", ())
    )
    return Explanation(
        a_us=float(data["a_us"]), b_us=float(data["b_us"]), contributions=contributions, steps=data.get("steps"), regions=regions
    )
