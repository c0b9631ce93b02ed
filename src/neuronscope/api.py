"""Module-level functions of the public API."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _config, _env
from ._paths import resolve_profile
from .errors import ConfigurationError, TraceLoadError
from ._run import Run
from .capture import wiring as _wiring  # the OpenTelemetry sink, Prometheus from the env, the exit flush
from .capture.processing import last_run as _last_run
from .sinks import otel as _otel
from .sinks.run_format import load_run as _load_run
from .trace.chrome import load_trace as _load_trace
from .trace.model import Trace

if TYPE_CHECKING:
    from .analysis.diagnosis import Diagnosis
    from .analysis.memory_model import MemoryReport
    from .analysis.ranks import RankComparison

#: what the analysis functions accept: a run directory or trace file, a Run, a Trace
ProfileSource = str | os.PathLike[str] | Run | Trace

__all__ = [
    "compare_ranks",
    "configure",
    "diagnose",
    "diagnose_memory",
    "export_run",
    "flush",
    "last_run",
    "load_run",
    "load_trace",
    "load_traces",
]

log = logging.getLogger("neuronscope")

_UNSET: Any = object()


def configure(
    *,
    enabled: bool = _UNSET,
    output_dir: str | os.PathLike[str] | None = _UNSET,
    tracer_provider: Any = _UNSET,
    meter_provider: Any = _UNSET,
    service_name: str | None = _UNSET,
    op_spans: str = _UNSET,
    max_spans: int = _UNSET,
    exporter: str = _UNSET,
    otlp_endpoint: str | None = _UNSET,
    max_runs: int | None = _UNSET,
    max_bytes: int | None = _UNSET,
    max_pending_bytes: int | None = _UNSET,
    worker_nice: int | None = _UNSET,
    prometheus_port: int | None = _UNSET,
    metrics_top_ops: int = _UNSET,
    keep_usdt_lines: bool | None = _UNSET,
    control: bool = _UNSET,
    device_limits: Any = _UNSET,
) -> None:
    """Set process-wide options. Only the arguments given change; all are validated first.

    ``enabled=False`` turns every profile and region into a plain call (as
    ``NEURONSCOPE_DISABLED=1`` does). ``output_dir``: where run directories go (default
    ``$NEURONSCOPE_OUTPUT_DIR`` or ``./neuronscope-runs``).

    OpenTelemetry: ``tracer_provider`` / ``meter_provider`` are used as given; otherwise the
    application's global providers; otherwise, when ``exporter="otlp"`` (or ``"auto"`` with
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` set) or ``"console"``, neuronscope builds its own (never
    global). ``op_spans``: ``"summary"`` (default), ``"events"`` (capped by ``max_spans``) or
    ``"none"``. ``otlp_endpoint`` overrides ``OTEL_EXPORTER_OTLP_ENDPOINT`` for our exporter.

    Metrics: ``prometheus_port`` serves them for Prometheus to scrape at
    ``http://localhost:PORT/metrics`` (``$NEURONSCOPE_PROMETHEUS_PORT``; host from
    ``$OTEL_EXPORTER_PROMETHEUS_HOST``; 0 picks a free port; None stops it; needs
    ``pip install "neuronscope[prometheus]"``), in addition to the providers above. A port in
    use raises :class:`ConfigurationError`. ``metrics_top_ops`` (default 20): op names per
    profile that get their own series, the rest is recorded as ``other``.

    Retention: at most ``max_runs`` run directories (default 100, ``$NEURONSCOPE_MAX_RUNS``)
    holding at most ``max_bytes`` (default 10 GiB, ``$NEURONSCOPE_MAX_BYTES``) stay in the
    output dir; the oldest go first, a run being written never; 0 means no limit.

    Backpressure: ``max_pending_bytes`` (default 256 MiB, ``$NEURONSCOPE_MAX_PENDING_BYTES``)
    bounds the memory that profiles waiting to be written may hold. Above it, new samples
    (profiles with ``every=``, ``sample=``, ``sampler=``, ``max_per_minute=`` or ``warmup=``)
    are skipped before profiling starts (``ns.stats()["skipped_backpressure"]``), and a
    profile without sampling options waits for earlier ones to be written instead
    (``ns.stats()["backpressure_waits"]``); a profile that started is always processed.
    0 means no limit.

    Background priority: the windows of a profile in windows (``neuronscope run``) are analysed
    on a thread of their own while the program runs on, at a lower priority than the program:
    ``worker_nice`` (default 5, ``$NEURONSCOPE_WORKER_NICE``) is how far its nice value sits
    above the thread that started it, so that when the program and the analysis both want a
    core, the program gets it (Linux; read when the thread starts; 0 keeps the program's
    priority). A long run then records fewer windows and slows the program less
    (docs/long-runs.md, "What windows cost").

    Log noise: torch's profiler (Kineto) writes ``USDT: ... profiler_start`` / ``profiler_stop``
    to stderr at every start and stop; neuronscope drops exactly those lines around its own
    starts and stops. ``keep_usdt_lines=True`` (or ``$NEURONSCOPE_KEEP_USDT=1`` when None, the
    default) keeps them (see docs/production.md).
    Live profiling: ``control=False`` (or ``NEURONSCOPE_CONTROL=0``) keeps this process from
    opening the local control channel that ``neuronscope arm PID`` uses (see
    docs/production.md, "Profile a live service"); ``ns.arm()`` works either way.

    Roofline: ``device_limits`` are the roofs every op is measured against (docs/roofline.md):
    a device name from the table (``"NVIDIA H100 SXM5"``), a :class:`DeviceLimits`, or a dict
    ``{"memory_bandwidth": bytes/s, "peak_flops": {"matrix/bf16": FLOP/s, "vector/fp32": ...}}``
    (optionally ``"cache_levels": [["L2", bytes, bytes/s], ...]``, fastest first: a CPU's).
    None (the default) uses the device's own: a CPU measured once per host (cached), a GPU or
    NeuronCore from the vendor table.
    """
    given = {key: value for key, value in locals().items() if value is not _UNSET}  # the arguments given
    _env.check()  # every NEURONSCOPE_* variable: a typo fails here, where it can be fixed
    changes = _config_changes(given)
    otel_changes = {setting: given[key] for key, setting in _OTEL_ARGS if key in given}
    changes.update(_other_changes(given.get("control", _UNSET), given.get("device_limits", _UNSET)))
    _apply(changes, otel_changes)


def _bad_limit(value: Any) -> bool:
    """Not a retention / backpressure limit: an int >= 0, or None."""
    return value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0)


#: configure()'s arguments that are _config settings: (name, is it bad, what to use instead), checked in this order
_CONFIG_ARGS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("enabled", lambda v: not isinstance(v, bool), "use True or False"),
    ("output_dir", lambda v: v is not None and not isinstance(v, (str, os.PathLike)), "use a path or None"),
    ("max_runs", _bad_limit, "use an int >= 0 (0 = no limit) or None"),
    ("max_bytes", _bad_limit, "use an int >= 0 (0 = no limit) or None"),
    ("max_pending_bytes", _bad_limit, "use an int >= 0 (0 = no limit) or None"),
    (
        "worker_nice",
        lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 19),
        "use an int 0-19 (0 = the program's priority) or None",
    ),
    ("keep_usdt_lines", lambda v: v is not None and not isinstance(v, bool), "use True, False or None"),
)
#: configure()'s arguments that are OpenTelemetry settings: (argument, configure_otel's name)
_OTEL_ARGS = (
    ("tracer_provider", "tracer_provider"),
    ("meter_provider", "meter_provider"),
    ("service_name", "service_name"),
    ("op_spans", "op_spans"),
    ("max_spans", "max_spans"),
    ("exporter", "exporter"),
    ("otlp_endpoint", "endpoint"),
    ("prometheus_port", "prometheus_port"),
    ("metrics_top_ops", "metrics_top_ops"),
)


def _config_changes(given: dict[str, Any]) -> dict[str, Any]:
    """The _config settings among the arguments given, each checked (the first bad one raises)."""
    changes: dict[str, Any] = {}
    for key, bad, use in _CONFIG_ARGS:
        if key in given:
            value = given[key]
            if bad(value):
                raise ConfigurationError(f"configure({key}={value!r}): {use}")
            changes[key] = Path(value) if key == "output_dir" and value is not None else value
    return changes


def _apply(changes: dict[str, Any], otel_changes: dict[str, Any]) -> None:
    """Apply the checked changes: OpenTelemetry's first, then the process settings."""
    if otel_changes:
        _otel.configure_otel(**otel_changes)
    if changes:
        _config.update(**changes)
    if "control" in changes:
        from .capture import control as _control

        _control.settings_changed()


def _other_changes(control: Any, device_limits: Any) -> dict[str, Any]:
    """The settings that are checked or converted on their own: control, device_limits."""
    changes: dict[str, Any] = {}
    if control is not _UNSET:
        if not isinstance(control, bool):
            raise ConfigurationError(f"configure(control={control!r}): use True or False")
        changes["control"] = control
    if device_limits is not _UNSET:
        from .analysis.roofs import limits_from_user

        changes["device_limits"] = None if device_limits is None else limits_from_user(device_limits)
    return changes


def flush(timeout: float | None = 30.0) -> bool:
    """Wait until every finished profile has been processed and its telemetry exported.

    Returns False if ``timeout`` seconds passed first, or if an export of neuronscope's own
    OpenTelemetry providers failed since the last flush (something was not delivered: a dead
    endpoint, an error answer, a signal the endpoint does not take). Never raises.
    """
    return _wiring.flush(timeout)


def export_run(path: str | os.PathLike[str], *, op_spans: str | None = None) -> str | None:
    """Send a saved run directory's spans and metrics now, with their original timestamps.

    For profiles captured where no collector was reachable. Returns the trace id (hex), or
    None when no OpenTelemetry provider is configured (see :func:`configure`).
    """
    from .sinks.otel.providers import resolve_providers

    run = _load_run(path)
    result = run.result
    assert result is not None and result.analysis is not None  # load_run always gives both
    settings = _otel.settings()
    mode = op_spans or settings.op_spans
    if mode == "events" or (mode == "summary" and run.device != "cpu"):
        # the events, or the device lanes: the saved trace, loaded now
        result = replace(result, analysis=replace(result.analysis, trace=run.trace))
    from .sinks.otel.service import note_replayed_program

    note_replayed_program(run.manifest.get("program"))  # providers built now: named after the recorded program
    tracer_provider, meter_provider = resolve_providers(settings)
    if tracer_provider is None:
        return None
    from ._version import __version__

    tracer = tracer_provider.get_tracer("neuronscope", __version__)
    trace_id, _, _ = _otel.emit_rank_run(result, tracer, mode, settings.max_spans, None)  # a rank's run: its step's trace
    if meter_provider is not None:
        from .sinks.otel.export import record_metrics

        record_metrics(result, meter_provider)
    _otel.flush_providers(30)
    return trace_id


def last_run() -> Run | None:
    """The most recent completed :class:`Run` in this process, or None."""
    return _last_run()


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a Kineto ``trace.json`` / ``.json.gz`` (or a run directory, or a directory holding
    one trace) into a :class:`Trace`."""
    return _load_trace(path)


def _open_profile(path: str | os.PathLike[str]) -> Run | Trace:
    """The one profile a path names, as ``neuronscope show`` reads it: a run directory as its
    :class:`Run`, a trace file (or the one a directory holds) as its :class:`Trace`."""
    where = resolve_profile(path)
    return _load_run(where.path) if where.kind == "run" else _load_trace(where.path)


def diagnose(source: ProfileSource, *, gap_threshold_us: float | None = None) -> Diagnosis:
    """Why a run is slow: a :class:`~neuronscope.Diagnosis` of a run directory, any Kineto
    ``trace.json(.gz)`` (or a directory holding one), a :class:`Run` or a :class:`Trace`.

        d = ns.diagnose("neuronscope-runs/train-.../")
        print(d)                   # the verdict lines
        d.bound_by, d.device_busy_pct, d.findings[0].message

    A run's own diagnosis (computed when it was profiled, saved in summary.json) is returned
    as is; ``gap_threshold_us`` (default 50) recomputes it from the trace.
    """
    from .analysis.analyse import AnalyseOptions, analyse, memory_input_of
    from .analysis.diagnosis import DEFAULT_GAP_THRESHOLD_US

    threshold = DEFAULT_GAP_THRESHOLD_US if gap_threshold_us is None else float(gap_threshold_us)
    if isinstance(gap_threshold_us, bool) or threshold <= 0:
        raise ConfigurationError(f"diagnose(gap_threshold_us={gap_threshold_us!r}): use a positive number of microseconds")
    if isinstance(source, (str, os.PathLike)):
        source = _open_profile(source)
    if isinstance(source, Run):
        if gap_threshold_us is None and source.diagnosis is not None:
            return source.diagnosis
        trace, options = _saved_run_input(source, "diagnose")
        options = replace(options, gap_threshold_us=threshold)
    elif isinstance(source, Trace):
        # a trace on its own: what it says of itself (its metadata, its [memory] records), as reports read it
        trace = source
        options = AnalyseOptions(facts=dict(trace.metadata), memory=memory_input_of(trace), gap_threshold_us=threshold)
    else:
        raise ConfigurationError(f"diagnose() takes a run directory, a trace file, a Run or a Trace, not {type(source).__name__}")
    diagnosis = analyse(trace, options).diagnosis
    assert diagnosis is not None  # analysed without containment: a failure raised
    return diagnosis


def _saved_run_input(run: Run, what: str) -> tuple[Trace, Any]:
    """A run's trace and what the analysis is told of it (its summary and manifest), to analyse
    it again; :class:`TraceLoadError` when no trace was saved with it."""
    from .analysis.analyse import AnalyseOptions

    trace = run.trace
    if trace is None:
        raise TraceLoadError(f"{run.path or run.name}: no trace saved with this run; nothing to {what}")
    return trace, AnalyseOptions(summary=run.summary, facts=dict(run.manifest))


def diagnose_memory(source: ProfileSource) -> MemoryReport:
    """Why memory is high: a :class:`~neuronscope.MemoryReport` of a run directory, any Kineto
    ``trace.json(.gz)`` recorded with ``profile_memory=True`` (or a directory holding one), a
    :class:`Run` or a :class:`Trace`.

        m = ns.diagnose_memory("neuronscope-runs/train-.../")
        print(m)                          # the peak, who holds it, growth per step
        m.peak_bytes, m.at_peak[0].op, m.growth_per_step_bytes

    A run's own report (saved in summary.json) is returned as is. Raises
    :class:`TraceLoadError` when the trace holds no ``[memory]`` records.
    """
    from .analysis.analyse import AnalyseOptions, analyse, memory_input_of

    trace = None
    if isinstance(source, (str, os.PathLike)):
        source = _open_profile(source)
    if isinstance(source, Run):
        if source.memory is not None:
            return source.memory
        trace, where = source.trace, source.path or source.name
        options = AnalyseOptions(summary=source.summary, facts=dict(source.manifest))
    elif isinstance(source, Trace):
        trace, where = source, "the trace"
        options = AnalyseOptions(facts=dict(trace.metadata))
    else:
        raise ConfigurationError(
            f"diagnose_memory() takes a run directory, a trace file, a Run or a Trace, not {type(source).__name__}"
        )
    given = memory_input_of(trace) if trace is not None else None
    if trace is None or given is None:
        raise TraceLoadError(
            f"{where}: no [memory] records in this trace; profile with profile_neuron(memory=True) "
            "(or torch.profiler.profile(profile_memory=True)) to record them"
        )
    report = analyse(trace, replace(options, memory=given)).memory
    assert report is not None  # analysed without containment: a failure raised
    return report


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a saved run directory as a completed :class:`Run`."""
    run: Run = _load_run(path)
    return run


def compare_ranks(
    paths: str | os.PathLike[str] | list[str | os.PathLike[str]],
    *,
    name: str | None = None,
    executor: Any = None,
    skip_bad: bool = False,
) -> RankComparison:
    """The ranks of a torchrun job side by side: a :class:`~neuronscope.analysis.ranks.RankComparison`.

        c = ns.compare_ranks("neuronscope-runs/127.0.0.1_29500")   # the job directory
        print(c)                     # the straggler (or none), the clock skew, a table per rank
        c.straggler.rank, c.straggler.cause, c.rank(0).collective_wait_us

    ``paths``: a job directory (``<output_dir>/<job id>``), an output directory holding one
    job, run directories of every rank, or one Kineto trace per rank. ``name``: which profile
    to compare when the job has several. Per rank: step wall time, device busy %, time in
    collectives and waiting in them, where the rest went; the clock offsets estimated from the
    collectives' ends; the straggler, its lateness per step and its lead cause (see
    docs/distributed.md). Raises :class:`TraceLoadError` naming what is missing.

    ``executor``: any ``concurrent.futures.Executor`` reads the ranks in parallel — a
    ``ProcessPoolExecutor`` on this machine, or a Dask ``distributed.Client`` / Ray executor
    on a cluster (docs/distributed.md); each worker gets a path and returns the rank's
    profile, never the trace. ``skip_bad=True``: a truncated or corrupt file is left out
    with a warning naming it (``c.warnings``) instead of failing the comparison.
    """
    from .analysis.ranks import compare_rank_runs
    from .sinks.jobdir import read_rank_runs

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise TraceLoadError("compare_ranks() needs at least one path: a job directory or the runs of every rank")
    runs, warnings = read_rank_runs([Path(p) for p in paths], executor=executor, skip_bad=skip_bad)
    return compare_rank_runs(runs, name=name, warnings=warnings, source=", ".join(map(str, paths)))


def load_traces(paths: Any, *, executor: Any = None) -> list[Trace]:
    """Load several Kineto traces (``load_trace`` each), in parallel on ``executor`` (any
    ``concurrent.futures.Executor``; None: one after another), in the order given.

    The traces come back to this process: for a job's worth of large traces on a cluster,
    ``compare_ranks(paths, executor=client)`` ships only each rank's small profile instead.
    """
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if executor is None:
        return [_load_trace(p) for p in paths]
    return [f.result() for f in [executor.submit(_load_trace, str(p)) for p in paths]]
