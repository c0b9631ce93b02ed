"""The run directory's life on disk: created, written privately, pruned.

``<output_dir>/<name>-<UTC time>-<pid>-<n>/``, created user-only (0o700: traces reveal model
structure), its files written 0o600 and whole (write-then-rename); retention prunes the oldest
runs, never one in progress. Here: the directory (:func:`create_run_dir`, :func:`mark_complete`,
:func:`prune`), the writers every file goes through (:func:`write_json`, :func:`write_trace`,
:func:`write_trace_model`) and the header every manifest.json starts with (:func:`base_manifest`).
What the files hold — a RunResult written and read back — is :mod:`.run_format`'s.
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
from pathlib import Path
from typing import Any

__all__ = [
    "IN_FLIGHT_STATUSES",
    "MANIFEST_SCHEMA_VERSION",
    "already_saved_trace",
    "base_manifest",
    "create_run_dir",
    "files_of",
    "installed_with_python",
    "mark_complete",
    "program_name",
    "prune",
    "set_program",
    "write_json",
    "write_trace",
    "write_trace_model",
]

MANIFEST_SCHEMA_VERSION = 1
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
        saved = already_saved_trace(path.parent)
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


def already_saved_trace(run_dir: Path) -> Path | None:
    """The Kineto JSON a device exporter already saved under ``run_dir`` (the newest), or None:
    :func:`write_trace` here, and capture/memory.py when Kineto refuses to save a trace twice."""
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
