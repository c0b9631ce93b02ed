"""``neuronscope artifacts DIR``: the raw Neuron files in a directory, paired and checked."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._group import Failure, cli


@cli.command("artifacts")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {id, layout, neff, ntff, problems}.")
def artifacts(directory: Path, as_json: bool) -> None:
    """List the NEFF/NTFF files under DIRECTORY (a run directory or a Neuron output dir).

    Both layouts are recognised: session mode (<instance>_pid_<pid>/<timestamp>/neff_<hash>_vnc_<v>.neff
    + profile_nc_<n>_session_<s>.ntff) and model mode (neff_<id>.neff + <id>_instid_<i>_vnc_<v>.ntff).

    \b
    JSON (one object per NEFF, plus NTFFs whose NEFF is missing):
      id        the numeric id shared by a NEFF and its NTFF
      layout    "model" | "session"
      neff      path of the .neff (null when missing)
      ntff      list of .ntff paths
      problems  list of strings: unpaired files, mismatched ids, empty NTFFs (an idle core: normal),
                dropped events, missing device capture, files over 2 GB
    """
    from ..capture.devices.neuron_artifacts import find_artifacts

    if not directory.is_dir():
        raise Failure(f"{directory}: not a directory; give a run directory or the Neuron profile output dir")
    found = find_artifacts(directory)
    if as_json:
        click.echo(json.dumps([g.to_dict() | {"problems": g.problems} for g in found.groups], indent=1))
        return
    if not found.groups:
        click.echo(f"no NEFF/NTFF files under {directory}")
    for g in found.groups:
        click.echo(f"{g.layout:<8} {g.id:<20} {g.neff or '(no NEFF)'}")
        for n in g.ntff:
            click.echo(f"{'':<29} {n}")
        for p in g.problems:
            click.echo(f"{'':<29} ! {p}")
    for p in found.problems:
        click.echo(f"! {p}")
    for cmd in found.explorer_commands():
        click.echo(f"open in Neuron Explorer: {cmd}")
