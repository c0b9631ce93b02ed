"""Neuron Explorer for a run: find it, run it, collect what it wrote.

After a Neuron profile neuronscope looks for Explorer output in the run directory
(``<run>/explorer/``, or ``Summary.parquet`` / ``summary*.json`` / ``system_profile.json`` a
user wrote into ``<run>/neuron/``). When there is none and ``neuron-explorer`` is on ``PATH``
(or in ``/opt/aws/neuron/bin``), it runs::

    neuron-explorer view -d <run>/neuron --output-format summary-json --output-file <run>/explorer/summary.json
    neuron-explorer view -d <run>/neuron --output-format json --ignore-device-profile \\
        --output-file <run>/explorer/system_profile.json

in a subprocess with a timeout, and never on NTFFs larger than
``NeuronOptions.explorer_max_ntff_bytes`` (Explorer takes > 30 min past 2 GB).

Reading Explorer's Summary and applying its insight rules: :mod:`.neuron_explorer_summary`.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...analysis.diagnosis.model import Finding
from .neuron_artifacts import DroppedEvents, NeuronArtifacts, parse_dropped_events
from .neuron_explorer_summary import MAX_PROFILES, aggregate, findings_for_profiles, json_in, read_summary_file

__all__ = ["ExplorerResult", "collect_explorer", "explorer_notes", "find_explorer"]

log = logging.getLogger("neuronscope")

_DEFAULT_DIR = "/opt/aws/neuron/bin"  # troubleshooting.rst: where aws-neuronx-tools installs it
_OUT_DIR = "explorer"


def find_explorer() -> str | None:
    """Path of ``neuron-explorer``: on PATH, else in /opt/aws/neuron/bin; None when absent."""
    return shutil.which("neuron-explorer") or shutil.which("neuron-explorer", path=_DEFAULT_DIR)


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
            out["profiles"] = self.profiles[:MAX_PROFILES]
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
            json_in(text)
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
