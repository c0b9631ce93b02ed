"""A long run profiled in windows, folded into one run (see capture/budget.py for when a
window ends).

Each window, on the analysis worker: its trace model, summary and diagnosis (the same
analysis a one-window run gets), folded into the run's running totals; then its events are
freed — unless its raw trace is kept (the first window's, and the ``keep`` slowest so far),
which the output worker writes to ``<run dir>/windows/NNNN/`` before freeing them, deleting
the trace it displaces. After every window the run directory holds ``windows.json`` (one row
per window: when, how many events, why it ended, its verdict) and ``summary.json`` (the fold
so far), each by write-then-rename: a process killed mid-run (OOM) leaves every window done.

When the capture ends, the last window is analysed and the fold becomes the run's summary and
diagnosis; the output stage writes it like any run. Memory: one window recording, one being
analysed or written; disk: 1 + ``keep`` traces.
"""

from __future__ import annotations

import gc
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import _stats, _worker
from .._run import Run
from ..result import Analysis, CaptureFacts, Coverage
from .budget import Recording, Windows

__all__ = ["WindowedRun"]

WINDOWS_DIR = "windows"
WINDOWS_INDEX = "windows.json"
#: windows.json and the running summary.json are rewritten at most this often (and at the end):
#: the run's step percentiles are over every step so far, and one-step windows end ~40 times a second
INDEX_EVERY_S = 1.0
#: a window displaces a kept trace only when it is this much slower
DISPLACE_FACTOR = 1.10


@dataclass(frozen=True)
class _Window:
    """What the capture knew of one window when it ended."""

    index: int
    ended_by: str  #: "window_steps" | "window_seconds" | "budget" | "duration" | "steps" | "end"
    start_ns: int
    end_ns: int
    steps: int  #: steps counted as they ran (ns.step() / optimizer steps)
    cpu: dict[str, Any] | None  #: _system.cpu_contention over the window

    def row(self) -> dict[str, Any]:
        return {
            "window": self.index,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "ended_by": self.ended_by,
            "steps": self.steps,
        }


class WindowedRun:
    """The fold of one windowed capture's windows, and their files."""

    def __init__(self, name: str, device: str, spec: Windows, recording: Recording, run_dir: Path | None, make_dir: Any) -> None:
        self.name = name
        self.device = device
        self.spec = spec
        self.recording = recording
        self._lock = threading.Lock()
        # the running fold: each window is folded in as it ends (analysis/fold.py is associative),
        # so memory and per-window work stay flat over any number of windows
        self._summary: Any = None
        self._diagnosis: Any = None
        self._memory: Any = None  # the window with the highest memory peak
        self._rows = _Rows()
        self._warnings: list[str] = []
        self._device: Any = None
        self.events = 0
        self._kept_scores: dict[int, float] = {}  # window -> score, of the kept ones besides the first
        self.kept: list[int] = []
        self.run_dir = run_dir
        self._make_dir = make_dir
        self._index_written = float("-inf")  # monotonic s of the last index write
        self._index_due = False  # a write was put off: a timer will make it
        self._finished = False  # the run's last index was written: no more timed writes

    # -- the capture's side --------------------------------------------------------------------
    def submit(
        self,
        index: int,
        segments: list[Any],
        reason: str,
        options: Any,
        start_ns: int,
        end_ns: int,
        steps: int = 0,
        *,
        cpu: dict[str, Any] | None = None,
    ) -> None:
        """Queue window ``index`` (its segments; ``steps``: the steps it recorded; ``cpu``: whether
        its thread had a CPU, ``_system.cpu_contention``) for analysis (never blocks)."""
        with self.recording.lock:
            self.recording.in_flight += 1
        window = _Window(index, reason, start_ns, end_ns, steps, cpu)
        _worker.windows_worker().submit(lambda: self._analyse(window, segments, options))

    # -- analysis worker -------------------------------------------------------------------------
    def _analyse(self, w: _Window, segments: list[Any], options: Any) -> None:
        from .processing import analyse_segments, release_segments

        written = False
        index = w.index
        cpu0 = time.thread_time_ns()
        try:
            if not segments:
                self._lost(w, "nothing was recorded in it (the profiler returned no events)")
                return
            window = Run(self.name, self.device, capture=CaptureFacts(cpu_contention=w.cpu))
            window.started(w.start_ns)
            window.ended(w.end_ns)
            with collections_paused():
                analysis = analyse_segments(window, segments, replace(options, window=index))
            self._fold(w, analysis)
            if self._keeps(index, analysis):
                _worker.output_worker().submit(lambda: self._write(index, segments, analysis))
                written = True
            else:
                _worker.output_worker().submit(self._write_index)
        except Exception as exc:  # noqa: BLE001 - one window lost, not the run
            _stats.contain(f"analysing window {index}", exc, name=self.name)
            self._lost(w, f"its analysis failed ({type(exc).__name__}: {exc})")
        finally:
            if w.ended_by != "end":  # analysis competes with the program (the last one runs after it)
                # its CPU time, not its wall time: at its lower priority this thread mostly waits
                # while the program runs (a 1 % slowdown read as 87 % of the wall time)
                self.recording.overhead.add(time.thread_time_ns() - cpu0)
            if not written:
                release_segments(segments)
                _give_back_memory()
                self._window_done()

    def _window_done(self) -> None:
        with self.recording.lock:
            self.recording.in_flight -= 1

    def _lost(self, w: _Window, why: str) -> None:
        """A window that adds nothing to the fold still has its row, saying why (no silent gap)."""
        with self._lock:
            self._rows.append({**w.row(), "events": 0, "lost": why})
        _worker.output_worker().submit(self._write_index)

    def _fold(self, w: _Window, analysis: Analysis) -> None:
        events = len(analysis.trace) if analysis.trace is not None else 0
        d = analysis.diagnosis
        row: dict[str, Any] = {
            **w.row(),
            "events": events,
            "bound_by": d.bound_by if d is not None else None,
            "device_busy_pct": round(d.device_busy_pct, 2) if d is not None else None,
            "score": round(_score(analysis), 3),
            "top_op": analysis.summary.rows[0].name if analysis.summary is not None and analysis.summary.rows else None,
            "cpu_wait_pct": round(d.contention.wait_pct, 2) if d is not None and d.contention is not None else None,
        }
        if d is None:
            row["lost"] = "its diagnosis failed: its ops are in the summary, not in the diagnosis"
        self.recording.calibrate(events, w.steps, w.end_ns - w.start_ns)
        with self._lock:
            self.events += events
            self._rows.append(row)
            if analysis.summary is not None and d is not None:
                self._fold_in(w.index, analysis.summary, d)
            m = analysis.memory
            if m is not None and (self._memory is None or m.peak_bytes > self._memory.peak_bytes):
                self._memory = m
            self._warnings += [w for w in analysis.warnings if w not in self._warnings]
            self._device = analysis.device if self._device is None else self._device

    def _fold_in(self, index: int, summary: Any, diagnosis: Any) -> None:
        """The run so far with window ``index`` folded in (under the lock)."""
        from ..analysis.fold import fold_diagnoses, fold_summaries

        diagnosis = replace(diagnosis, timeline_data=None)  # each window's timeline is in its own files
        if self._summary is None:
            self._summary, self._diagnosis = summary, diagnosis
            self._first_index = index
            return
        self._summary = fold_summaries([self._summary, summary])
        first = getattr(self, "_first_index", 1) if "windows_folded" not in self._diagnosis.evidence else 0
        self._diagnosis = fold_diagnoses([self._diagnosis, diagnosis], window_indexes=[first, index], summary=self._summary)

    def _keeps(self, index: int, analysis: Analysis) -> bool:
        """Whether window ``index``'s raw trace is kept: the first, or among the ``keep`` slowest so far."""
        if index == 1:
            return True
        score = _score(analysis)
        with self._lock:
            if len(self._kept_scores) < self.spec.keep:
                self._kept_scores[index] = score
                return True
            if not self._kept_scores:
                return False
            low = min(self._kept_scores, key=lambda k: self._kept_scores[k])
            if score <= self._kept_scores[low] * DISPLACE_FACTOR:  # noise would rewrite traces for nothing
                return False
            del self._kept_scores[low]
            self._kept_scores[index] = score
            return True

    # -- output worker -------------------------------------------------------------------------
    def directory(self) -> Path | None:
        """The run directory the windows are written to, made when the first is (None: it could not be)."""
        if self.run_dir is None and self._make_dir is not None:
            self.run_dir, self._make_dir = self._make_dir(), None
        return self.run_dir

    def _write(self, index: int, segments: list[Any], analysis: Analysis) -> None:
        from .processing import release_segments

        try:
            root = self.directory()
            if root is None:
                return
            with collections_paused():
                self._write_files(root, index, segments, analysis)
        except Exception as exc:  # noqa: BLE001 - the window's summary is still folded
            _stats.contain(f"writing window {index}", exc, name=self.name)
        finally:
            release_segments(segments)
            _give_back_memory()
            self._window_done()

    def _write_files(self, root: Path, index: int, segments: list[Any], analysis: Analysis) -> None:
        """A kept window's summary and raw trace, displacing the kept trace it outranks."""
        from ..sinks.rundir import write_json, write_trace, write_trace_model

        where = root / WINDOWS_DIR / f"{index:04d}"
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        summary = analysis.summary.to_dict() if analysis.summary is not None else {}
        if analysis.diagnosis is not None:
            summary["diagnosis"] = analysis.diagnosis.to_dict()
        write_json(where / "summary.json", summary)
        meta = {"neuronscope_device": self.device, "neuronscope_window": index}
        written = False
        if len(segments) == 1 and segments[0].results is not None:
            try:
                write_trace(segments[0].results, where / "trace.json.gz", meta, saved=segments[0].saved_json)
                written = True
            except RuntimeError:  # Kineto saves once: a device exporter (TorchNeuron) saved it already
                written = False
        if not written and analysis.trace is not None:
            write_trace_model(analysis.trace, where / "trace.json.gz", meta)
        with self._lock:
            self.kept.append(index)
            self._rows.pin(index)
            evicted = [k for k in self.kept if k != 1 and k not in self._kept_scores]
            self.kept = [k for k in self.kept if k not in evicted]
            for k in evicted:
                self._rows.unpin(k)
        for k in evicted:  # displaced by a slower window
            shutil.rmtree(root / WINDOWS_DIR / f"{k:04d}", ignore_errors=True)
        self._write_index()

    def _write_index(self, *, final: bool = False, put_off: bool = False) -> None:
        """windows.json and the fold so far, so a run killed mid-way still reads (output worker).
        At most once per INDEX_EVERY_S: a write put off is made by a timer, or by the run's end."""
        from ..sinks.rundir import write_json

        with self._lock:
            if self._finished:
                return
            wait = self._index_written + INDEX_EVERY_S - time.monotonic()
            if wait > 0 and not (final or put_off):
                if not self._index_due:
                    self._index_due = True
                    timer = threading.Timer(wait, self._write_put_off)
                    timer.daemon = True
                    timer.start()
                return
            self._index_written, self._index_due, self._finished = time.monotonic(), False, final
        root = self.directory()
        if root is None:
            return
        try:
            with self._lock:
                rows = [dict(r, kept=r["window"] in self.kept) for r in self._rows.rows()]
                compacted = self._rows.compacted_dict()
            index: dict[str, Any] = {"spec": self.spec.describe(), "windows": rows}
            if compacted:
                index["compacted"] = compacted
            # the fold first: a run killed between the two writes then never lists a window in
            # windows.json that its summary.json does not hold yet
            folded = self.folded(None, end_ns=time.time_ns(), start_ns=self._rows.first_start_ns)
            if folded is not None:
                data = folded.summary.to_dict() if folded.summary is not None else {}
                if folded.diagnosis is not None:
                    data["diagnosis"] = folded.diagnosis.to_dict()
                write_json(root / "summary.json", data)
            write_json(root / WINDOWS_INDEX, index)
        except Exception as exc:  # noqa: BLE001
            _stats.contain("writing the windows index", exc, name=self.name, exc_info=False)

    # -- the run -----------------------------------------------------------------------------------
    def _write_put_off(self) -> None:  # a timer's thread
        try:
            _worker.output_worker().submit(lambda: self._write_index(put_off=True))
        except Exception as exc:  # noqa: BLE001 - never an error in a timer thread
            _stats.contain("writing the windows index", exc, name=self.name, exc_info=False)

    def write_final_index(self) -> None:
        """The run ended: its windows.json, whatever was written last (output worker)."""
        self._write_index(final=True)

    def folded(self, stopped: str | None, *, start_ns: int, end_ns: int) -> Analysis | None:
        """The run's analysis: every window analysed so far folded into one, with its coverage."""
        from ..analysis.fold import fold_diagnoses

        with self._lock:
            summary, running = self._summary, self._diagnosis
            memory, warnings, device = self._memory, list(self._warnings), self._device
            # decided as each window was analysed (the writes may still be queued)
            events, kept, windows = self.events, sorted({1, *self._kept_scores}), self._rows.count
            ended_by, lost, recorded_steps = dict(self._rows.ended_by), self._rows.lost, self._rows.steps
        if summary is None:
            return None
        rec = self.recording
        timed = rec.steps.timed()
        # the run's steps (every step timed, recorded or not) on the running fold: one part, no re-fold
        diagnosis = fold_diagnoses(
            [running], timed=timed if timed.count else None, window_indexes=[0], summary=summary
        ).as_saved()  # as summary.json will hold it (Diagnosis.as_saved)
        added_ns, basis = rec.overhead.measured()
        coverage = Coverage(
            wall_ns=max(end_ns - start_ns, 0),
            recorded_ns=rec.recorded_total_ns(time.monotonic_ns()) if stopped is None else rec.recorded_ns,
            events=events,
            windows=windows,
            stopped=stopped,
            max_events=rec.max_events,
            budget_source=rec.budget_source,
            steps=timed.count,
            window_spec=self.spec.describe(),
            kept=tuple(kept),
            ended_by=ended_by,
            lost=lost,
            recorded_steps=recorded_steps,
            overhead_ns=added_ns,
            overhead_basis=basis,
        )
        summary = replace(summary, notes=(*summary.notes, "profiled in windows: " + coverage.line()))
        from ..result import DeviceFacts

        return Analysis(
            trace=None,
            summary=summary,
            diagnosis=diagnosis,
            memory=memory,
            device=device if device is not None else DeviceFacts(),
            warnings=tuple(warnings),
            coverage=coverage,
        )


class _Rows:
    """windows.json's rows in bounded memory: the first and the latest ``KEEP`` windows, and every
    kept or lost one, each in full; the windows between are added into one ``compacted`` entry
    (how many, their events, steps, what ended them). Counts over every window are exact."""

    KEEP = 100

    def __init__(self) -> None:
        self._head: list[dict[str, Any]] = []
        self._tail: list[dict[str, Any]] = []
        self._pinned: dict[int, dict[str, Any]] = {}  # kept or lost windows, by number
        self._compacted: dict[str, Any] = {}
        self.count = 0
        self.lost = 0
        self.steps = 0
        self.ended_by: Counter[str] = Counter()
        self.first_start_ns = 0

    def append(self, row: dict[str, Any]) -> None:
        self.count += 1
        self.lost += 1 if row.get("lost") else 0
        self.steps += int(row.get("steps") or 0)
        self.ended_by[str(row.get("ended_by"))] += 1
        if not self._head:
            self.first_start_ns = int(row.get("start_ns") or 0)
        if row.get("lost"):
            self._pinned[int(row["window"])] = row
        if len(self._head) < self.KEEP:
            self._head.append(row)
            return
        self._tail.append(row)
        if len(self._tail) > self.KEEP:
            self._compact(self._tail.pop(0))

    def pin(self, window: int) -> None:
        """Keep window ``window``'s row in full (its trace is kept)."""
        for row in self._head + self._tail:
            if row["window"] == window:
                self._pinned[window] = row

    def unpin(self, window: int) -> None:
        row = self._pinned.get(window)
        if row is not None and not row.get("lost"):
            del self._pinned[window]

    def _compact(self, row: dict[str, Any]) -> None:
        c = self._compacted
        c["windows"] = c.get("windows", 0) + 1
        c["first"] = min(c.get("first", row["window"]), row["window"])
        c["last"] = max(c.get("last", row["window"]), row["window"])
        c["events"] = c.get("events", 0) + int(row.get("events") or 0)
        c["steps"] = c.get("steps", 0) + int(row.get("steps") or 0)
        ended = c.setdefault("ended_by", {})
        ended[str(row.get("ended_by"))] = ended.get(str(row.get("ended_by")), 0) + 1

    def rows(self) -> list[dict[str, Any]]:
        listed = {int(r["window"]): r for r in self._head + self._tail}
        listed.update(self._pinned)
        return [listed[k] for k in sorted(listed)]

    def compacted_dict(self) -> dict[str, Any]:
        return dict(self._compacted)


def _score(analysis: Analysis) -> float:
    """How slow a window was: its mean step time (µs), else its busy time."""
    d = analysis.diagnosis
    if d is None:
        return 0.0
    if d.steps is not None and d.steps.per_step:
        return sum(s.duration_us for s in d.steps.per_step) / len(d.steps.per_step)
    return d.device_busy_us


_libc: Any = None
_rss_after_trim: int | None = None
#: resident growth since the last give-back that makes the next one worth its cost
TRIM_AFTER_GROWTH = 32 * 2**20


def _give_back_memory() -> None:
    """Return a freed window's pages to the OS (glibc keeps them otherwise, and the next
    window's differently sized blocks would grow the process): bounded RSS, not only bounded use.

    Only once the process has grown by TRIM_AFTER_GROWTH since the last time: a full collection
    walks the whole heap holding the GIL (tens to hundreds of ms with torch loaded), which a
    small window does not free enough to pay for -- one-step windows spent most of their cycle
    here, and the program stood still meanwhile."""
    global _libc, _rss_after_trim
    from .session import process_rss

    rss = process_rss()
    if rss is not None and _rss_after_trim is not None and rss - _rss_after_trim < TRIM_AFTER_GROWTH:
        return
    if _libc is None:
        try:
            import ctypes
            import ctypes.util

            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if hasattr(lib, "malloc_trim") else False
        except OSError:
            _libc = False
    if _libc:
        import gc

        gc.collect()
        _libc.malloc_trim(0)
    _rss_after_trim = process_rss()


@contextmanager
def collections_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a window is read, analysed or written.

    Reading a window makes hundreds of thousands of objects: each allocation burst triggers a
    full collection that walks the whole process's heap (the program's model and torch's
    objects too) holding the GIL -- 125-155 ms each, several per window, during which the
    program's thread stood still (a 4-layer MLP under 250,000-event windows). One collection
    after the window costs the program one such pause, not several. Process-wide, restored in
    ``finally``; a program that turned the collector off keeps it off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
