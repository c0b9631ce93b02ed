"""Neuron Explorer's device metrics for a run: find or produce its summary, read it, apply its rules.

After a Neuron profile neuronscope looks for Explorer output in the run directory
(``<run>/explorer/``, or ``Summary.parquet`` / ``summary*.json`` / ``system_profile.json`` a
user wrote into ``<run>/neuron/``). When there is none and ``neuron-explorer`` is on ``PATH``
(or in ``/opt/aws/neuron/bin``), it runs::

    neuron-explorer view -d <run>/neuron --output-format summary-json --output-file <run>/explorer/summary.json
    neuron-explorer view -d <run>/neuron --output-format json --ignore-device-profile \\
        --output-file <run>/explorer/system_profile.json

in a subprocess with a timeout, and never on NTFFs larger than
``NeuronOptions.explorer_max_ntff_bytes`` (Explorer takes > 30 min past 2 GB).

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

    >>> from neuronscope.capture.devices.neuron_explorer import explorer_findings, parse_summary
    >>> profiles = parse_summary({"profile_nc_0": {"total_time": 0.01, "mfu_estimated_percent": 10.0,
    ...                                            "tensor_engine_active_time_percent": 40.0}})
    >>> [f.rule for f in explorer_findings(profiles[0])]
    ['neuron_mfu_low']
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...analysis.diagnosis.model import Finding
from .neuron_artifacts import DroppedEvents, NeuronArtifacts, parse_dropped_events

__all__ = [
    "ENGINES",
    "ExplorerResult",
    "collect_explorer",
    "explorer_findings",
    "find_explorer",
    "findings_for_profiles",
    "metrics_of",
    "parse_summary",
    "read_summary_file",
]

log = logging.getLogger("neuronscope")

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
NKI_ENGINES = ("tensor", "vector", "scalar")  # the engines Explorer's NKI chart covers
#: Explorer's published thresholds (overview-summary-page.rst, "Example recommendations")
MODEL_TO_ACTIVE_MIN = 0.50
NKI_COVERAGE_MIN = 0.50
TRANSPOSE_MAX = 0.10
SPILL_RELOAD_MAX = 0.25
#: without ThrottleSummary's achievable utilisation: Trn2/Trn3 throttle to ~50 % (troubleshooting.rst)
_THROTTLED_UTIL = 0.5
_DEFAULT_DIR = "/opt/aws/neuron/bin"  # troubleshooting.rst: where aws-neuronx-tools installs it
_OUT_DIR = "explorer"
_MAX_PROFILES = 32


def find_explorer() -> str | None:
    """Path of ``neuron-explorer``: on PATH, else in /opt/aws/neuron/bin; None when absent."""
    return shutil.which("neuron-explorer") or shutil.which("neuron-explorer", path=_DEFAULT_DIR)


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


def _json_in(text: str) -> Any:
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
    return parse_summary(_json_in(p.read_text(encoding="utf-8", errors="replace")))


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
    name = str(metrics.get("name", "profile"))
    t_us = float(metrics.get("total_time_s") or 0.0) * 1e6
    engines = metrics.get("engine_active_percent") or {}
    tensor_active = engines.get("tensor")
    out: list[Finding] = []

    mfu = metrics.get("mfu_percent")
    if mfu is not None and tensor_active:
        # Model FLOPs / active FLOPs = MFU / tensor-engine active share: both over peak x total_time.
        ratio = float(mfu) / float(tensor_active)
        if ratio < MODEL_TO_ACTIVE_MIN:
            us = t_us * tensor_active / 100.0 * (1.0 - ratio)  # tensor-engine time not spent on model FLOPs
            out.append(
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
                        "total_time_s": metrics.get("total_time_s"),
                    },
                )
            )

    for engine, coverage in sorted((metrics.get("nki_coverage_percent") or {}).items()):
        if coverage / 100.0 < NKI_COVERAGE_MIN:
            active = float(engines.get(engine) or 0.0)
            us = t_us * active / 100.0 * (1.0 - coverage / 100.0)  # engine time in compiler-generated code
            out.append(
                _finding(
                    "neuron_nki_coverage_low",
                    f"{name}: only {coverage:.0f}% of the {engine} engine's instructions come from NKI (< 50%): write NKI "
                    "kernels for the operations that dominate it",
                    us,
                    t_us,
                    {
                        "profile": name,
                        "engine": engine,
                        "nki_coverage_percent": round(coverage, 3),
                        "threshold_percent": NKI_COVERAGE_MIN * 100,
                        "engine_active_percent": engines.get(engine),
                    },
                )
            )

    throttled = metrics.get("throttle_active_percent")
    if throttled is not None and throttled > 0:
        limit = metrics.get("throttle_max_util_percent")
        util = _THROTTLED_UTIL if limit is None else (limit / 100.0 if limit > 1.0 else float(limit))
        us = t_us * throttled / 100.0 * (1.0 - util)
        out.append(
            _finding(
                "neuron_throttling",
                f"{name}: the tensor engine was throttled {throttled:.1f}% of the time: keep it at or above 50% utilisation "
                "(pipeline instructions, overlap DMA with compute) so the current limiter does not re-engage",
                us,
                t_us,
                {
                    "profile": name,
                    "throttle_active_percent": throttled,
                    "threshold_percent": 0.0,
                    "achievable_utilisation": round(util, 4),
                    "assumed_utilisation": limit is None,
                },
            )
        )

    transpose, hw = metrics.get("transpose_flops"), metrics.get("hardware_flops")
    if transpose is not None and hw:
        share = float(transpose) / float(hw)
        if share > TRANSPOSE_MAX:
            us = t_us * float(tensor_active or 0.0) / 100.0 * share  # tensor-engine time spent transposing
            out.append(
                _finding(
                    "neuron_transpose_high",
                    f"{name}: transposes are {share:.1%} of the tensor engine's hardware FLOPs (> 10%): improve the memory "
                    "layout so fewer transposes are needed",
                    us,
                    t_us,
                    {
                        "profile": name,
                        "transpose_share": round(share, 4),
                        "threshold": TRANSPOSE_MAX,
                        "transpose_flops": transpose,
                        "hardware_flops": hw,
                    },
                )
            )

    reload, reads = metrics.get("spill_reload_bytes"), metrics.get("hbm_read_bytes")
    if reload is not None and reads:
        share = float(reload) / float(reads)
        if share > SPILL_RELOAD_MAX:
            moved = float(reads) + float(metrics.get("hbm_write_bytes") or 0.0)
            dma_s = metrics.get("dma_active_time_s")
            base_us = float(dma_s) * 1e6 if dma_s is not None else t_us
            us = base_us * float(reload) / moved  # DMA time moving spill reloads, at the average rate
            out.append(
                _finding(
                    "neuron_spill_reload_high",
                    f"{name}: SBUF spill reloads are {share:.1%} of HBM reads (> 25%): check the data dependencies that force "
                    "intermediates to spill and reload",
                    us,
                    t_us,
                    {
                        "profile": name,
                        "spill_reload_share": round(share, 4),
                        "threshold": SPILL_RELOAD_MAX,
                        "spill_reload_bytes": reload,
                        "hbm_read_bytes": reads,
                        "dma_active_time_s": dma_s,
                    },
                )
            )
    out.sort(key=lambda f: -f.us_at_stake)
    return out


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
            evidence["profiles"] = [f.evidence.get("profile") for f in sorted(group, key=lambda f: -f.us_at_stake)][
                :_MAX_PROFILES
            ]
        out.append(Finding(worst.rule, worst.message, us, evidence, _severity(us, total_us)))
    out.sort(key=lambda f: -f.us_at_stake)
    return out


# ---------------------------------------------------------------------------------- running


@dataclass
class ExplorerResult:
    """What :func:`collect_explorer` found or produced (``to_manifest`` is ``manifest["neuron"]["explorer"]``)."""

    status: str = "none"  #: ok | not_installed | skipped | failed | none
    executable: str | None = None
    sources: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    system_profile: str | None = None
    dropped: DroppedEvents | None = None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, Any] | None:
        return aggregate(self.profiles) if self.profiles else None

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.executable:
            out["executable"] = self.executable
        if self.commands:
            out["commands"] = self.commands
        if self.sources:
            out["sources"] = self.sources
        if self.profiles:
            out["metrics"] = self.metrics
            out["profiles"] = self.profiles[:_MAX_PROFILES]
            out["findings"] = [f.to_dict() for f in self.findings]
        if self.system_profile:
            out["system_profile"] = self.system_profile
        if self.dropped is not None:
            out["dropped_events"] = self.dropped.to_dict()
        if self.notes:
            out["notes"] = self.notes
        if self.errors:
            out["errors"] = self.errors
        return out

    def summary_line(self) -> str | None:
        """``Neuron Explorer: total 1.2 ms · MFU 12.0% · HFU 20.0% · MBU 5.0% · ...`` for the summary table."""
        m = self.metrics
        if not m:
            return None
        parts = []
        if m.get("total_time_s") is not None:
            parts.append(f"device time {m['total_time_s'] * 1e3:.3f} ms")
        for key, label in (
            ("mfu_percent", "MFU"),
            ("hfu_percent", "HFU"),
            ("mbu_percent", "MBU"),
            ("cc_active_percent", "CC active"),
        ):
            if m.get(key) is not None:
                parts.append(f"{label} {m[key]:.1f}%")
        engines = m.get("engine_active_percent") or {}
        if engines:
            parts.append("active " + " / ".join(f"{e} {v:.0f}%" for e, v in engines.items()))
        if m.get("dma_active_time_s") is not None:
            parts.append(f"DMA active {m['dma_active_time_s'] * 1e3:.3f} ms")
        reads = m.get("hbm_read_bytes")
        if m.get("spill_reload_bytes") is not None and reads:
            parts.append(f"spill reload {m['spill_reload_bytes'] / reads:.1%} of HBM reads")
        return "Neuron Explorer: " + " · ".join(parts)


def _discover(run_dir: Path, raw_dir: Path) -> tuple[list[Path], Path | None]:
    """Explorer output already in the run directory: (summary files, system_profile.json)."""
    out_dir = run_dir / _OUT_DIR
    summaries: list[Path] = []
    system: Path | None = None
    for base, recursive in ((out_dir, True), (raw_dir, True), (run_dir, False)):
        if not base.is_dir():
            continue
        files = sorted(base.rglob("*") if recursive else base.iterdir())
        for p in files:
            if not p.is_file():
                continue
            n = p.name.lower()
            if n == "system_profile.json":
                system = system or p
            elif (n.startswith("summary") and n.endswith(".parquet")) or (
                base != run_dir and n.endswith(".json") and "summary" in n
            ):
                summaries.append(p)
    return summaries, system


def _ntff_bytes(artifacts: NeuronArtifacts) -> int:
    total = 0
    for n in artifacts.ntff_files:
        try:
            total += Path(n).stat().st_size
        except OSError:
            pass
    return total


def _run(cmd: list[str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit status or None on timeout/failure to start, combined output tail)."""
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = "".join(x if isinstance(x, str) else x.decode(errors="replace") for x in (exc.stdout, exc.stderr) if x)
        return None, out + f"\n(timed out after {timeout_s:.0f} s)"
    except OSError as exc:
        return None, f"could not start: {exc}"
    return proc.returncode, (proc.stdout or "") + (proc.stderr or "")


def collect_explorer(
    run_dir: Path,
    artifacts: NeuronArtifacts,
    *,
    mode: str = "auto",
    timeout_s: float = 600.0,
    max_ntff_bytes: int = 1024**3,
) -> ExplorerResult:
    """Explorer's metrics for the run in ``run_dir`` (raw files in ``artifacts.root``).

    ``mode``: ``"auto"`` reads output already there, else runs ``neuron-explorer`` when it is
    installed and the NTFFs total at most ``max_ntff_bytes``; ``"on"`` runs it whatever the
    size; ``"off"`` only reads output already there. Never raises: what went wrong is in
    ``errors`` / ``notes``.
    """
    result = ExplorerResult()
    try:
        _collect(result, run_dir, artifacts, mode, timeout_s, max_ntff_bytes)
    except Exception as exc:  # noqa: BLE001 - metrics are extras; the run must survive
        log.debug("neuronscope: Neuron Explorer step failed", exc_info=True)
        result.status = "failed"
        result.errors.append(f"reading Neuron Explorer output failed: {exc!r}")
    return result


def _collect(
    result: ExplorerResult, run_dir: Path, artifacts: NeuronArtifacts, mode: str, timeout_s: float, max_bytes: int
) -> None:
    summaries, system = _discover(run_dir, artifacts.root)
    need_summary = not summaries and bool(artifacts.ntff_files)  # device metrics need NTFFs
    need_system = system is None and artifacts.has_system_profile  # lanes need ntrace.pb + trace_info.pb
    if mode != "off" and (need_summary or need_system):
        exe = find_explorer()
        size = _ntff_bytes(artifacts)
        if exe is None:
            result.status = "not_installed"
            result.notes.append(
                "device metrics (MFU, HFU, MBU, engine activity) and the system profile's runtime/hardware lanes need "
                "Neuron Explorer: install aws-neuronx-tools (neuron-explorer), or put its summary-json and "
                "system_profile.json output in <run>/explorer/"
            )
        else:
            result.executable = exe
            out_dir = run_dir / _OUT_DIR
            outputs: list[str] = []
            if need_summary and mode == "auto" and size > max_bytes:
                result.status = "skipped"
                result.notes.append(
                    f"Neuron Explorer's summary not made: the NTFFs total {size / 1024**2:,.0f} MiB (> "
                    f"{max_bytes / 1024**2:,.0f} MiB, NeuronOptions(explorer_max_ntff_bytes=...)); run the summary-json "
                    "command below by hand"
                )
            elif need_summary:
                out_dir.mkdir(exist_ok=True)
                summaries = _summaries(result, exe, out_dir, artifacts, timeout_s, outputs)
            if need_system:
                out_dir.mkdir(exist_ok=True)
                system = _system_json(result, exe, out_dir, artifacts, timeout_s, outputs)
            result.dropped = parse_dropped_events("\n".join(outputs))
    for path in summaries:
        try:
            profiles = read_summary_file(path)
        except (OSError, ValueError) as exc:
            result.errors.append(f"{path}: not a Neuron Explorer summary ({exc})")
            continue
        if profiles:
            result.profiles += profiles
            result.sources.append(str(path))
    if result.profiles:
        result.status = "ok"
        result.findings = findings_for_profiles(result.profiles)
    elif result.status == "none" and (summaries or result.errors):
        result.status = "failed"
    if system is not None:
        result.system_profile = str(system)


def _summaries(
    result: ExplorerResult, exe: str, out_dir: Path, artifacts: NeuronArtifacts, timeout_s: float, outputs: list[str]
) -> list[Path]:
    if artifacts.has_system_profile:
        target = out_dir / "summary.json"
        cmd = [exe, "view", "-d", str(artifacts.profile_root), "--output-format", "summary-json", "--output-file", str(target)]
        return _view(result, cmd, out_dir, timeout_s, target, outputs)
    # Device-only capture (no ntrace.pb/trace_info.pb): Explorer reads NEFF/NTFF pairs (-n/-s).
    found: list[Path] = []
    pairs = [(g.neff, ntff) for g in artifacts.groups if g.neff and (ntff := g.viewable_ntff)]
    for i, (neff, ntff) in enumerate(pairs[:8]):
        target = out_dir / f"summary_{i}.json"
        cmd = [exe, "view", "-n", neff, "-s", ntff, "--output-format", "summary-json", "--output-file", str(target)]
        found += _view(result, cmd, out_dir, timeout_s, target, outputs)
    if len(pairs) > 8:
        result.notes.append(f"Neuron Explorer summarised 8 of {len(pairs)} NEFF/NTFF pairs")
    return found


def _system_json(
    result: ExplorerResult, exe: str, out_dir: Path, artifacts: NeuronArtifacts, timeout_s: float, outputs: list[str]
) -> Path | None:
    target = out_dir / "system_profile.json"
    cmd = [
        exe,
        "view",
        "-d",
        str(artifacts.profile_root),
        "--output-format",
        "json",
        "--ignore-device-profile",
        "--output-file",
        str(target),
    ]
    rc, text = _run(cmd, out_dir, timeout_s)
    result.commands.append(" ".join(cmd))
    outputs.append(text)
    found = next((p for p in (target, *sorted(out_dir.rglob("system_profile.json"))) if p.is_file()), None)
    if rc != 0 or found is None:
        result.errors.append(f"neuron-explorer (system profile JSON) exited {rc}: {text.strip()[-400:]}")
    return found


def _view(
    result: ExplorerResult, cmd: list[str], out_dir: Path, timeout_s: float, target: Path, outputs: list[str]
) -> list[Path]:
    rc, text = _run(cmd, out_dir, timeout_s)
    result.commands.append(" ".join(cmd))
    outputs.append(text)
    if rc != 0:
        result.errors.append(f"neuron-explorer exited {rc}: {text.strip()[-400:]}")
        return []
    if not target.is_file() or target.stat().st_size == 0:
        # Some versions print summary-json on stdout instead of writing --output-file.
        try:
            _json_in(text)
            target.write_text(text, encoding="utf-8")
        except ValueError:
            result.errors.append(f"neuron-explorer wrote no summary ({' '.join(cmd[:3])} ...)")
            return []
    return [target]


def explorer_notes(result: ExplorerResult) -> Iterable[str]:
    """Lines for the end of the summary table."""
    line = result.summary_line()
    if line:
        yield line
    for f in result.findings:
        yield f"Neuron Explorer insight: {f.message}"
    yield from result.notes
