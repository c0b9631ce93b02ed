"""Find, pair and check the raw files the Neuron runtime writes during a profile.

Two documented layouts (neuron-facts.md):

session mode (native PyTorch)::

    <instance>_pid_<pid>/<timestamp>/neff_<hash>_vnc_<v>.neff      one per compiled executable
                                    profile_nc_<n>_session_<s>.ntff  one per NeuronCore and session
                                    trace.json ntrace.pb trace_info.pb cpu_util.pb host_mem.pb

model mode (one NTFF per NEFF, the pair shares a numeric id)::

    <instance>_pid_<pid>/neff_<id>.neff  +  <id>_instid_<i>_vnc_<v>.ntff

Each NEFF becomes one :class:`ArtifactGroup`; problems users hit are spelled out.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ArtifactGroup", "NeuronArtifacts", "find_artifacts"]

_SESSION_NEFF = re.compile(r"^neff_(?P<id>[0-9A-Za-z]+)_vnc_(?P<vnc>\d+)\.neff$")
_SESSION_NTFF = re.compile(r"^profile_nc_(?P<nc>\d+)_session_(?P<session>\d+)\.ntff$")
_MODEL_NEFF = re.compile(r"^neff_(?P<id>[0-9A-Za-z]+)\.neff$")
_MODEL_NTFF = re.compile(r"^(?P<id>[0-9A-Za-z]+)_instid_(?P<inst>\d+)_vnc_(?P<vnc>\d+)\.ntff$")
_OTHER_RAW = {"trace.json", "ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb"}
OVERSIZED_NTFF_BYTES = 2 * 1024**3  # Neuron Explorer needs > 30 min past this; > 5 GB can fail


@dataclass
class ArtifactGroup:
    """One NEFF and the NTFF(s) that profile it (``neuronscope artifacts --json`` prints these)."""

    id: str
    layout: str  #: "model" | "session"
    neff: str | None
    ntff: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["neff_bytes"] = _size(self.neff)
        out["ntff_bytes"] = [_size(n) for n in self.ntff]
        return out


def _size(path: str | None) -> int | None:
    try:
        return Path(path).stat().st_size if path else None
    except OSError:
        return None


@dataclass
class NeuronArtifacts:
    """Everything found under one directory."""

    root: Path
    groups: list[ArtifactGroup] = field(default_factory=list)
    other_files: list[str] = field(default_factory=list)
    session_dirs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  #: problems not tied to one NEFF

    @property
    def neff_files(self) -> list[str]:
        return [g.neff for g in self.groups if g.neff]

    @property
    def ntff_files(self) -> list[str]:
        return sorted({n for g in self.groups for n in g.ntff})

    def all_problems(self) -> list[str]:
        seen: dict[str, None] = dict.fromkeys(self.problems)
        for g in self.groups:
            for p in g.problems:
                seen.setdefault(f"{Path(g.neff).name if g.neff else g.id}: {p}", None)
        return list(seen)

    def explorer_commands(self) -> list[str]:
        """The exact Neuron Explorer command lines that open these files."""
        cmds = [f"neuron-explorer view -d {shlex.quote(d)}" for d in self.session_dirs]
        for g in self.groups:
            if g.layout == "model" and g.neff and g.ntff:
                cmds.append(f"neuron-explorer view -n {shlex.quote(g.neff)} -s {shlex.quote(g.ntff[0])}")
        return cmds

    def to_manifest(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "artifacts": [g.to_dict() for g in self.groups],
            "neff_files": self.neff_files,
            "ntff_files": self.ntff_files,
            "other_files": self.other_files,
            "session_dirs": self.session_dirs,
            "problems": self.all_problems(),
            "explorer_commands": self.explorer_commands(),
            "explorer_command": (self.explorer_commands() or [None])[0],
        }


def find_artifacts(root: str | Path, *, device_mode: bool = True) -> NeuronArtifacts:
    """Scan ``root`` recursively for Neuron raw files in either layout and pair them."""
    root = Path(root)
    found = NeuronArtifacts(root=root)
    if not root.is_dir():
        if device_mode:
            found.problems.append(f"no NEFF/NTFF files were written: {root} was never created by the Neuron runtime")
        return found
    by_dir: dict[Path, list[Path]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            by_dir.setdefault(p.parent, []).append(p)
    for directory, files in by_dir.items():
        names = {f.name: f for f in files}
        session_neffs = {n: m for n in names if (m := _SESSION_NEFF.match(n))}
        session_ntffs = {n: m for n in names if (m := _SESSION_NTFF.match(n))}
        model_neffs = {n: m for n in names if (m := _MODEL_NEFF.match(n)) and n not in session_neffs}
        model_ntffs = {n: m for n in names if (m := _MODEL_NTFF.match(n))}
        found.other_files += [str(names[n]) for n in sorted(names) if n in _OTHER_RAW or n.startswith("neuron_framework_trace")]
        if session_neffs or session_ntffs:
            found.session_dirs.append(str(directory))
            ntffs = [str(names[n]) for n in sorted(session_ntffs)]
            ntff_problems = [_ntff_problem(names[n]) for n in sorted(session_ntffs)]
            shared = [p for p in ntff_problems if p]
            if session_neffs and not session_ntffs and device_mode:
                shared.append("no NTFF in this session directory: device capture missing (was ProfileMode.DEVICE on?)")
            if session_ntffs and not session_neffs:
                found.problems.append(f"{directory}: NTFFs without any NEFF: cannot be processed")
            for n, m in sorted(session_neffs.items()):
                found.groups.append(
                    ArtifactGroup(id=m["id"], layout="session", neff=str(names[n]), ntff=ntffs, problems=list(shared))
                )
        if model_neffs or model_ntffs:
            ntff_by_id: dict[str, list[Path]] = {}
            for n, m in model_ntffs.items():
                ntff_by_id.setdefault(m["id"], []).append(names[n])
            for n, m in sorted(model_neffs.items()):
                pid = m["id"]
                ntffs = sorted(ntff_by_id.pop(pid, []))
                problems = [p for p in (_ntff_problem(f) for f in ntffs) if p]
                if not ntffs and device_mode:
                    problems.append(f"no NTFF with id {pid}: this NEFF was not captured (did it run inside the profile?)")
                found.groups.append(
                    ArtifactGroup(id=pid, layout="model", neff=str(names[n]), ntff=[str(f) for f in ntffs], problems=problems)
                )
            for pid, ntffs in sorted(ntff_by_id.items()):
                found.groups.append(
                    ArtifactGroup(
                        id=pid,
                        layout="model",
                        neff=None,
                        ntff=[str(f) for f in sorted(ntffs)],
                        problems=[
                            f"NTFF id {pid} matches no NEFF: NEFF and NTFF come from different compilations "
                            "and will fail to process"
                        ],
                    )
                )
        dropped = names.get("emulator_info.json") or names.get("dropped_events.json")
        if dropped is not None:
            found.problems.extend(_dropped_events_problem(dropped))
    if device_mode and not found.groups:
        found.problems.append(
            "no NEFF/NTFF files were written: device capture is missing (warm up first; ProfileMode.DEVICE on; "
            "torch.neuron.synchronize() before the profile ends)"
        )
    return found


def _ntff_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size == 0:
        m = _SESSION_NTFF.match(path.name) or _MODEL_NTFF.match(path.name)
        core = m.groupdict().get("nc") or m.groupdict().get("vnc") if m else "?"
        return f"{path.name} is empty: NeuronCore {core} was initialised but never ran (normal)"
    if size > OVERSIZED_NTFF_BYTES:
        return (
            f"{path.name} is {size / 1024**3:.1f} GB: Neuron Explorer takes > 30 min past 2 GB and can fail past 5 GB; "
            "profile fewer steps or set capture_enabled_for_nc"
        )
    return None


def _dropped_events_problem(info_file: Path) -> list[str]:
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError):
        return []
    dropped = info.get("events_dropped") or info.get("dropped_events") or 0
    if not dropped:
        return []
    limit = info.get("max_events_per_nc", "the limit")
    return [
        f"{dropped} device events dropped: max_events_per_nc ({limit}) was reached; raise it with "
        "NeuronOptions(max_events_per_nc=...)"
    ]
