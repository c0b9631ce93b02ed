"""Find, pair and check the raw files the Neuron runtime writes during a profile.

Two documented layouts (aws-neuron-sdk tools/neuron-explorer/how-to-profile-workload.rst,
"Expected output" and the ``neuron-explorer inspect`` example):

session mode (native PyTorch)::

    <profile root>/<instance>_pid_<pid>/<timestamp>/neff_<hash>_vnc_<v>.neff      one per compiled executable
                                                   profile_nc_<n>_session_<s>.ntff  one per NeuronCore and session
                                                   trace.json ntrace.pb trace_info.pb cpu_util.pb host_mem.pb

model mode (one NTFF per NEFF, the pair shares a numeric id)::

    <profile root>/<instance>_pid_<pid>/neff_<id>.neff  +  <id>_instid_<i>_vnc_<v>.ntff

Each NEFF becomes one :class:`ArtifactGroup`. What is wrong is a *problem* (a run warning);
what is expected but worth knowing is a *note* (troubleshooting.rst: an idle core's empty
NTFF, a model-mode NEFF that did not run in the window).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ArtifactGroup", "DroppedEvents", "NeuronArtifacts", "find_artifacts", "parse_dropped_events"]

_SESSION_NEFF = re.compile(r"^neff_(?P<id>[0-9A-Za-z]+)_vnc_(?P<vnc>\d+)\.neff$")
_SESSION_NTFF = re.compile(r"^profile_nc_(?P<nc>\d+)_session_(?P<session>\d+)\.ntff$")
_MODEL_NEFF = re.compile(r"^neff_(?P<id>[0-9A-Za-z]+)\.neff$")
_MODEL_NTFF = re.compile(r"^(?P<id>[0-9A-Za-z]+)_instid_(?P<inst>\d+)_vnc_(?P<vnc>\d+)\.ntff$")
_INSTANCE_DIR = re.compile(r"^.+_pid_\d+$")  # <instance-id>_pid_<pid>, one per process (rank)
_SYSTEM_FILES = {"ntrace.pb", "trace_info.pb"}  # what Explorer's directory ingestion needs
_OTHER_RAW = _SYSTEM_FILES | {"trace.json", "cpu_util.pb", "host_mem.pb"}
OVERSIZED_NTFF_BYTES = 2 * 1024**3  # Neuron Explorer needs > 30 min past this; > 5 GB can fail
#: what to do when no NEFF is next to the NTFFs (how-to-profile-workload.rst,
#: "Ensuring NEFFs are in your output directory"; troubleshooting.rst "No .neff files in output")
NEFF_FIX = (
    "the NEFFs are in the compiler cache: set NeuronOptions(neff_cache_dir=...) or TORCH_NEURONX_NEFF_CACHE_DIR "
    "before the process compiles, or copy them from /tmp/neff_cache/ into this directory"
)

# Printed while a system profile is processed (get-started.rst, troubleshooting row 6):
#   WARN[0000] Warning: 1001 trace events were dropped during capture (stored 530560 out of 531561 total events). ...
_DROPPED = re.compile(
    r"Warning:\s*(?P<dropped>\d[\d,]*)\s+trace events were dropped"
    r"(?:\s+during capture\s*\(stored\s+(?P<stored>\d[\d,]*)\s+out of\s+(?P<total>\d[\d,]*)\s+total events\))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class DroppedEvents:
    """The ``Warning: N trace events were dropped`` message, parsed."""

    dropped: int
    stored: int | None = None
    total: int | None = None
    line: str = ""

    def problem(self, fix: str | None = None) -> str:
        kept = f" (stored {self.stored:,} of {self.total:,})" if self.stored is not None and self.total is not None else ""
        fix = fix or (
            "raise NeuronOptions(max_events_per_nc=...) (runtime default 1,000,000), capture fewer cores "
            "with capture_enabled_for_nc, or profile a shorter region"
        )
        return f"{self.dropped:,} trace events were dropped during capture{kept}: the per-NeuronCore trace buffer was full; {fix}"

    def to_dict(self) -> dict[str, Any]:
        return {"dropped": self.dropped, "stored": self.stored, "total": self.total, "line": self.line[:300]}


def parse_dropped_events(text: str) -> DroppedEvents | None:
    """The largest drop reported in ``text`` (console output of the runtime or Neuron Explorer)."""
    best: DroppedEvents | None = None
    for m in _DROPPED.finditer(text):
        dropped, stored, total = (int(m[g].replace(",", "")) if m[g] else None for g in ("dropped", "stored", "total"))
        found = DroppedEvents(dropped or 0, stored, total, _line_at(text, m.start()))
        if best is None or found.dropped > best.dropped:
            best = found
    return best


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end >= 0 else len(text)].strip()


@dataclass
class ArtifactGroup:
    """One NEFF and the NTFF(s) that profile it (``neuronscope artifacts --json`` prints these)."""

    id: str
    layout: str  #: "model" | "session"
    neff: str | None
    ntff: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  #: expected, but worth knowing

    @property
    def viewable_ntff(self) -> str | None:
        """The first non-empty NTFF: what ``neuron-explorer view -n NEFF -s NTFF`` can open (an
        idle core's empty NTFF makes it fail), or None."""
        return next((n for n in self.ntff if (_size(n) or 0) > 0), None)

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


def _q(path: str | Path) -> str:
    return shlex.quote(str(path))


@dataclass
class NeuronArtifacts:
    """Everything found under one directory."""

    root: Path
    groups: list[ArtifactGroup] = field(default_factory=list)
    other_files: list[str] = field(default_factory=list)
    session_dirs: list[str] = field(default_factory=list)
    instance_dirs: list[str] = field(default_factory=list)  #: the <instance>_pid_<pid> folders
    problems: list[str] = field(default_factory=list)  #: problems not tied to one NEFF
    notes: list[str] = field(default_factory=list)  #: notes not tied to one NEFF
    display_name: str | None = None  #: the Explorer profile name suggested by the commands
    explorer_out: Path | None = None  #: where the suggested Explorer exports go

    @property
    def neff_files(self) -> list[str]:
        return [g.neff for g in self.groups if g.neff]

    @property
    def ntff_files(self) -> list[str]:
        return sorted({n for g in self.groups for n in g.ntff})

    @property
    def profile_root(self) -> Path:
        """The directory to give ``neuron-explorer view -d``: the one holding the
        ``<instance-id>_pid_<pid>`` folders (every documented example passes that root)."""
        parents = {Path(d).parent for d in self.instance_dirs}
        return parents.pop() if len(parents) == 1 else self.root

    @property
    def has_system_profile(self) -> bool:
        """Whether Explorer's directory ingestion can read it (needs ``ntrace.pb`` + ``trace_info.pb``)."""
        names = {Path(f).name for f in self.other_files}
        return _SYSTEM_FILES <= names

    def all_problems(self) -> list[str]:
        return self._merged(self.problems, "problems")

    def all_notes(self) -> list[str]:
        return self._merged(self.notes, "notes")

    def _merged(self, own: list[str], attr: str) -> list[str]:
        seen: dict[str, None] = dict.fromkeys(own)
        for g in self.groups:
            for p in getattr(g, attr):
                seen.setdefault(f"{Path(g.neff).name if g.neff else g.id}: {p}", None)
        return list(seen)

    def explorer_commands(self) -> list[str]:
        """The exact Neuron Explorer command lines for these files (get-started.rst, Steps 4-5).

        First the one that opens the whole profile root in the UI, then the CLI upload
        (``--ingest-only --display-name``), the JSON and Perfetto exports, and the
        per-pair device view for model-mode NEFF/NTFF pairs.
        """
        if not self.groups and not self.other_files:
            return []
        root = _q(self.profile_root)
        out = self.explorer_out if self.explorer_out is not None else self.profile_root.parent / "explorer"
        cmds = [f"neuron-explorer view -d {root}"]
        cmds.append(
            f"neuron-explorer view -d {root} --ingest-only --display-name {_q(self.display_name or self.profile_root.parent.name)}"
        )
        cmds.append(f"neuron-explorer view -d {root} --output-format summary-json --output-file {_q(out / 'summary.json')}")
        cmds.append(f"neuron-explorer view -d {root} --output-format json --output-file {_q(out / 'system_profile.json')}")
        cmds.append(f"neuron-explorer view -d {root} --output-format perfetto --output-file {_q(out / 'system_profile.pftrace')}")
        pairs = [
            f"neuron-explorer view -n {_q(g.neff)} -s {_q(ntff)}"
            for g in self.groups
            if g.layout == "model" and g.neff and (ntff := g.viewable_ntff)
        ]
        if not self.has_system_profile and pairs:
            # device-only capture: a directory upload fails ("No metadata found for system
            # profile" without trace_info.pb / ntrace.pb); the NEFF/NTFF pair view works
            return pairs + cmds
        return cmds + pairs

    def to_manifest(self) -> dict[str, Any]:
        cmds = self.explorer_commands()
        return {
            "root": str(self.root),
            "profile_root": str(self.profile_root),
            "artifacts": [g.to_dict() for g in self.groups],
            "neff_files": self.neff_files,
            "ntff_files": self.ntff_files,
            "other_files": self.other_files,
            "session_dirs": self.session_dirs,
            "problems": self.all_problems(),
            "notes": self.all_notes(),
            "explorer_commands": cmds,
            "explorer_command": cmds[0] if cmds else None,
        }


def find_artifacts(
    root: str | Path,
    *,
    device_mode: bool = True,
    display_name: str | None = None,
    explorer_out: str | Path | None = None,
) -> NeuronArtifacts:
    """Scan ``root`` recursively for Neuron raw files in either layout, pair and check them.

    ``display_name`` / ``explorer_out`` only shape the suggested Explorer commands (the
    profile name for ``--display-name``, the folder for ``--output-file`` exports).
    """
    root = Path(root)
    found = NeuronArtifacts(
        root=root, display_name=display_name, explorer_out=Path(explorer_out) if explorer_out is not None else None
    )
    if not root.is_dir():
        if device_mode:
            found.problems.append(f"no NEFF/NTFF files were written: {root} was never created by the Neuron runtime")
        return found
    by_dir: dict[Path, list[Path]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            by_dir.setdefault(p.parent, []).append(p)
        elif p.is_dir() and _INSTANCE_DIR.match(p.name):
            found.instance_dirs.append(str(p))
    session_ntffs_all: list[Path] = []
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
            session_ntffs_all += [names[n] for n in sorted(session_ntffs)]
            shared = [p for p in (_oversized(names[n]) for n in sorted(session_ntffs)) if p]
            if session_neffs and not session_ntffs and device_mode:
                shared.append("no NTFF in this session directory: device capture missing (was ProfileMode.DEVICE on?)")
            if session_ntffs and not session_neffs:
                found.problems.append(f"{directory}: NTFFs without any NEFF, Neuron Explorer cannot process them: {NEFF_FIX}")
            for n, m in sorted(session_neffs.items()):
                found.groups.append(
                    ArtifactGroup(id=m["id"], layout="session", neff=str(names[n]), ntff=ntffs, problems=list(shared))
                )
            if session_ntffs and not session_neffs:
                found.groups.append(
                    ArtifactGroup(id=directory.name, layout="session", neff=None, ntff=ntffs, problems=list(shared))
                )
        if model_neffs or model_ntffs:
            _pair_model(found, names, model_neffs, model_ntffs, device_mode)
    _check_empty_ntffs(found, session_ntffs_all, [Path(n) for g in found.groups if g.layout == "model" for n in g.ntff])
    if device_mode and not found.groups:
        only_pb = bool(found.other_files) and not any(f.endswith(".ntff") for f in found.other_files)
        found.problems.append(
            "no NEFF/NTFF files were written"
            + (
                ': only system-profile (.pb) files, device profiling was off (keep "device" in NeuronOptions.modes)'
                if only_pb
                else ": device capture is missing (warm up first; ProfileMode.DEVICE on; "
                "torch.neuron.synchronize() before the profile ends)"
            )
        )
    return found


def _pair_model(
    found: NeuronArtifacts, names: dict[str, Path], model_neffs: dict[str, Any], model_ntffs: dict[str, Any], device_mode: bool
) -> None:
    ntff_by_id: dict[str, list[Path]] = {}
    for n, m in model_ntffs.items():
        ntff_by_id.setdefault(m["id"], []).append(names[n])
    for n, m in sorted(model_neffs.items()):
        pid = m["id"]
        ntffs = sorted(ntff_by_id.pop(pid, []))
        group = ArtifactGroup(id=pid, layout="model", neff=str(names[n]), ntff=[str(f) for f in ntffs])
        group.problems += [p for p in (_oversized(f) for f in ntffs) if p]
        if not ntffs and device_mode:
            # troubleshooting.rst "Unequal number of NEFF and NTFF files": expected in model mode.
            group.notes.append(
                f"no NTFF with id {pid}: this NEFF did not run inside the profile (Explorer opens the matching pairs)"
            )
        found.groups.append(group)
    for pid, ntffs in sorted(ntff_by_id.items()):
        found.groups.append(
            ArtifactGroup(
                id=pid,
                layout="model",
                neff=None,
                ntff=[str(f) for f in sorted(ntffs)],
                problems=[
                    f"NTFF id {pid} matches no NEFF: the pair must share the numeric id; either the NEFF came from a "
                    f"different compilation (profile again after warm-up, in one process), or {NEFF_FIX}"
                ],
            )
        )


def _core_of(path: Path) -> str:
    m = _SESSION_NTFF.match(path.name) or _MODEL_NTFF.match(path.name)
    if not m:
        return "?"
    return m.groupdict().get("nc") or m.groupdict().get("vnc") or "?"


def _check_empty_ntffs(found: NeuronArtifacts, session: list[Path], model: list[Path]) -> None:
    """troubleshooting.rst ".ntff files appear empty": one per idle core is expected; all of them is not."""
    ntffs = session + model
    empty = [p for p in ntffs if _size(str(p)) == 0]
    if not empty:
        return
    if len(empty) == len(ntffs):
        found.problems.append(
            f"every NTFF is empty ({len(empty)} file{'s' if len(empty) > 1 else ''}): no device execution was captured; "
            'warm up 3+ iterations before profiling, keep "device" in NeuronOptions.modes, and make sure the model runs on '
            "the NeuronCores being captured (capture_enabled_for_nc / NEURON_RT_NUM_CORES)"
        )
        return
    cores = ", ".join(sorted({_core_of(p) for p in empty}, key=lambda c: (len(c), c)))
    found.notes.append(
        f"{len(empty)} empty NTFF{'s' if len(empty) > 1 else ''} ({', '.join(p.name for p in empty[:4])}"
        f"{', ...' if len(empty) > 4 else ''}): NeuronCore {cores} was initialised but never ran; capture only the cores "
        "you use with capture_enabled_for_nc or NEURON_RT_NUM_CORES"
    )


def _oversized(path: Path) -> str | None:
    size = _size(str(path)) or 0
    if size > OVERSIZED_NTFF_BYTES:
        return (
            f"{path.name} is {size / 1024**3:.1f} GB: Neuron Explorer takes > 30 min past 2 GB and can fail past 5 GB; "
            "profile fewer steps or set capture_enabled_for_nc"
        )
    return None
