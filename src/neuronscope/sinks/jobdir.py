"""Reading the runs of a distributed job from disk: job directories (``<output_dir>/<job id>/
rank<N>/<run>/``), run directories, or one Kineto trace per rank; one rank at a time, or in
parallel on any ``concurrent.futures.Executor`` (a local process pool, a Dask
``distributed.Client``, Ray's executor).

Only paths go to the workers and only :class:`RankRun` objects come back (identity, timing
and the rank profile: kilobytes), never a trace. The comparison itself is pure and lives in
analysis/ranks.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path

from .._paths import RANK_DIR, resolve, run_trace_file
from ..analysis.ranks import RankRun, rank_profile
from ..errors import TraceLoadError
from .run_format import read_manifest, read_rank_profile

__all__ = ["discover", "read_rank_run", "read_rank_runs"]

log = logging.getLogger("neuronscope")

#: the profile name of a run read from a bare per-rank trace file: file names differ per rank
#: ("rank3.trace.json", "host_pid.1700.pt.trace.json"), the profile they hold does not
TRACE_FILE_RUN = "trace"


def read_rank_runs(
    paths: Sequence[Path], *, executor: Executor | None = None, skip_bad: bool = False
) -> tuple[list[RankRun], list[str]]:
    """Every run found under ``paths``, read serially or on ``executor``; and the warnings.

    A file that cannot be read raises :class:`TraceLoadError` naming it, or, with
    ``skip_bad``, is left out with a warning naming it (and logged).
    """
    found = discover(paths)
    warnings: list[str] = []
    if executor is None:
        results = [_read_or_error(str(where), str(rank_dir) if rank_dir else None) for where, rank_dir in found]
    else:
        futures = [executor.submit(_read_or_error, str(where), str(rank_dir) if rank_dir else None) for where, rank_dir in found]
        results = [f.result() for f in futures]
    runs: list[RankRun] = []
    for (where, _), result in zip(found, results):
        if isinstance(result, RankRun):
            runs.append(result)
            continue
        if not skip_bad:
            raise TraceLoadError(result)
        message = f"skipped {where}: {result}"
        log.warning("neuronscope: %s", message)
        warnings.append(message)
    return runs, warnings


def _read_or_error(where: str, rank_dir: str | None) -> RankRun | str:
    """The worker's task: a path in, a RankRun (or the error's message) out — a message, not
    the exception, so every executor ships it back the same way."""
    try:
        return read_rank_run(Path(where), Path(rank_dir) if rank_dir else None)
    except TraceLoadError as exc:
        return str(exc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{where}: unreadable: {type(exc).__name__}: {exc}"


def read_rank_run(where: Path, rank_dir: Path | None = None) -> RankRun:
    """One run directory or per-rank trace file."""
    run = _load_trace_file(where) if where.is_file() else _load_run_dir(where)
    run.origin = rank_dir
    return run


def _rank_of_dir(path: Path) -> int | None:
    for part in (path.parent.name, path.name):
        m = RANK_DIR.match(part)
        if m:
            return int(m.group(1))
    return None


def _load_run_dir(path: Path) -> RankRun:
    manifest, _ = read_manifest(path)
    rank = manifest.get("rank")
    if rank is None:
        rank = _rank_of_dir(path)
    if rank is None:
        raise TraceLoadError(
            f"{path}: this run has no rank (profiled outside a torchrun job?); compare_ranks needs the run "
            "directories of a distributed job (<output_dir>/<job id>/rank<N>/...)"
        )
    dist = v if isinstance(v := manifest.get("distributed"), dict) else {}
    trace = run_trace_file(path)
    profile = read_rank_profile(path, strict=True)
    if profile is None and trace is not None:
        from ..trace.chrome import load_trace

        profile = rank_profile(load_trace(trace, device=manifest.get("device")))
    busy = manifest.get("device_busy_pct")
    if busy is None and profile is not None:
        busy = profile.get("device_busy_pct")
    return RankRun(
        rank=int(rank),
        path=path,
        name=str(manifest.get("name", path.name)),
        key=(int(dist.get("call_index", -1)), int(manifest.get("window") or 0)),
        start_ns=int(manifest.get("start_ns", 0)),
        end_ns=int(manifest.get("end_ns", 0)),
        host=manifest.get("host"),
        pid=manifest.get("pid"),
        local_rank=manifest.get("local_rank"),
        job_id=manifest.get("job_id"),
        world_size=manifest.get("world_size"),
        profile=profile,
        busy_pct=None if busy is None else float(busy),
    )


def _load_trace_file(path: Path) -> RankRun:
    from ..trace.chrome import load_trace

    trace = load_trace(path)
    meta = trace.metadata
    info = v if isinstance(v := meta.get("neuronscope"), dict) else {}
    dist = v if isinstance(v := meta.get("distributedInfo"), dict) else {}
    rank = info.get("rank", dist.get("rank"))
    if rank is None:
        rank = _rank_of_dir(path.parent) if path.parent.name else None
    if rank is None:
        raise TraceLoadError(
            f"{path}: the trace names no rank (no distributedInfo.rank); profile with torch.distributed initialised"
        )
    profile = rank_profile(trace)
    return RankRun(
        rank=int(rank),
        path=path,
        name=TRACE_FILE_RUN,
        key=(-1, 0),
        start_ns=int(trace.start_time_ns),
        end_ns=int(trace.end_time_ns),
        host=None,
        pid=None,
        local_rank=info.get("local_rank"),
        job_id=info.get("job_id"),
        world_size=info.get("world_size", dist.get("world_size")),
        profile=profile,
        busy_pct=profile["device_busy_pct"],
    )


def discover(paths: Sequence[Path]) -> list[tuple[Path, Path | None]]:
    """(run directory or trace file, the rank directory it is in) for every path given: what
    :func:`neuronscope._paths.resolve` finds there (the errors name the path)."""
    found: list[tuple[Path, Path | None]] = []
    for p in paths:
        where = resolve(p, ranks=True)
        if where.kind in ("runs", "job"):  # run directories found in a rank (or output) directory
            found.extend((run, run.parent) for run in where.members)
        else:
            found.extend((member, None) for member in where.members)
    return found
