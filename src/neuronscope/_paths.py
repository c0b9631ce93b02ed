"""What a path holds: the one resolver behind every command and API function that takes a path.

A path names one of these (:attr:`Resolved.kind`):

* ``trace``:  a trace file, or a directory holding exactly one Kineto trace (TensorBoard's
  ``<host>_<pid>.<n>.pt.trace.json``, a ``trace.json.gz``, a colleague's ``*.json.gz``);
* ``run``:    a neuronscope run directory (holding ``manifest.json``);
* ``traces``: a directory holding several traces (one per rank of a plain torch.profiler job);
* ``runs``:   a directory of run directories (an output directory, a job's ``rank<N>/``);
* ``job``:    a job directory (``<output_dir>/<job id>``, holding ``rank0/``, ``rank1/``...),
  or an output directory holding exactly one.

``show``, ``diff``, ``report``, ``ns.diagnose``, ``ns.diagnose_memory`` and ``ns.load_trace``
take one profile (:func:`resolve_profile`: a ``trace`` or a ``run``); ``ranks``,
``ns.compare_ranks`` and ``report JOB`` take the others too (:func:`resolve`). Every refusal is
a :class:`~neuronscope.TraceLoadError` that names the path and says what to pass instead.
Standard library only: the CLI resolves a path before it imports anything heavy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import TraceLoadError

__all__ = [
    "PROFILE_HINT",
    "RANKS_HINT",
    "RANK_DIR",
    "Resolved",
    "resolve",
    "resolve_profile",
    "run_trace_file",
    "trace_file",
    "trace_files_in",
]

Kind = Literal["trace", "run", "traces", "runs", "job"]

MANIFEST = "manifest.json"
#: the trace a run directory holds, in order of preference (a directory holding one is a trace)
RUN_TRACES = ("trace.json.gz", "trace.json")
TRACE_SUFFIXES = (".json", ".json.gz")
#: neuronscope's own JSON files: never a trace, wherever they are found
_NOT_TRACES = frozenset({MANIFEST, "summary.json", "rank.json"})
#: a rank's directory inside a job directory
RANK_DIR = re.compile(r"^rank(\d+)$")

PROFILE_HINT = "pass a run directory (holding manifest.json), a Kineto trace.json(.gz) or a directory holding one"
RANKS_HINT = (
    "pass a job directory (<output_dir>/<job id>, holding rank0/, rank1/...), run directories, or one Kineto trace per rank"
)


@dataclass(frozen=True)
class Resolved:
    """What a path holds."""

    kind: Kind
    #: the trace file, the run directory, the directory of traces or runs, the job directory
    path: Path
    #: trace, run: ``(path,)``; traces: the trace files; runs, job: the run directories
    members: tuple[Path, ...]

    @property
    def trace(self) -> Path | None:
        """The trace file of one profile (None: a run saved without one, or several profiles)."""
        if self.kind == "trace":
            return self.path
        return run_trace_file(self.path) if self.kind == "run" else None


def run_trace_file(run_dir: Path) -> Path | None:
    """The ``trace.json.gz`` (else ``trace.json``) of a run directory, or None."""
    return next((run_dir / n for n in RUN_TRACES if (run_dir / n).is_file()), None)


def trace_files_in(directory: Path) -> list[Path]:
    """The Kineto traces a directory holds: its ``trace.json.gz`` (else ``trace.json``) when it
    has one; else its ``*.json(.gz)`` files, only those with "trace" in the name when some have
    it (a ``.pt.trace.json`` next to a config.json), all of them otherwise (``rank0.json``...)."""
    found = run_trace_file(directory)
    if found is not None:
        return [found]
    files = sorted(
        p for p in directory.iterdir() if p.name.endswith(TRACE_SUFFIXES) and p.name not in _NOT_TRACES and p.is_file()
    )
    return [p for p in files if "trace" in p.name] or files


def resolve(path: str | os.PathLike[str], *, ranks: bool = False) -> Resolved:
    """What ``path`` holds. Raises :class:`TraceLoadError` when it is missing, holds nothing
    usable, or holds several jobs; ``ranks``: the error says what ``compare_ranks`` takes."""
    p = Path(path)
    hint = RANKS_HINT if ranks else PROFILE_HINT
    if not p.is_dir():
        # a file (or a pipe): whether it is a trace, only reading it tells
        if p.exists():
            return Resolved("trace", p, (p,))
        raise TraceLoadError(f"{p}: cannot read: no such file or directory; {hint}")
    if (p / MANIFEST).is_file():
        return Resolved("run", p, (p,))
    try:
        return _resolve_dir(p, hint)
    except OSError as exc:
        raise TraceLoadError(f"{p}: cannot read: {exc.strerror or exc}; {hint}") from exc


def _resolve_dir(p: Path, hint: str) -> Resolved:
    subdirs = sorted(c for c in p.iterdir() if c.is_dir())
    if any(RANK_DIR.match(c.name) for c in subdirs):
        return _job(p, subdirs)
    jobs = [c for c in subdirs if any(RANK_DIR.match(g.name) and g.is_dir() for g in c.iterdir())]
    if len(jobs) == 1:
        return _job(jobs[0], sorted(c for c in jobs[0].iterdir() if c.is_dir()))
    if jobs:
        raise TraceLoadError(f"{p} holds {len(jobs)} jobs ({_names(jobs)}); pass one of them, e.g. {jobs[-1]}")
    runs = [c for c in subdirs if (c / MANIFEST).is_file()]
    if runs:
        return Resolved("runs", p, tuple(runs))
    traces = trace_files_in(p)
    if len(traces) == 1:
        return Resolved("trace", traces[0], (traces[0],))
    if traces:
        return Resolved("traces", p, tuple(traces))
    raise TraceLoadError(
        f"{p}: directory holds no manifest.json, no trace.json(.gz) or other *.json(.gz) trace and no rank<N>/ "
        f"directory: no runs found; {hint}"
    )


def _job(job_dir: Path, subdirs: list[Path]) -> Resolved:
    rank_dirs = [c for c in subdirs if RANK_DIR.match(c.name)]
    runs = [run for rd in rank_dirs for run in sorted(c for c in rd.iterdir() if (c / MANIFEST).is_file())]
    return Resolved("job", job_dir, tuple(runs))


def _names(paths: Sequence[Path], limit: int = 8) -> str:
    shown = ", ".join(p.name for p in paths[:limit])
    return shown + (", ..." if len(paths) > limit else "")


def resolve_profile(path: str | os.PathLike[str]) -> Resolved:
    """A path that must name one profile: a trace (or a directory holding one) or a run directory."""
    r = resolve(path)
    if r.kind in ("trace", "run"):
        return r
    n, members = len(r.members), r.members
    ranks = f"`neuronscope ranks {r.path}` / ns.compare_ranks({str(r.path)!r})"
    if r.kind == "traces":
        message = (
            f"{r.path} holds {n} traces ({_names(members)}); pass one of them, e.g. {members[0]}, "
            f"or compare them as the ranks of one job: {ranks}"
        )
    elif r.kind == "runs":
        message = f"{r.path} holds {n} run directories ({_names(members)}); pass one of them, e.g. {members[-1]}"
    else:
        example = f", e.g. {members[0]}" if members else ""
        message = (
            f"{r.path} is the job directory of a distributed job (rank0/, rank1/...); "
            f"pass one rank's run directory{example}, or compare its ranks: {ranks}"
        )
    raise TraceLoadError(message)


def trace_file(path: str | os.PathLike[str]) -> Path:
    """The one trace file ``path`` names: the file itself, the one a directory holds, a run's."""
    r = resolve_profile(path)
    if r.trace is None:
        raise TraceLoadError(f"{r.path}: directory holds no trace.json(.gz); was the run saved with save_trace=True?")
    return r.trace
