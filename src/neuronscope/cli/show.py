"""``neuronscope show PATH``: the per-op table of one run directory or trace file."""

from __future__ import annotations

from typing import Any

import click

from ._common import JSON_SCHEMA_VERSION, emit_json, load_source, op_json, sort_option, source_json, summary_ops, top_option
from ._group import cli


@cli.command("show")
@click.argument("path", metavar="PATH")
@top_option(20)
@sort_option
@click.option("--by-region", "-r", is_flag=True, help="Add a table of regions and each region's own op table.")
@click.option(
    "--roofline",
    is_flag=True,
    help="Each op against the device's roofs (needs a profile with record_shapes=True): % of the roof, time at stake.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema below) instead of tables.")
def show(path: str, top: int, sort: str, by_region: bool, roofline: bool, as_json: bool) -> None:
    """Show where device time went, per op, in a run directory or Kineto trace.

    PATH is a neuronscope run directory (holding manifest.json), any Kineto trace.json /
    trace.json.gz (TensorBoard, TorchNeuron), or a directory holding one such trace (e.g.
    TensorBoard's <host>_<pid>.<n>.pt.trace.json); ns.diagnose(PATH) takes the same.

    \b
    JSON output (--json), schema_version 1; times in microseconds:
      {
        "schema_version": 1,
        "source": {"label": str, "kind": "run"|"trace", "path": str|null,
                   "device": "cpu"|"cuda"|"neuron"},
        "device": str,
        "total_device_time_us": float,   # sum of self device time of all ops
        "total_cpu_time_us": float,
        "compile_time_us": float,        # self CPU time compiling (CPU profile: not device time)
        "op_count": int,                 # ops in the profile (before --top)
        "sort": str, "top": int,         # as given; top 0 = all
        "ops": [Op, ...],                # sorted by --sort, first --top
        "regions": [{"path": str, "occurrences": int, "wall_time_us": float,
                     "total_device_time_us": float, "op_count": int,
                     "ops": [Op, ...]}, ...],   # always present, by path
        "warnings": [str, ...],
        "notes": [str, ...],             # e.g. how to open raw Neuron files
        "diagnosis": Diagnosis | null,   # why it is slow (see docs/diagnosis.md)
        # only for a run captured on demand (ns.arm, neuronscope arm, a SlowCalls trigger):
        "trigger": {"kind": "slow"|"arm", "reason": str, "call_ms": float|null,
                    "threshold_ms": float|null, "key": any},
        "baseline": str|null,            # run directory of the normal call compared with
        "explanation": null | Explanation,  # as in `diff --json`, baseline = A
        "memory": MemoryReport | null,   # why memory is high (see docs/memory.md);
                                         # null unless recorded (memory=True)
        "limits": Limits | null,         # the device's roofs (docs/roofline.md)
        "roofline": {"flops_pct": float, "bytes_pct": float, "roof_pct": float,
                     "time_us": float, "coverage_pct": float,
                     "time_at_stake_us": float} | null,  # the run against its roofs
        "device_classes": Classes | null  # device time by class (docs/concepts.md)
      }
      Classes = {"by_class_us": {"gemm": float, "attention": float, ..., "other": float},
                 "by_op_us": {...},        # the part classified by the op that launched it
                 "outside_ops_us": {...},  # the part launched outside any op
                 "graph_us": float,        # launched by a CUDA/HIP graph replay
                 "total_us": float, "classified_pct": float}  # classes: most time first
      Op = {"name": str, "calls": int, "self_device_time_us": float,
            "device_time_us": float, "device_pct": float,   # share of the total, %
            "self_cpu_time_us": float, "cpu_time_us": float,
            "first_start_ns": int, "last_end_ns": int,      # Unix-epoch ns
            "compile": bool, "compile_time_us": float,      # compilation (docs/concepts.md)
            "work": Work | null, "roofline": Roofline | null}  # record_shapes=True
      Work = {"calls": int, "flops": float, "bytes": float, "time_us": float,
              "flops_by_roof": {"matrix/bf16": float, ...}, "bytes_by_roof": {...},
              "family": str, "not_counted": int, "reason": str,
              "bytes_by_call_size": {"k": [bytes, largest call's bytes], ...}}  # calls of 2^k..2^(k+1) B
      Roofline = {"calls", "flops", "bytes", "time_us", "achieved_flops_per_s",
                  "achieved_bytes_per_s", "intensity", "bound": "memory"|"compute",
                  "roof_flops_per_s", "dtype", "time_at_roof_us", "pct_of_roof",
                  "memory_level": "L1"|"L2"|"L3"|"DRAM"|"" (a CPU's cache level; "": one memory roof),
                  "roof_bytes_per_s", "largest_call_bytes",
                  "above_roof": str}  # why it is above 100 % of its roof ("" when not)
      Limits = {"name": str, "memory_bandwidth": float (bytes/s),
                "peak_flops": {"matrix/bf16": float (FLOP/s), ...}, "source", "scope",
                "cache_levels": [[name, bytes, bytes/s], ...]}  # a CPU's; absent elsewhere
    New keys may be added within a schema_version; existing ones keep their meaning.
    """
    src = load_source(path)
    if as_json:
        emit_json(show_json(src, sort, top))
        return
    _render(src, top, sort, by_region, roofline)


def _render(src: Any, top: int, sort: str, by_region: bool, roofline: bool) -> None:
    """The tables on the terminal: what triggered the capture, the diagnosis, the op table."""
    summary = src.summary
    from ..report.terminal import diagnosis_renderable, header_renderable, make_console, regions_renderable, summary_renderable

    from ..report.trigger_text import trigger_renderable

    console = make_console()
    triggered = trigger_renderable(src.manifest, labels=summary.labels)
    if triggered is not None:  # captured on demand: why, and what differs from a normal call, first
        console.print(triggered, soft_wrap=True)
        console.print()
    console.print(header_renderable(src))
    console.print()
    if src.diagnosis is not None:
        console.print(diagnosis_renderable(src.diagnosis, memory=src.memory))
        console.print()
    if roofline:
        from ..report.terminal import roofline_renderable

        console.print(roofline_renderable(summary, console, top=top or None))
        return
    console.print(summary_renderable(summary, console, top=top or None, sort=sort))
    if by_region:
        console.print()
        console.print(regions_renderable(summary, console, top=top or None, sort=sort))


def _run_roofline_json(s: Any) -> dict[str, Any] | None:
    from dataclasses import asdict

    from ..analysis.roofline import run_roofline

    run = run_roofline(s)
    return asdict(run) if run is not None else None


def show_json(src: Any, sort: str, top: int) -> dict[str, Any]:
    """The ``--json`` document of a source (also ``neuronscope run --json``'s)."""
    s = src.summary
    regions = []
    for path, region in s.regions.items():
        st = region.region_stats
        regions.append(
            {
                "path": path,
                "occurrences": st.occurrences if st else 0,
                "wall_time_us": st.wall_time_us if st else 0.0,
                "total_device_time_us": region.total_device_time_us,
                "op_count": len(region),
                "ops": [op_json(r) for r in summary_ops(region, sort, top)],
            }
        )
    data = {
        "schema_version": JSON_SCHEMA_VERSION,
        "source": source_json(src),
        "device": s.device,
        "total_device_time_us": s.total_device_time_us,
        "total_cpu_time_us": s.total_cpu_time_us,
        "compile_time_us": s.compile_time_us,
        "op_count": len(s),
        "sort": sort,
        "top": top,
        "ops": [op_json(r) for r in summary_ops(s, sort, top)],
        "regions": regions,
        "warnings": list(s.warnings),
        "notes": list(s.notes),
        "diagnosis": src.diagnosis.to_dict() if src.diagnosis is not None else None,
        "memory": src.memory.to_dict() if src.memory is not None else None,
        "limits": s.limits.to_dict() if s.limits is not None else None,
        "roofline": _run_roofline_json(s),
        "device_classes": s.device_classes.to_dict() if s.device_classes is not None else None,
    }
    if isinstance(src.manifest.get("trigger"), dict):  # captured on demand (arming, a slow call)
        data["trigger"] = src.manifest["trigger"]
        data["baseline"] = src.manifest.get("baseline")
        data["explanation"] = src.manifest.get("explanation")
    return data
