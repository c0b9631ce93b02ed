"""Neuron Explorer's Summary: read it (one metrics dict per device profile) and apply its rules.

The Summary fields read (``profile-schema-reference.rst``, schema 7.4.0 / Neuron 2.31, and the
2.34 deprecations in ``announce-intent-eos-explorer-summary-fields``): ``total_time`` (s),
``mfu_estimated_percent``, ``hfu_estimated_percent``, ``mbu_estimated_percent`` (2.34:
``hbm_mbu_estimated_percent``, same value; ``dma_mbu_estimated_percent``),
``<engine>_engine_active_time_percent`` for tensor/vector/scalar/gpsimd/sync,
``dma_active_time`` (s), ``dma_active_time_percent``, ``hbm_read_bytes`` (2.34:
``instruction_hbm_read_bytes``, or the more accurate ``packet_hbm_read_bytes``),
``spill_reload_bytes``, ``spill_save_bytes``, ``cc_op_active_time_percent``, ``model_flops``,
``hardware_flops``, ``transpose_flops``, and ``throttle_active_time_percent`` /
``max_achievable_util_with_throttling_percent`` (ThrottleSummary).

:func:`explorer_findings` applies the insight rules Explorer's Summary Viewer publishes
(``overview-summary-page.rst``): model FLOPs < 50 % of active FLOPs, NKI instruction coverage
< 50 % on the tensor/vector/scalar engine, active throttling, transpose FLOPs > 10 % of
hardware FLOPs, spill reload bytes > 25 % of HBM reads.

Example (a summary-json document as Explorer prints it: one object per device profile)::

    >>> from neuronscope.capture.devices.neuron_explorer_summary import explorer_findings, parse_summary
    >>> profiles = parse_summary({"profile_nc_0": {"total_time": 0.01, "mfu_estimated_percent": 10.0,
    ...                                            "tensor_engine_active_time_percent": 40.0}})
    >>> [f.rule for f in explorer_findings(profiles[0])]
    ['neuron_mfu_low']
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...analysis.diagnosis.model import Finding

__all__ = [
    "ENGINES",
    "MAX_PROFILES",
    "aggregate",
    "explorer_findings",
    "findings_for_profiles",
    "json_in",
    "metrics_of",
    "parse_summary",
    "read_summary_file",
]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
NKI_ENGINES = ("tensor", "vector", "scalar")  # the engines Explorer's NKI chart covers
#: Explorer's published thresholds (overview-summary-page.rst, "Example recommendations")
MODEL_TO_ACTIVE_MIN = 0.50
NKI_COVERAGE_MIN = 0.50
TRANSPOSE_MAX = 0.10
SPILL_RELOAD_MAX = 0.25
#: without ThrottleSummary's achievable utilisation: Trn2/Trn3 throttle to ~50 % (troubleshooting.rst)
_THROTTLED_UTIL = 0.5
#: the device profiles a result or finding lists by name, at most
MAX_PROFILES = 32


# ---------------------------------------------------------------------------------- parsing


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _first(fields: Mapping[str, Any], *names: str) -> tuple[float | None, str | None]:
    for name in names:
        v = _num(fields.get(name))
        if v is not None:
            return v, name
    return None, None


def _flat(d: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level fields, plus those of nested tables (e.g. a ``ThrottleSummary`` row with
    ``throttle_type == "all"``) that the top level lacks."""
    out = {k: v for k, v in d.items() if not isinstance(v, (dict, list))}
    for v in d.values():
        rows = v if isinstance(v, list) else [v] if isinstance(v, dict) else []
        rows = [r for r in rows if isinstance(r, dict)]
        pick = next((r for r in rows if r.get("throttle_type") == "all"), rows[0] if len(rows) == 1 else None)
        if pick:
            for k, x in pick.items():
                if not isinstance(x, (dict, list)):
                    out.setdefault(k, x)
    return out


def metrics_of(fields: Mapping[str, Any], name: str = "profile") -> dict[str, Any]:
    """Explorer Summary fields -> neuronscope's metric names (JSON-able; absent fields are left out).

    ``fields_used`` records which Explorer field each value came from, so a reader can tell a
    2.34 ``hbm_mbu_estimated_percent`` from a ``mbu_estimated_percent``.
    """
    f = _flat(fields)
    m: dict[str, Any] = {"name": str(name)}
    used: dict[str, str] = {}

    def take(key: str, *names: str) -> None:
        v, src = _first(f, *names)
        if v is not None and src is not None:
            m[key] = v
            used[key] = src

    take("total_time_s", "total_time")
    take("mfu_percent", "mfu_estimated_percent")
    take("hfu_percent", "hfu_estimated_percent")
    take("mbu_percent", "hbm_mbu_estimated_percent", "mbu_estimated_percent")  # 2.34 rename, same value
    take("dma_mbu_percent", "dma_mbu_estimated_percent")
    take("dma_active_time_s", "dma_active_time")
    take("dma_active_percent", "dma_active_time_percent")
    take("hbm_read_bytes", "packet_hbm_read_bytes", "instruction_hbm_read_bytes", "hbm_read_bytes")
    take("hbm_write_bytes", "packet_hbm_write_bytes", "instruction_hbm_write_bytes", "hbm_write_bytes")
    take("spill_reload_bytes", "spill_reload_bytes")
    take("spill_save_bytes", "spill_save_bytes")
    take("cc_active_percent", "cc_op_active_time_percent")
    take("model_flops", "model_flops")
    take("hardware_flops", "hardware_flops")
    take("transpose_flops", "transpose_flops")
    take("mm_arithmetic_intensity", "mm_arithmetic_intensity")
    take("throttle_active_percent", "throttle_active_time_percent")
    take("throttle_max_util_percent", "max_achievable_util_with_throttling_percent")
    engines: dict[str, float] = {}
    for e in ENGINES:
        v, src = _first(f, f"{e}_engine_active_time_percent")
        if v is not None and src:
            engines[e] = v
            used[f"engine_active_percent.{e}"] = src
    if engines:
        m["engine_active_percent"] = engines
    # NKI coverage: Explorer charts NKI vs compiler instruction counts per engine but does not
    # document the field names. <engine>_engine_instruction_count is documented; the NKI count
    # is read as <engine>_engine_nki_instruction_count (an assumption, named as such in the docs).
    nki: dict[str, float] = {}
    for e in NKI_ENGINES:
        total, _ = _first(f, f"{e}_engine_instruction_count")
        nki_count, src = _first(f, f"{e}_engine_nki_instruction_count")
        if total and nki_count is not None and src:
            nki[e] = 100.0 * nki_count / total
            used[f"nki_coverage_percent.{e}"] = src
    if nki:
        m["nki_coverage_percent"] = nki
    m["fields_used"] = used
    return m


def parse_summary(doc: Any) -> list[dict[str, Any]]:
    """Device profiles of a summary-json document (or Summary.parquet rows), as :func:`metrics_of` dicts.

    Explorer prints one object per device profile, keyed by its name; a flat object of
    Summary fields or a list of rows is accepted too.
    """
    items: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(doc, list):
        items = [
            (str(r.get("name") or r.get("profile_name") or f"profile_{i}"), r) for i, r in enumerate(doc) if isinstance(r, dict)
        ]
    elif isinstance(doc, dict):
        if "total_time" in doc:
            items = [(str(doc.get("name") or "profile"), doc)]
        else:
            items = [(str(k), v) for k, v in doc.items() if isinstance(v, dict)]
    profiles = [metrics_of(fields, name) for name, fields in items]
    return [p for p in profiles if len(p) > 2]  # more than name and fields_used: a real summary


def json_in(text: str) -> Any:
    """The JSON document in Explorer's output; log lines may come before it."""
    text = text.strip()
    for start in (0, text.find("{"), text.find("[")):
        if start >= 0:
            try:
                return json.loads(text[start:])
            except ValueError:
                continue
    raise ValueError("no JSON document found")


def read_summary_file(path: str | Path) -> list[dict[str, Any]]:
    """Device-profile metrics from a summary-json file or a ``Summary*.parquet`` table."""
    p = Path(path)
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # optional: only to read Explorer's default output
        except ImportError as exc:
            raise ValueError(f"{p}: reading Explorer's Parquet output needs pyarrow (pip install 'neuronscope[neuron]')") from exc
        return parse_summary(pq.read_table(p).to_pylist())
    return parse_summary(json_in(p.read_text(encoding="utf-8", errors="replace")))


def _weighted(profiles: Sequence[Mapping[str, Any]], key: str, sub: str | None = None) -> float | None:
    pairs = []
    for p in profiles:
        v = p.get(key)
        v = v.get(sub) if sub is not None and isinstance(v, dict) else (None if sub is not None else v)
        if v is not None:
            pairs.append((float(v), float(p.get("total_time_s") or 0.0)))
    if not pairs:
        return None
    weight = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / weight if weight > 0 else sum(v for v, _ in pairs) / len(pairs)


_SUMMED = (
    "total_time_s",
    "dma_active_time_s",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "spill_reload_bytes",
    "spill_save_bytes",
    "model_flops",
    "hardware_flops",
    "transpose_flops",
)
_AVERAGED = (
    "mfu_percent",
    "hfu_percent",
    "mbu_percent",
    "dma_mbu_percent",
    "dma_active_percent",
    "cc_active_percent",
    "throttle_active_percent",
    "throttle_max_util_percent",
    "mm_arithmetic_intensity",
)


def aggregate(profiles: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One set of metrics over all device profiles: sums of times/bytes/FLOPs, percentages
    weighted by each profile's ``total_time``."""
    if len(profiles) == 1:
        return {k: v for k, v in profiles[0].items() if k != "fields_used"} | {"profiles": 1}
    out: dict[str, Any] = {"name": "all device profiles", "profiles": len(profiles)}
    for k in _SUMMED:
        vals = [float(p[k]) for p in profiles if p.get(k) is not None]
        if vals:
            out[k] = sum(vals)
    for k in _AVERAGED:
        v = _weighted(profiles, k)
        if v is not None:
            out[k] = v
    for key, names in (("engine_active_percent", ENGINES), ("nki_coverage_percent", NKI_ENGINES)):
        per_engine = {e: v for e in names if (v := _weighted(profiles, key, e)) is not None}
        if per_engine:
            out[key] = per_engine
    return out


# ---------------------------------------------------------------------------------- rules


def _severity(us: float, total_us: float) -> str:
    if total_us <= 0:
        return "medium"
    share = us / total_us
    return "high" if share >= 0.20 else "medium" if share >= 0.05 else "low"


def _finding(rule: str, message: str, us: float, total_us: float, evidence: dict[str, Any]) -> Finding:
    return Finding(rule=rule, message=message, us_at_stake=max(us, 0.0), evidence=evidence, severity=_severity(us, total_us))


def explorer_findings(metrics: Mapping[str, Any]) -> list[Finding]:
    """Explorer's published Summary-page insight rules on one device profile's metrics.

    ``metrics`` is a :func:`metrics_of` dict. Each finding's ``us_at_stake`` is an estimate of
    the on-device time the problem costs, from ``total_time`` and the metric (see each rule);
    ``evidence`` holds the numbers, the threshold and the profile name. Rules whose inputs are
    missing are skipped. Ordered by ``us_at_stake``, largest first.
    """
    profile = _Profile(metrics)
    out: list[Finding] = []
    for rule in (_mfu_low, _nki_coverage_low, _throttling, _transpose_high, _spill_reload_high):
        out.extend(rule(profile))
    out.sort(key=lambda f: -f.us_at_stake)
    return out


class _Profile:
    """What every rule reads of one device profile's metrics."""

    def __init__(self, metrics: Mapping[str, Any]) -> None:
        self.metrics = metrics
        self.name = str(metrics.get("name", "profile"))
        self.t_us = float(metrics.get("total_time_s") or 0.0) * 1e6
        self.engines: Mapping[str, Any] = metrics.get("engine_active_percent") or {}
        self.tensor_active = self.engines.get("tensor")


def _mfu_low(p: _Profile) -> list[Finding]:
    mfu, name, t_us, tensor_active = p.metrics.get("mfu_percent"), p.name, p.t_us, p.tensor_active
    if mfu is None or not tensor_active:
        return []
    # Model FLOPs / active FLOPs = MFU / tensor-engine active share: both over peak x total_time.
    ratio = float(mfu) / float(tensor_active)
    if not ratio < MODEL_TO_ACTIVE_MIN:
        return []
    us = t_us * tensor_active / 100.0 * (1.0 - ratio)  # tensor-engine time not spent on model FLOPs
    return [
        _finding(
            "neuron_mfu_low",
            f"{name}: model FLOPs are {ratio:.0%} of the tensor engine's active FLOPs (< 50%): use the entire tensor "
            "engine (larger tiles) and pipeline its instructions",
            us,
            t_us,
            {
                "profile": name,
                "model_to_active": round(ratio, 4),
                "threshold": MODEL_TO_ACTIVE_MIN,
                "mfu_percent": mfu,
                "tensor_engine_active_percent": tensor_active,
                "total_time_s": p.metrics.get("total_time_s"),
            },
        )
    ]


def _nki_coverage_low(p: _Profile) -> list[Finding]:
    out = []
    for engine, coverage in sorted((p.metrics.get("nki_coverage_percent") or {}).items()):
        if coverage / 100.0 < NKI_COVERAGE_MIN:
            active = float(p.engines.get(engine) or 0.0)
            us = p.t_us * active / 100.0 * (1.0 - coverage / 100.0)  # engine time in compiler-generated code
            out.append(
                _finding(
                    "neuron_nki_coverage_low",
                    f"{p.name}: only {coverage:.0f}% of the {engine} engine's instructions come from NKI (< 50%): write NKI "
                    "kernels for the operations that dominate it",
                    us,
                    p.t_us,
                    {
                        "profile": p.name,
                        "engine": engine,
                        "nki_coverage_percent": round(coverage, 3),
                        "threshold_percent": NKI_COVERAGE_MIN * 100,
                        "engine_active_percent": p.engines.get(engine),
                    },
                )
            )
    return out


def _throttling(p: _Profile) -> list[Finding]:
    throttled = p.metrics.get("throttle_active_percent")
    if throttled is None or not throttled > 0:
        return []
    limit = p.metrics.get("throttle_max_util_percent")
    util = _THROTTLED_UTIL if limit is None else (limit / 100.0 if limit > 1.0 else float(limit))
    us = p.t_us * throttled / 100.0 * (1.0 - util)
    return [
        _finding(
            "neuron_throttling",
            f"{p.name}: the tensor engine was throttled {throttled:.1f}% of the time: keep it at or above 50% utilisation "
            "(pipeline instructions, overlap DMA with compute) so the current limiter does not re-engage",
            us,
            p.t_us,
            {
                "profile": p.name,
                "throttle_active_percent": throttled,
                "threshold_percent": 0.0,
                "achievable_utilisation": round(util, 4),
                "assumed_utilisation": limit is None,
            },
        )
    ]


def _transpose_high(p: _Profile) -> list[Finding]:
    transpose, hw = p.metrics.get("transpose_flops"), p.metrics.get("hardware_flops")
    if transpose is None or not hw:
        return []
    share = float(transpose) / float(hw)
    if not share > TRANSPOSE_MAX:
        return []
    us = p.t_us * float(p.tensor_active or 0.0) / 100.0 * share  # tensor-engine time spent transposing
    return [
        _finding(
            "neuron_transpose_high",
            f"{p.name}: transposes are {share:.1%} of the tensor engine's hardware FLOPs (> 10%): improve the memory "
            "layout so fewer transposes are needed",
            us,
            p.t_us,
            {
                "profile": p.name,
                "transpose_share": round(share, 4),
                "threshold": TRANSPOSE_MAX,
                "transpose_flops": transpose,
                "hardware_flops": hw,
            },
        )
    ]


def _spill_reload_high(p: _Profile) -> list[Finding]:
    reload, reads = p.metrics.get("spill_reload_bytes"), p.metrics.get("hbm_read_bytes")
    if reload is None or not reads:
        return []
    share = float(reload) / float(reads)
    if not share > SPILL_RELOAD_MAX:
        return []
    moved = float(reads) + float(p.metrics.get("hbm_write_bytes") or 0.0)
    dma_s = p.metrics.get("dma_active_time_s")
    base_us = float(dma_s) * 1e6 if dma_s is not None else p.t_us
    us = base_us * float(reload) / moved  # DMA time moving spill reloads, at the average rate
    return [
        _finding(
            "neuron_spill_reload_high",
            f"{p.name}: SBUF spill reloads are {share:.1%} of HBM reads (> 25%): check the data dependencies that force "
            "intermediates to spill and reload",
            us,
            p.t_us,
            {
                "profile": p.name,
                "spill_reload_share": round(share, 4),
                "threshold": SPILL_RELOAD_MAX,
                "spill_reload_bytes": reload,
                "hbm_read_bytes": reads,
                "dma_active_time_s": dma_s,
            },
        )
    ]


def findings_for_profiles(profiles: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """:func:`explorer_findings` per device profile, one finding per rule (and engine):
    ``us_at_stake`` summed over the profiles it fired on, the message and evidence of the worst."""
    merged: dict[tuple[str, Any], list[Finding]] = {}
    for p in profiles:
        for f in explorer_findings(p):
            merged.setdefault((f.rule, f.evidence.get("engine")), []).append(f)
    total_us = sum(float(p.get("total_time_s") or 0.0) for p in profiles) * 1e6
    out = []
    for group in merged.values():
        worst = max(group, key=lambda f: f.us_at_stake)
        us = sum(f.us_at_stake for f in group)
        evidence = dict(worst.evidence)
        if len(group) > 1:
            evidence["profiles"] = [f.evidence.get("profile") for f in sorted(group, key=lambda f: -f.us_at_stake)][:MAX_PROFILES]
        out.append(Finding(worst.rule, worst.message, us, evidence, _severity(us, total_us)))
    out.sort(key=lambda f: -f.us_at_stake)
    return out
