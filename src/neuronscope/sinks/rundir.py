"""The run directory: what a profile leaves on disk.

``<output_dir>/<name>-<UTC time>-<pid>-<n>/``
    ``manifest.json``  schema version, name, device, versions, wall-clock window, files, sampling
    ``summary.json``   the Summary (``Summary.from_dict`` reads it back)
    ``trace.json.gz``  the Kineto trace (any Kineto viewer opens it; ``load_trace`` too)
    ``neuron/``        raw Neuron runtime files (NEFF/NTFF/...), on Neuron

Directories are created user-only (0o700): traces reveal model structure.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import os
import re
import shutil
import socket
import threading
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TraceLoadError

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "RANK_FILE",
    "RUN_DIRECTORY",
    "RunDirectoryOptions",
    "RunDirectorySink",
    "create_run_dir",
    "load_run",
    "installed_with_python",
    "program_name",
    "set_program",
    "write_json",
    "write_trace",
    "write_trace_model",
]

MANIFEST_SCHEMA_VERSION = 1
#: a rank's profile for ``neuronscope ranks`` (``analysis.ranks.RANK_FILE``, the same name: a test
#: checks). Not imported from there: that module loads numpy, which ``neuronscope show`` must not.
RANK_FILE = "rank.json"
_counter = itertools.count(1)
_counter_lock = threading.Lock()
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_dir_name(name: str, start_ns: int | None = None) -> str:
    stamp = datetime.fromtimestamp((start_ns or time.time_ns()) / 1e9, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    with _counter_lock:
        n = next(_counter)
    safe = _UNSAFE.sub("_", name).strip("._")[:64] or "profile"
    return f"{safe}-{stamp}-{os.getpid()}-{n}"


_RUN_DIR = re.compile(r"^.+-\d{8}T\d{6}\.\d{6}Z-\d+-\d+$")
_retention_lock = threading.Lock()
_in_progress: set[Path] = set()


#: a run directory's manifest says how far it got; a reader that finds one of the first two
#: from a process that is gone treats the run as incomplete (``RunStatus.INCOMPLETE``)
IN_FLIGHT_STATUSES = ("recording", "processing")


def create_run_dir(
    output_dir: Path,
    name: str,
    start_ns: int | None = None,
    *,
    max_runs: int | None = None,
    max_bytes: int | None = None,
    status: str = "processing",
) -> Path:
    """Create the run directory (and the output dir) user-only, applying retention first, with
    a manifest saying ``status`` ("recording": the device writes into it during the profile;
    "processing": its files are being written) — so the directory is readable at every instant.

    Raises OSError when unwritable. The new directory counts as in progress (never pruned)
    until :func:`mark_complete`.
    """
    output_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = output_dir / run_dir_name(name, start_ns)
    with _retention_lock:
        # Only the cheap count rule here (one scandir): this runs on the caller's thread.
        # The byte budget needs a walk of every run: mark_complete applies it on the worker.
        if max_runs is not None:
            prune(output_dir, max_runs=max_runs - 1, max_bytes=None)
        path.mkdir(mode=0o700)
        _in_progress.add(path)
    write_json(path / "manifest.json", base_manifest(name=name, status=status, start_ns=start_ns))
    return path


def mark_complete(path: Path, *, max_bytes: int | None = None) -> None:
    """The run at ``path`` is written; apply the byte budget (background worker only)."""
    with _retention_lock:
        _in_progress.discard(path)
        if max_bytes is not None:
            prune(path.parent, max_runs=None, max_bytes=max_bytes)


def prune(output_dir: Path, *, max_runs: int | None, max_bytes: int | None) -> list[Path]:
    """Remove the oldest run directories until at most ``max_runs`` remain and they hold at
    most ``max_bytes``. Only directories named like ours are touched; runs in progress never."""
    runs = []
    try:
        entries = list(os.scandir(output_dir))
    except OSError:
        return []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and _RUN_DIR.match(entry.name):
            path = Path(entry.path)
            if path not in _in_progress:
                runs.append((entry.stat(follow_symlinks=False).st_mtime_ns, path))
    runs.sort()
    removed: list[Path] = []
    total = sum(_dir_bytes(p) for _, p in runs) if max_bytes is not None else 0
    sizes: dict[Path, int] = {}
    while runs and ((max_runs is not None and len(runs) > max_runs) or (max_bytes is not None and total > max_bytes)):
        _, oldest = runs.pop(0)
        if max_bytes is not None:
            total -= sizes.get(oldest) or _dir_bytes(oldest)
        shutil.rmtree(oldest, ignore_errors=True)
        removed.append(oldest)
    return removed


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f), follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8", opener=_private_opener) as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)


def write_trace(
    kineto_results: Any, path: Path, extra_metadata: dict[str, Any] | None = None, *, saved: str | os.PathLike[str] | None = None
) -> Path:
    """Save the Kineto trace as ``trace.json.gz`` (Kineto's C++ writer, then gzip level 1).

    Our metadata goes in while streaming: the file (hundreds of MB for a big profile) is
    never read into memory. ``saved``: Kineto's JSON already written (by the memory stage);
    it is gzipped from there and left in place.
    """
    raw = path.with_name(".trace.json.partial")  # Kineto's JSON, gzipped next, then removed
    if saved is not None and os.path.isfile(saved):
        return _gzip_trace(Path(saved), path, extra_metadata, remove=False)
    try:
        kineto_results.save(str(raw))
    except RuntimeError as exc:
        # Kineto saves a trace once; a device exporter (TorchNeuron's NeuronProfiler.export_trace)
        # may have saved it into the raw files already. Copy that one.
        if "already saved" not in str(exc):
            raise
        saved = _already_saved_trace(path.parent)
        if saved is None:
            raise
        shutil.copyfile(saved, raw)
    return _gzip_trace(raw, path, extra_metadata, remove=True)


def _gzip_trace(raw: Path, path: Path, extra_metadata: dict[str, Any] | None, *, remove: bool) -> Path:
    target = path.with_name("trace.json.gz")
    partial = path.with_name(".trace.json.partial.gz")  # renamed into place once whole
    with open(raw, "rb") as src, gzip.open(_private_open_binary(partial), "wb", compresslevel=1) as dst:
        first = src.read(1 << 16)
        brace = first.find(b"{")
        if extra_metadata and brace >= 0:
            # Kineto writes '{\n  "schemaVersion": ...': our keys go right after the opening brace.
            extra = "".join(f"{json.dumps(k)}: {json.dumps(v, default=str)}, " for k, v in extra_metadata.items())
            first = first[: brace + 1] + extra.encode() + first[brace + 1 :]
        dst.write(first)
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, target)
    if remove:
        raw.unlink()
    return target


def write_trace_model(trace: Any, path: Path, extra_metadata: dict[str, Any] | None = None) -> Path:
    """Save a trace model (a capture merged from several segments) as ``trace.json.gz``."""
    from ..trace.chrome_writer import trace_to_chrome

    target = path.with_name("trace.json.gz")
    partial = trace_to_chrome(trace, path.with_name(".trace.json.partial.gz"), extra_metadata, opener=_private_open_binary)
    os.replace(partial, target)  # readers see the whole file or none
    return target


def _already_saved_trace(run_dir: Path) -> Path | None:
    candidates = [p for p in run_dir.rglob("*.json") if p.name == "trace.json" or p.name.startswith("neuron_framework_trace")]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _private_open_binary(path: Path):
    return open(path, "wb", opener=_private_opener)


def base_manifest(**fields: Any) -> dict[str, Any]:
    from .._version import __version__

    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "neuronscope_version": __version__,
        "torch_version": _torch_version(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "program": program_name(),
        **fields,
    }


_program: list[str | None] = [None]  # set_program(): the program `neuronscope run` runs


def set_program(name: str | None) -> None:
    """The user's program, when it is not (or not yet, or no longer) ``__main__``:
    ``neuronscope run train.py`` runs the script as ``__main__`` only while it runs, and its
    run is written after."""
    _program[0] = name or None


def program_name() -> str | None:
    """The user's program: the script running as ``__main__`` (its stem: ``train``), or the
    module run with ``-m`` (``mypkg.serve``), or what :func:`set_program` said. None for an
    interactive session, ``python -c``, or a launcher installed with Python (``uvicorn``,
    ``gunicorn``, ``neuronscope`` itself): those name no program of the user's. The manifest's
    ``program``, and the default ``service.name`` of the spans."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return _program[0]
    spec = getattr(main, "__spec__", None)
    module = str(getattr(spec, "name", "") or "").removesuffix(".__main__")
    if module.split(".")[0] == "neuronscope" or installed_with_python(path):
        return _program[0]
    return module if module and module != "__main__" else Path(path).stem or _program[0]


def installed_with_python(path: str) -> bool:
    """Whether ``path`` is a console script or a module of an installed package or the
    standard library (sysconfig's directories), not the user's own code."""
    try:
        resolved = Path(path).resolve()
    except (OSError, ValueError):
        return False
    return any(resolved.is_relative_to(root) for root in _python_roots())


@functools.lru_cache(maxsize=1)
def _python_roots() -> tuple[Path, ...]:
    import sysconfig

    schemes = [sysconfig.get_paths()]
    try:  # pip install --user: ~/.local/bin, ~/.local/lib/python3.X/site-packages
        schemes.append(sysconfig.get_paths(scheme=f"{os.name}_user"))
    except KeyError:
        pass
    keys = ("scripts", "purelib", "platlib", "stdlib", "platstdlib")
    return tuple({Path(paths[k]).resolve() for paths in schemes for k in keys if paths.get(k)})


def _torch_version() -> str | None:
    import sys

    torch = sys.modules.get("torch")  # loaded whenever a capture ran; never imported just for this
    if torch is not None:
        return str(torch.__version__)
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001 - not installed: the manifest says null
        return None


def files_of(path: Path) -> list[dict[str, Any]]:
    return [
        {"path": str(p.relative_to(path)), "bytes": p.stat().st_size}
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    ]


def load_run(path: str | os.PathLike[str]) -> Any:
    """Load a saved run directory as a completed :class:`~neuronscope.Run`."""
    from .._run import Run, RunStatus
    from ..analysis.summary import Summary
    from ..result import Analysis, CaptureFacts, Coverage, RunResult

    p = Path(path)
    manifest_file = p / "manifest.json"
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TraceLoadError(f"{p}: not a neuronscope run directory (no manifest.json)") from exc
    except (OSError, ValueError) as exc:
        raise TraceLoadError(f"{manifest_file}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or "schema_version" not in manifest:
        raise TraceLoadError(f"{manifest_file}: not a neuronscope manifest (no schema_version)")
    device = str(manifest.get("device", "cpu"))
    warnings = list(manifest.get("warnings", []))
    status = str(manifest.get("status", RunStatus.COMPLETE))
    if status in IN_FLIGHT_STATUSES:
        # written by a process that stopped (or has not finished yet): what is here is what it wrote
        warnings.append(
            f"incomplete run: its manifest says {status!r} — the process stopped (killed, out of memory) before the run "
            "was written; what is here is what it wrote"
        )
        status = RunStatus.INCOMPLETE
    trigger, annotation = _load_trigger(manifest, warnings)
    summary = diagnosis = memory = trace = None
    summary_file = p / "summary.json"
    if summary_file.is_file():
        try:
            data = json.loads(summary_file.read_text(encoding="utf-8"))
            summary = Summary.from_dict(data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise TraceLoadError(f"{summary_file}: unreadable summary: {exc!r}") from exc
        if isinstance(data.get("memory"), dict):
            from ..analysis.memory_model import MemoryReport

            try:
                memory = MemoryReport.from_dict(data["memory"])
            except (ValueError, TypeError, KeyError) as exc:
                warnings.append(f"unreadable memory report in {summary_file}: {exc!r}")
        if isinstance(data.get("diagnosis"), dict):
            from ..analysis.diagnosis.model import Diagnosis

            try:
                diagnosis = Diagnosis.from_dict(data["diagnosis"])
            except (ValueError, TypeError, KeyError) as exc:  # an older or damaged diagnosis: recomputed on demand
                warnings.append(f"unreadable diagnosis in {summary_file}: {exc!r}")
    elif (p / "trace.json.gz").is_file() or (p / "trace.json").is_file():
        from ..analysis.summary import summarize
        from ..trace.chrome import load_trace

        trace = load_trace(p, device=device)
        summary = summarize(trace)
    rank = _read_json(p / RANK_FILE)  # a rank of a distributed job: what it handed neuronscope ranks
    result = RunResult(
        name=str(manifest.get("name", p.name)),
        device=device,
        status=status,
        start_ns=int(manifest.get("start_ns", 0)),
        end_ns=int(manifest.get("end_ns", 0)),
        error=manifest.get("error"),
        error_message=manifest.get("error_message"),
        warnings=tuple(warnings),
        analysis=Analysis(
            trace=trace,
            summary=summary,
            diagnosis=diagnosis,
            memory=memory,
            rank_profile=rank,
            warnings=tuple(warnings),
            coverage=Coverage.from_dict(manifest["coverage"]) if isinstance(manifest.get("coverage"), dict) else None,
        ),
        capture=CaptureFacts(trigger=trigger),
        manifest=manifest,
        path=p,
        annotation=annotation,
    )
    return Run.from_result(result)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _load_trigger(manifest: dict[str, Any], warnings: list[str]) -> tuple[Any, Any]:
    """(trigger, Annotation) of a run captured on demand (issue 18)."""
    from ..result import Annotation

    if not isinstance(manifest.get("trigger"), dict):
        return None, Annotation()
    from .._trigger import Trigger, explanation_from_dict

    try:
        trigger = Trigger.from_dict(manifest["trigger"])
        baseline = Path(manifest["baseline"]) if isinstance(manifest.get("baseline"), str) else None
        explanation = explanation_from_dict(manifest["explanation"]) if isinstance(manifest.get("explanation"), dict) else None
        return trigger, Annotation(baseline=baseline, explanation=explanation)
    except (ValueError, TypeError, KeyError) as exc:  # a damaged entry must not make the run unreadable
        warnings.append(f"unreadable trigger in the manifest: {exc!r}")
        return None, Annotation()


@dataclass(frozen=True)
class RunDirectoryOptions:
    """How the output stage asks for a capture's files (beyond what the result holds)."""

    save_trace: bool = True
    trace_metadata: dict[str, Any] = field(default_factory=dict)  #: rank, job, ... for the trace's metadata
    memory: str | None = None  #: the memory stage's mode: the device may add its memory files
    backend: Any = None  #: the DeviceBackend, for its memory files


class RunDirectorySink:
    """summary.json (with the diagnosis and memory report), rank.json, trace.json.gz and the
    device's memory files, in the run directory the output stage made. Raises ``OSError``
    when the directory cannot be written: the run then completes without a path."""

    name = "run directory"

    def export(self, result: Any) -> dict[str, Any]:
        """Write ``result``'s files from its trace model (a result read back, or re-exported)."""
        return self.write(result, [], RunDirectoryOptions())

    def write(self, result: Any, segments: list[Any], options: RunDirectoryOptions) -> dict[str, Any]:
        """Write the files of a run just captured; ``segments``: its Kineto results, written
        as they are when there is one (faster than from the model). Returns manifest fields."""
        run_dir: Path = result.path
        summary = result.summary.to_dict() if result.summary is not None else {}
        if result.diagnosis is not None:
            summary["diagnosis"] = result.diagnosis.to_dict()
        if result.memory is not None:
            summary["memory"] = result.memory.to_dict()
        write_json(run_dir / "summary.json", summary)
        rank = result.analysis.rank_profile if result.analysis is not None else None
        if rank is not None:
            write_json(run_dir / RANK_FILE, dict(rank))
        if options.save_trace and result.trace is not None:
            meta: dict[str, Any] = {"neuronscope_device": result.device}
            if options.trace_metadata:
                meta["neuronscope"] = dict(options.trace_metadata)
            single = len(segments) == 1 and segments[0].trace is result.trace and segments[0].results is not None
            if single:
                write_trace(segments[0].results, run_dir / "trace.json.gz", meta, saved=segments[0].saved_json)
            else:  # several segments (a capture that nested others), or a result read back: from the model
                write_trace_model(result.trace, run_dir / "trace.json.gz", meta)
        added: dict[str, Any] = {}
        if options.memory and options.backend is not None and result.memory is not None:
            added.update(options.backend.write_memory_files(run_dir, options.memory))
        return added

    def force_flush(self, timeout_s: float | None) -> bool:
        return True  # every write is done when export returns

    def shutdown(self) -> None:
        pass


#: the one run-directory sink (stateless)
RUN_DIRECTORY = RunDirectorySink()
