"""``neuronscope artifacts DIR``: the raw Neuron files in a directory, paired and checked."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from ._group import Failure, cli

log = logging.getLogger("neuronscope")

#: ``schema_version`` of ``artifacts --json`` (an object; a plain list of groups before)
ARTIFACTS_SCHEMA_VERSION = 1


def _run_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of the run directory DIR is (or holds the raw files of), else {}."""
    for d in (directory, directory.parent):
        manifest = d / "manifest.json"
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            log.debug("neuronscope artifacts: %s not readable", manifest, exc_info=True)
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def _run_neuron_info(directory: Path) -> dict[str, Any]:
    """``manifest["neuron"]``: what only the capture saw (dropped events, the capture modes)."""
    neuron = _run_manifest(directory).get("neuron")
    return neuron if isinstance(neuron, dict) else {}


def artifacts_report(directory: Path) -> dict[str, Any]:
    """Everything ``artifacts`` shows, as the ``--json`` object (see the command's help)."""
    from ..capture.devices.neuron_artifacts import DroppedEvents, find_artifacts

    device = _run_manifest(directory).get("device")
    info = _run_neuron_info(directory)
    modes = info.get("modes")
    found = find_artifacts(directory, device_mode="device" in modes if isinstance(modes, list) else True)
    problems = found.all_problems()
    notes = found.all_notes()
    if device not in (None, "neuron") and not found.groups:
        # a CPU or GPU run: no device capture was asked for, so none is missing
        problems = []
        notes = [
            f"a {device} run: NEFF/NTFF files exist only for runs on Neuron (Trainium/Inferentia); its trace is trace.json.gz"
        ]
    dropped = info.get("dropped_events")
    if isinstance(dropped, dict) and dropped.get("dropped"):
        try:
            problems.append(DroppedEvents(**dropped).problem())
        except TypeError:
            log.debug("neuronscope artifacts: unreadable dropped_events %r", dropped)
            dropped = None
    else:
        dropped = None
    return {
        "schema_version": ARTIFACTS_SCHEMA_VERSION,
        "directory": str(directory),
        "profile_root": str(found.profile_root),
        "groups": [g.to_dict() for g in found.groups],
        "problems": problems,
        "notes": notes,
        "dropped_events": dropped,
        "other_files": list(found.other_files),
        "explorer_commands": found.explorer_commands(),
    }


@cli.command("artifacts")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: groups, problems, notes, Explorer commands.")
def artifacts(directory: Path, as_json: bool) -> None:
    """List the NEFF/NTFF files under DIRECTORY (a run directory or a Neuron output dir).

    Both layouts are recognised: session mode (<instance>_pid_<pid>/<timestamp>/neff_<hash>_vnc_<v>.neff
    + profile_nc_<n>_session_<s>.ntff) and model mode (neff_<id>.neff + <id>_instid_<i>_vnc_<v>.ntff).

    \b
    JSON (--json), schema_version 1; everything the text shows:
      {
        "schema_version": 1,
        "directory": str, "profile_root": str,   # profile_root: what `view -d` opens
        "groups": [Group, ...],       # one per NEFF, plus NTFFs whose NEFF is missing
        "problems": [str, ...],       # every problem: the directory's, each group's (prefixed
                                      # with its NEFF's name), dropped events of a run directory
        "notes": [str, ...],          # expected but worth knowing: an idle core's empty NTFF,
                                      # a model-mode NEFF that did not run in the window
        "dropped_events": {"dropped": int, "stored": int|null, "total": int|null,
                           "line": str} | null,  # a run directory's, from its manifest
        "other_files": [str, ...],    # system-profile files (ntrace.pb, trace_info.pb, ...)
        "explorer_commands": [str, ...]  # the Neuron Explorer command lines, first = open all
      }
      Group = {"id": str, "layout": "model"|"session", "neff": str|null, "ntff": [str, ...],
               "neff_bytes": int|null, "ntff_bytes": [int|null, ...],
               "problems": [str, ...], "notes": [str, ...]}
    New keys may be added within a schema_version; existing ones keep their meaning.
    """
    if not directory.is_dir():
        raise Failure(f"{directory}: not a directory; give a run directory or the Neuron profile output dir")
    report = artifacts_report(directory)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    if not report["groups"]:
        click.echo(f"no NEFF/NTFF files under {directory}")
    own: set[str] = set()  # group lines already printed under their group
    for g in report["groups"]:
        click.echo(f"{g['layout']:<8} {g['id']:<20} {g['neff'] or '(no NEFF)'}")
        for n, size in zip(g["ntff"], g["ntff_bytes"]):
            click.echo(f"{'':<29} {n}" + ("  (empty)" if size == 0 else ""))
        for p in g["problems"]:
            click.echo(f"{'':<29} ! {p}")
        for note in g["notes"]:
            click.echo(f"{'':<29} note: {note}")
        prefix = f"{Path(g['neff']).name if g['neff'] else g['id']}: "
        own.update(prefix + line for line in (*g["problems"], *g["notes"]))
    for p in report["problems"]:
        if p not in own:
            click.echo(f"! {p}")
    for note in report["notes"]:
        if note not in own:
            click.echo(f"note: {note}")
    for cmd in report["explorer_commands"]:
        click.echo(f"open in Neuron Explorer: {cmd}")
