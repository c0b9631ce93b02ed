"""``neuronscope arm PID``: profile the next calls of a running process, without a restart."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from ._group import Failure, cli

#: how long --wait allows, after the request's own timeout, for the runs to be written
WRITE_GRACE_S = 120.0
POLL_S = 0.2


@cli.command("arm")
@click.argument("pid", type=click.IntRange(min=1), required=False, metavar="[PID]")
@click.option("--calls", "-n", type=click.IntRange(1, 10_000), default=1, show_default=True, help="Calls to profile.")
@click.option("--name", default=None, metavar="NAME", help="Only calls of the profile with this name (default: any).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True, max=7 * 24 * 3600),
    default=600.0,
    show_default=True,
    metavar="S",
    help="Drop the request if the calls have not happened within S seconds.",
)
@click.option("--wait", "wait", is_flag=True, help="Wait until the runs are written; print their run directories.")
@click.option("--list", "list_", is_flag=True, help="List this user's neuronscope processes on this host.")
@click.option("--json", "as_json", is_flag=True, help="With --list: print JSON.")
def arm(pid: int | None, calls: int, name: str | None, timeout_s: float, wait: bool, list_: bool, as_json: bool) -> int:
    """Profile the next calls of decorated functions in a running process.

    The process needs nothing but neuronscope's decorator: its first decorated call opens a
    local control channel (a Unix socket only this user and root can use; off with
    NEURONSCOPE_CONTROL=0). Sampling options are overridden for the armed calls.

    \b
    Examples:
      neuronscope arm --list                     this user's neuronscope processes
      neuronscope arm 4242                       profile the next call of pid 4242
      neuronscope arm 4242 -n 3 --name infer --wait
                                                 3 calls of "infer"; print their run directories
      kubectl exec POD -- neuronscope arm 1 --wait
                                                 the service in a container (pid 1)

    Exit status: 0 when armed (with --wait: when every run is written), 1 when the process
    cannot be reached or the request expired first.
    """
    from ..capture import control

    if not control.supported():
        raise Failure("the control channel needs Linux (Unix sockets with SO_PEERCRED); use ns.arm() in the process instead")
    if list_:
        if pid is not None:
            raise click.UsageError("--list takes no PID", ctx=click.get_current_context())
        return _list(as_json)
    if pid is None:
        raise click.UsageError("give the PID of the process to arm (or --list)", ctx=click.get_current_context())
    try:
        reply = control.request(pid, {"op": "arm", "calls": calls, "name": name, "timeout_s": timeout_s})
    except control.ControlError as exc:
        raise Failure(str(exc)) from None
    what = f" of {name!r}" if name else ""
    _err(f"armed pid {pid}: the next {calls} call(s){what} will be profiled (request {reply['id']}, timeout {timeout_s:g} s)")
    if not wait:
        return 0
    return _wait(control, pid, int(reply["id"]), calls, timeout_s)


def _wait(control: Any, pid: int, rid: int, calls: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s + WRITE_GRACE_S
    printed: set[str] = set()
    reply: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            reply = control.request(pid, {"op": "poll", "id": rid})
        except control.ControlError as exc:
            if "rate limited" in str(exc):
                time.sleep(1.0)
                continue
            raise Failure(f"{exc} (while waiting: {len(printed)} of {calls} run(s) written)") from None
        for path in reply.get("runs", []):
            if path not in printed:
                printed.add(path)
                click.echo(path)
        if reply.get("done"):
            break
        time.sleep(POLL_S)
    else:
        raise Failure(f"gave up waiting: {len(printed)} of {calls} run(s) written")
    state = reply.get("state")
    if state == "filled" and len(printed) == calls:
        return 0
    if state == "expired":
        raise Failure(
            f"the request expired after {timeout_s:g} s with {reply.get('profiled', 0)} of {calls} call(s) profiled "
            "(is the function being called? does --name match one of `neuronscope arm --list`'s profiles?)"
        )
    if state == "cancelled":
        raise Failure(f"the request was cancelled in the process (ns.disarm()) with {len(printed)} of {calls} run(s) written")
    raise Failure(f"{len(printed)} of {calls} run(s) written; the others could not be (see the process's log)")


def _list(as_json: bool) -> int:
    from ..capture import control

    procs = control.list_processes()
    if as_json:
        sys.stdout.write(json.dumps({"schema_version": 1, "processes": procs}, indent=2) + "\n")
        return 0
    if not procs:
        _err(f"no neuronscope processes of this user (control sockets in {control.control_dir()})")
        return 0
    rows = [("PID", "SERVICE", "CALLS", "ARMED", "PROFILES")]
    for p in procs:
        if "error" in p:
            rows.append((str(p["pid"]), "?", "?", "?", p["error"]))
            continue
        profiles = p.get("profiles") or {}
        armed = p.get("armed") or []
        left = sum(max(a.get("calls", 0) - a.get("profiled", 0), 0) for a in armed)
        rows.append(
            (
                str(p["pid"]),
                str(p.get("service", "")),
                str(sum(profiles.values())),
                f"yes ({left} call(s))" if armed else "no",
                ", ".join(f"{n} ({c})" for n, c in sorted(profiles.items())) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def _err(line: str) -> None:
    click.echo(line, err=True)
