"""``neuronscope run [options] script.py [args...]``: run a script under a profile.

Like ``python -m cProfile script.py``: the script runs in this process as ``__main__`` with
``sys.argv = [script, *args]`` and its directory first on ``sys.path``, inside
``neuronscope.profile_neuron(name=<script stem>, all_threads=True)``. The summary is printed
on stdout after the script's own output (``-o FILE`` sends it to a file, ``--quiet``
prints none), like cProfile and pyinstrument; the exit status is the script's:
``sys.exit(n)`` exits n, an uncaught exception prints its traceback and exits 1 — after the
profile has been summarised.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import click

from ..sinks.rundir import set_program
from ._group import EXIT_FAILURE, Failure, cli

if TYPE_CHECKING:
    from rich.console import Console

    from ..capture.budget import Windows

_DEVICES = ("auto", "neuron", "cuda", "cpu")
#: a script that runs longer is profiled in windows of this many seconds, folded into one run
DEFAULT_WINDOW_SECONDS = 10.0


@dataclass(frozen=True)
class RunOptions:
    """Options of ``run`` that configure neuronscope beyond the profile itself."""

    op_spans: str | None = None
    otlp_endpoint: str | None = None
    neuron_inspect: bool = False


def _apply_run_options(opts: RunOptions) -> None:
    """Configure OpenTelemetry export for the script before it starts."""
    import neuronscope as ns

    changes: dict[str, Any] = {}
    if opts.op_spans is not None:
        changes["op_spans"] = opts.op_spans
    if opts.otlp_endpoint is not None:
        changes.update(exporter="otlp", otlp_endpoint=opts.otlp_endpoint)
    if changes:
        try:
            ns.configure(**changes)
        except ns.ConfigurationError as exc:
            raise click.UsageError(str(exc)) from exc


@cli.command(
    "run",
    context_settings={"allow_interspersed_args": False},  # everything after SCRIPT is the script's
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the run directory goes (default: $NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs).",
)
@click.option(
    "--output",
    "-o",
    "output_file",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    metavar="FILE",
    help="Write the summary to FILE instead of stdout.",
)
@click.option(
    "--device",
    "-d",
    type=click.Choice(_DEVICES),
    default="auto",
    show_default=True,
    help="Device to profile; auto prefers neuron, then cuda, then cpu.",
)
@click.option(
    "--module", "-m", "as_module", is_flag=True, help="SCRIPT is a module name to run like `python -m` (e.g. -m mypkg.train)."
)
@click.option(
    "--top",
    "-n",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    metavar="N",
    help="Ops in the summary printed at the end (0 = all).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print no summary at the end (the run directory is still written).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as JSON (the schema of `neuronscope show --json`) instead of tables: for programs.",
)
@click.option(
    "--op-spans",
    type=click.Choice(("summary", "events", "none")),
    default=None,
    help="OpenTelemetry span mode (default summary; see docs/opentelemetry.md).",
)
@click.option(
    "--otlp-endpoint",
    metavar="URL",
    default=None,
    help="Send spans and metrics to this OTLP endpoint (OTEL_EXPORTER_OTLP_PROTOCOL picks grpc or http/protobuf).",
)
@click.option(
    "--memory",
    "memory",
    flag_value="on",
    default=None,
    help="Also record memory: the peak, who holds it, growth per step (run.memory; see docs/memory.md). Profiles the main thread only: torch records no allocations when it follows every thread.",
)
@click.option(
    "--memory-history",
    "memory",
    flag_value="history",
    help="--memory, plus the CUDA allocator history as memory_snapshot.pickle (open it at pytorch.org/memory_viz).",
)
@click.option(
    "--neuron-inspect",
    is_flag=True,
    help="Whole-program capture by the Neuron runtime (NEURON_RT_INSPECT_*) in a child process, instead of torch.profiler.",
)
@click.option(
    "--max-events",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Event budget of each window (of the profile with --no-windows); past it recording pauses. "
    "Default: sized from the memory available, at most 250,000 per window; 0: no budget.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Stop recording after S seconds; the script runs on unprofiled.",
)
@click.option(
    "--steps",
    "max_steps",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Stop recording after N steps (ns.step() calls, else optimizer steps).",
)
@click.option(
    "--window-steps",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="End a window every N steps (ns.step() calls, else optimizer steps).",
)
@click.option(
    "--window-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="T",
    help="End a window every T seconds (at the next step when the script has steps). "
    f"Default: {DEFAULT_WINDOW_SECONDS:g} when --window-steps is not given.",
)
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    metavar="K",
    help="Raw traces kept besides the first window's: the K slowest windows'.",
)
@click.option(
    "--overhead",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SHARE",
    help="Bound what the windows add to the script's wall time (0.25: 25 %%): the next window waits until "
    "the run is within it. Default: no bound (each window starts once the last is analysed: ~half "
    "the steps at ~1.6x on a small training loop).",
)
@click.option(
    "--no-windows", is_flag=True, help="Profile the script as one window (up to the event budget) instead of folding windows."
)
@click.option(
    "--record-shapes",
    is_flag=True,
    help="Record input shapes: the work of each op (FLOPs, bytes) against the device's roofs (neuronscope show --roofline); 2-3 us more per op recorded.",
)
@click.option("--with-stack", is_flag=True, help="Record Python stacks: file:line for the gaps and findings of the diagnosis.")
@click.argument("script", metavar="SCRIPT")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARGS]...")
def run(
    output_dir: str | None,
    output_file: str | None,
    device: str,
    as_module: bool,
    top: int,
    quiet: bool,
    as_json: bool,
    op_spans: str | None,
    otlp_endpoint: str | None,
    neuron_inspect: bool,
    memory: str | None,
    max_events: int | None,
    duration: float | None,
    max_steps: int | None,
    window_steps: int | None,
    window_seconds: float | None,
    keep: int,
    overhead: float | None,
    no_windows: bool,
    record_shapes: bool,
    with_stack: bool,
    script: str,
    script_args: tuple[str, ...],
) -> int:
    """Run a Python script (or -m module) under a profile and print its summary.

    \b
    Examples:
      neuronscope run train.py --epochs 1
      neuronscope run --device cpu --output-dir runs/ examples/rmsnorm.py --steps 5
      neuronscope run -o summary.txt -m mypkg.serve --port 8000
      neuronscope run --memory train.py   # + the memory peak, who holds it, growth per step
      neuronscope run --window-steps 100 --keep 5 train.py   # a long job: windows of 100 steps
      neuronscope run --duration 60 serve.py                  # record the first minute only
      neuronscope run --record-shapes train.py  # then: neuronscope show RUN --roofline

    Options go before SCRIPT; everything after it is passed to the script. The script's
    output and exit status are preserved; the summary follows on stdout (or -o FILE).
    Profiles the script opens itself get their own runs and are regions of this one.

    A script that runs longer than one window (10 s by default) is profiled in windows folded
    into one run: memory stays bounded by one window whatever its length (docs/long-runs.md).
    """
    _apply_run_options(RunOptions(op_spans=op_spans, otlp_endpoint=otlp_endpoint, neuron_inspect=neuron_inspect))
    if output_file is not None and not quiet:
        _check_output_file(output_file)  # before the script runs: its exit code must stay its own
    import neuronscope as ns

    target, argv0, name = _resolve(script, as_module)
    set_program(script if as_module else name)  # the runs' "program" and the default service.name
    if not as_module and Path(target).is_file() and not _compiles(target):
        return EXIT_FAILURE  # nothing would run: no profile, no empty run directory
    if neuron_inspect:
        from ._neuron_inspect import run_neuron_inspect

        return run_neuron_inspect(target, as_module, list(script_args), name, output_dir)
    windows = _windows(no_windows, window_steps, window_seconds, keep, overhead)
    profile = _script_profile(
        name,
        output_dir,
        device,
        memory,
        windows,
        max_events=max_events,
        max_seconds=duration,
        max_steps=max_steps,
        record_shapes=record_shapes,
        with_stack=with_stack,
    )
    code, run_obj = _run_profiled(profile, target, argv0, as_module, list(script_args))
    if not quiet:
        _print_summary(run_obj, top, output_file, as_json=as_json)
    if run_obj is not None:
        run_obj.wait(120)  # the run directory is complete when `run` returns
    if otlp_endpoint is not None:
        ns.flush(30)
    return code


def _windows(
    no_windows: bool, window_steps: int | None, window_seconds: float | None, keep: int, overhead: float | None
) -> Windows | None:
    """The windows a long script is profiled in (None: --no-windows, one profile however long)."""
    import neuronscope as ns

    if no_windows and (window_steps or window_seconds or overhead):
        raise click.UsageError("--no-windows with --window-steps/--window-seconds/--overhead: choose one")
    windows = None
    if not no_windows:
        seconds = window_seconds if window_seconds is not None else (None if window_steps else DEFAULT_WINDOW_SECONDS)
        windows = ns.Windows(steps=window_steps, seconds=seconds, keep=keep, overhead=overhead)
    return windows


def _script_profile(
    name: str,
    output_dir: str | None,
    device: str,
    memory: str | None,
    windows: Windows | None,
    *,
    max_events: int | None,
    max_seconds: float | None,
    max_steps: int | None,
    record_shapes: bool,
    with_stack: bool,
) -> Any:
    """The profile the script runs under."""
    import neuronscope as ns

    try:
        # all_threads: the whole program, and profiles the script opens on any thread nest into it
        # torch records no allocator records when it profiles all threads (torch 2.x), so with
        # --memory the profile follows the script's main thread only
        return ns.profile_neuron(
            name=name,
            output_dir=output_dir,
            device=device,
            all_threads=memory is None,
            memory={"on": True, "history": "history"}.get(memory or "", False),
            windows=windows,
            max_events=max_events,
            max_seconds=max_seconds,
            max_steps=max_steps,
            record_shapes=record_shapes,
            with_stack=with_stack,
        )
    except ns.DeviceUnavailableError as exc:
        raise Failure(f"--device {device}: {exc}") from exc


def _resolve(script: str, as_module: bool) -> tuple[str, str, str]:
    """(what to run, sys.argv[0] for it, profile name)."""
    if as_module:
        sys.path.insert(0, os.getcwd())  # where `python -m` looks first
        err: Exception | None = None
        try:
            spec = importlib.util.find_spec(script)
        except (ImportError, ValueError) as exc:
            spec, err = None, exc
        finally:
            sys.path.pop(0)
        if spec is None:
            why = f": {err}" if err else ""
            raise Failure(f"-m {script}: no module named {script!r}{why}; check the name and that it is importable from here")
        return script, spec.origin or script, script.rsplit(".", 1)[-1]
    path = Path(script)
    if not path.exists():
        raise Failure(f"{script}: no such file; give the path of a Python script (or -m MODULE)")
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise Failure(f"{script}: is a directory without __main__.py; give a Python script")
    return str(path), str(path), path.stem if path.is_file() else path.resolve().name


def _compiles(path: str) -> bool:
    """Whether the script compiles; if not, the error as Python prints it (on stderr)."""
    try:
        compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        sys.stderr.flush()
        return False
    return True


def _run_profiled(profile, target: str, argv0: str, as_module: bool, args: list[str]):
    """Run the target inside ``profile``; return (exit code, Run). Restores sys state after."""
    saved_argv, saved_path0 = sys.argv[:], (sys.path[0] if sys.path else None)
    sys.argv[:] = [argv0, *args]
    if as_module:
        entry = os.getcwd()  # like `python -m`: the current directory comes first
    else:
        entry = os.path.dirname(os.path.abspath(target))
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)
    code = 0
    run_obj = None
    try:
        try:
            with profile as run_obj:
                try:
                    if as_module:
                        runpy.run_module(target, run_name="__main__", alter_sys=True)
                    else:
                        runpy.run_path(target, run_name="__main__")
                except SystemExit as exc:  # sys.exit() is the script's answer, not an error
                    code = _exit_code(exc.code)
        except KeyboardInterrupt:
            _print_script_traceback(sys.exc_info()[2], argv0)
            code = 130
        except BaseException as exc:  # noqa: BLE001 - the script's exception: show it, exit 1
            _print_script_traceback(exc.__traceback__, argv0, exc)
            code = EXIT_FAILURE
    finally:
        sys.argv[:] = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
    return code, run_obj


def _exit_code(value: object) -> int:
    """Python's rules for ``SystemExit.code``: None -> 0, int -> itself, else print it and 1."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    sys.stderr.write(f"{value}\n")
    return 1


def _print_script_traceback(tb: TracebackType | None, script_file: str, exc: BaseException | None = None) -> None:
    """The traceback as Python prints it, starting at the script's frame (not ours or runpy's)."""
    exc = exc if exc is not None else sys.exc_info()[1]
    start = tb
    wanted = os.path.abspath(script_file)
    while start is not None and os.path.abspath(start.tb_frame.f_code.co_filename) != wanted:
        start = start.tb_next
    if exc is None:
        return
    if start is None:  # e.g. a syntax error in the script: the error itself says where
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    else:
        sys.stderr.write("".join(traceback.format_exception(type(exc), exc, start)))
    sys.stderr.flush()


def _check_output_file(output_file: str) -> None:
    parent = os.path.dirname(os.path.abspath(output_file))
    if not os.path.isdir(parent):
        raise click.BadParameter(f"{output_file}: the directory {parent} does not exist", param_hint="--output")
    if not os.access(parent, os.W_OK) or (os.path.exists(output_file) and not os.access(output_file, os.W_OK)):
        raise click.BadParameter(f"{output_file}: not writable", param_hint="--output")


def _print_whole(text: str, out: Console, *, label: str = "", style: str = "") -> None:
    """``label text`` on one line when it fits the width, else ``text`` (a path, a command to
    copy) on a line of its own: never wrapped, never cut."""
    if label and len(label) + 1 + len(text) <= out.width:
        text = f"{label} {text}"
    elif label:
        out.print(label, style=style, markup=False)
    out.print(text, style=style, markup=False, soft_wrap=True)


def _print_summary(run_obj, top: int, output_file: str | None, *, as_json: bool = False) -> None:
    """The summary on stdout after the script's own output (or into ``output_file``); with
    ``as_json``, as ``show --json`` prints it."""
    from ..report.sources import Source, result_of
    from ..report.terminal import diagnosis_renderable, header_renderable, make_console, summary_renderable

    try:
        sys.stdout.flush()  # the script's output first
    except (OSError, ValueError):
        pass
    handle = None
    if output_file is not None:
        try:
            handle = open(output_file, "w", encoding="utf-8")
        except OSError as exc:  # checked before the script ran; it changed since: stdout, same exit code
            sys.stderr.write(
                f"neuronscope: --output {output_file}: cannot write ({exc.strerror or exc}); the summary follows on stdout\n"
            )
    try:
        out = make_console(file=handle) if handle is not None else make_console()
        err = make_console(stderr=True)
        if run_obj is None:
            err.print("neuronscope: the profile did not start; no summary", style="yellow")
            return
        summary = run_obj.summary
        if summary is None:
            why = run_obj.skip_reason or "see the log above"
            err.print(f"neuronscope: no summary (profile {run_obj.status}: {why})", style="yellow", markup=False)
            return
        run_obj.wait(60)
        src = Source(label=run_obj.name, kind="run", result=result_of(run_obj))
        if as_json:
            from .show import show_json

            out.file.write(json.dumps(show_json(src, "self_device", top), indent=2, allow_nan=False) + "\n")
            return
        out.rule("neuronscope", style="dim")
        out.print(header_renderable(src))
        out.print()
        if src.diagnosis is not None:
            out.print(diagnosis_renderable(src.diagnosis, memory=src.memory))
            out.print()
        out.print(summary_renderable(summary, out, top=top or None))
        if run_obj.path is not None:
            _print_whole(str(run_obj.path), out, label="run directory:")
            _print_whole(f"  neuronscope show {run_obj.path} --by-region", out, style="dim")
    finally:
        if handle is not None:
            handle.close()
