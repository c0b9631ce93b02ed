"""``neuronscope run --neuron-inspect``: the Neuron runtime records the whole child process.

No torch.profiler: the script runs in a child process with NEURON_RT_INSPECT_* set, its stderr
passed through and scanned; the raw files it leaves are found, checked and listed in the run's
manifest (with Neuron Explorer's summary when it is installed).
"""

from __future__ import annotations

import io
import os
import sys

import click

from ._group import Failure

__all__ = ["run_neuron_inspect", "run_teeing_stderr"]


def run_neuron_inspect(target: str, as_module: bool, args: list[str], name: str, output_dir: str | None) -> int:
    """Environment-variable capture: the Neuron runtime records the whole child process.

    No torch.profiler (the two must not be combined): the child gets NEURON_RT_INSPECT_*
    pointing into a fresh run directory (system profile with CPU and host-memory samples,
    session device profile; variables already set win). Its stderr is passed through as it
    comes and scanned for the runtime's "Warning: N trace events were dropped". Afterwards
    the raw files are found, paired and checked, Neuron Explorer summarises them when it is
    installed, and the manifest lists it all with the Explorer commands.
    """
    import time

    from .. import _config
    from ..capture.devices.neuron_artifacts import find_artifacts, parse_dropped_events
    from ..capture.devices.neuron_explorer import collect_explorer, explorer_notes
    from ..sinks.rundir import base_manifest, create_run_dir, files_of, write_json

    start_ns = time.time_ns()
    try:
        run_dir = create_run_dir(_config.current().resolved_output_dir(output_dir), name, start_ns, status="recording")
    except OSError as exc:
        raise Failure(f"--output-dir: cannot create a run directory ({exc.strerror or exc})") from exc
    raw = run_dir / "neuron"
    env = dict(os.environ)
    env.update(
        NEURON_RT_INSPECT_ENABLE="1",
        NEURON_RT_INSPECT_OUTPUT_DIR=str(raw),
        NEURON_RT_INSPECT_SYSTEM_PROFILE="1",
        NEURON_RT_INSPECT_DEVICE_PROFILE=env.get("NEURON_RT_INSPECT_DEVICE_PROFILE", "session"),
        # how-to-profile-workload.rst: these keep the system profile complete
        NEURON_RT_INSPECT_CPU_UTIL=env.get("NEURON_RT_INSPECT_CPU_UTIL", "1"),
        NEURON_RT_INSPECT_HOST_MEMORY=env.get("NEURON_RT_INSPECT_HOST_MEMORY", "1"),
    )
    cmd = [sys.executable, *(["-m", target] if as_module else [target]), *args]
    code, child_stderr = run_teeing_stderr(cmd, env)
    artifacts = find_artifacts(raw, display_name=name, explorer_out=run_dir / "explorer")
    explorer = collect_explorer(run_dir, artifacts)
    warnings = artifacts.all_problems() + explorer.errors
    neuron = artifacts.to_manifest() | {"explorer": explorer.to_manifest()}
    neuron["inspect_env"] = {k: v for k, v in env.items() if k.startswith("NEURON_RT_INSPECT_")}
    dropped = parse_dropped_events(child_stderr) or explorer.dropped
    if dropped is not None:
        neuron["dropped_events"] = dropped.to_dict()
        warnings.append(
            dropped.problem(
                "raise NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC (default 1,000,000), filter with "
                "NEURON_RT_INSPECT_EVENT_FILTER_NC / _TYPE, or profile a shorter run"
            )
        )
    manifest = base_manifest(
        name=name,
        device="neuron",
        status="complete",
        capture="neuron-inspect",
        start_ns=start_ns,
        end_ns=time.time_ns(),
        exit_code=code,
        neuron=neuron,
        warnings=warnings,
        files=files_of(run_dir),
    )
    write_json(run_dir / "manifest.json", manifest)
    click.echo(f"neuronscope: Neuron runtime capture in {run_dir}", err=True)
    for problem in warnings:
        click.echo(f"  warning: {problem}", err=True)
    for note in [*artifacts.all_notes(), *explorer_notes(explorer)]:
        click.echo(f"  {note}", err=True)
    for command in artifacts.explorer_commands():
        click.echo(f"  open in Neuron Explorer: {command}", err=True)
    return code


#: kept of the child's stderr for scanning: the lines that matter plus this much of the tail
_STDERR_TAIL = 64 * 1024


def run_teeing_stderr(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd``; its stderr goes to ours chunk by chunk as it arrives (nothing held back,
    order kept), and the text comes back for scanning: every line that mentions dropped
    trace events, plus the last ``_STDERR_TAIL`` bytes."""
    import subprocess
    import threading

    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    child_stderr = proc.stderr
    assert isinstance(child_stderr, io.BufferedReader)  # stderr=PIPE, buffered: read1 returns what has arrived
    kept: list[bytes] = []
    tail = bytearray()
    out = getattr(sys.stderr, "buffer", None)

    def pump() -> None:
        pending = b""
        while chunk := child_stderr.read1(65536):
            try:
                if out is not None:
                    out.write(chunk)
                    out.flush()
                else:
                    sys.stderr.write(chunk.decode(errors="replace"))
                    sys.stderr.flush()
            except (OSError, ValueError):  # our stderr is gone: keep draining the child's
                pass
            *lines, pending = (pending + chunk).split(b"\n")
            kept.extend(line for line in lines if b"trace events were dropped" in line)
            tail.extend(chunk)
            del tail[:-_STDERR_TAIL]
        kept.append(pending)

    reader = threading.Thread(target=pump, name="neuronscope-inspect-stderr", daemon=True)
    reader.start()
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # Ctrl-C reached the child too; wait for it to finish
            continue
    reader.join(10)
    return code, b"\n".join([*kept, bytes(tail)]).decode(errors="replace")
