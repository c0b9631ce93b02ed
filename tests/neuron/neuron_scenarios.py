"""neuronscope's whole Neuron path against the emulated device, one scenario per process.

    python neuron_scenarios.py <scenario> <work_dir>   -> prints one JSON object (last line)

The emulator (neuronscope.testing) enters PyTorch exactly as TorchNeuron does; renaming
PrivateUse1 is irreversible, hence a fresh interpreter per scenario.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neuronscope.testing import install_emulated_neuron

emu = install_emulated_neuron()

import torch  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch_neuronx.profiling import NeuronConfig, ProfileMode  # noqa: E402

import neuronscope as ns  # noqa: E402


def rmsnorm_naive(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inputs():
    torch.manual_seed(0)
    return torch.randn(16, 128), torch.randn(128)


def spans_setup():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ns.configure(tracer_provider=provider)
    return exporter


def span_dicts(exporter):
    out = []
    for s in exporter.get_finished_spans():
        out.append(
            {
                "name": s.name,
                "id": s.context.span_id,
                "parent": s.parent.span_id if s.parent else None,
                "start": s.start_time,
                "end": s.end_time,
                "attributes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.attributes.items()},
                "links": [link.context.span_id for link in s.links],
            }
        )
    return out


def scenario_full_path(work: Path) -> dict:
    exporter = spans_setup()
    x, w = inputs()
    with ns.profile_neuron(name="rmsnorm", output_dir=work / "runs") as run:
        with ns.region("forward"):
            for _ in range(3):
                rmsnorm_naive(x, w)
    ns.flush(60)
    # The same workload under plain torch.profiler with TorchNeuron's documented setup.
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=str(work / "plain"))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg) as prof:
        with torch.profiler.record_function("forward"):
            for _ in range(3):
                rmsnorm_naive(x, w)
    ka = {e.key: {"count": e.count, "self_device_us": e.self_device_time_total} for e in prof.key_averages()}
    return {
        "device": run.device,
        "status": run.status,
        "rows": [r.__dict__ for r in run.summary.rows],
        "regions": list(run.summary.regions),
        "table": str(run.summary),
        "path": str(run.path),
        "files": sorted(str(p.relative_to(run.path)) for p in run.path.rglob("*") if p.is_file()),
        "manifest": json.loads((run.path / "manifest.json").read_text()),
        "key_averages": ka,
        "spans": span_dicts(exporter),
        "warnings": run.warnings,
        "notes": list(run.summary.notes),
        "diagnosis": run.diagnosis.to_dict(),
        "kernels": [[e.start_ns, e.duration_ns] for e in run.trace if e.kind == ns.EventKind.DEVICE],
    }


def _fake_explorer(work: Path, **summary_overrides: object) -> None:
    """A real ``neuron-explorer`` subprocess on PATH: neuronscope.testing's stand-in."""
    import os

    from neuronscope.testing import install_fake_neuron_explorer

    exe = install_fake_neuron_explorer(work / "bin")
    os.environ["PATH"] = f"{exe.parent}{os.pathsep}{os.environ['PATH']}"
    os.environ["NEURONSCOPE_FAKE_EXPLORER_SUMMARY"] = json.dumps(summary_overrides)


def scenario_explorer_metrics(work: Path) -> dict:
    """Every mode on, the fake Explorer on PATH, a profile whose spill reloads are 30% of HBM reads."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    _fake_explorer(work, spill_reload_bytes=300, hbm_read_bytes=1000)
    exporter = spans_setup()
    reader = InMemoryMetricReader()
    ns.configure(meter_provider=MeterProvider(metric_readers=[reader]))
    x, w = inputs()
    opts = ns.NeuronOptions(modes=("device", "runtime", "cpu_util", "host_memory"))
    with ns.profile_neuron(name="explored", output_dir=work / "runs", neuron=opts) as run:
        for _ in range(3):
            rmsnorm_naive(x, w)
    ns.flush(120)
    html = work / "report.html"
    from neuronscope.report.html import write_html

    write_html(run, html)
    metrics = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                metrics[m.name] = [
                    {"attributes": dict(dp.attributes), "value": getattr(dp, "value", None), "count": getattr(dp, "count", None)}
                    for dp in m.data.data_points
                ]
    return {
        "manifest": json.loads((run.path / "manifest.json").read_text()),
        "notes": list(run.summary.notes),
        "warnings": run.warnings,
        "table": str(run.summary),
        "spans": span_dicts(exporter),
        "html": html.read_text(),
        "metrics": metrics,
        "files": sorted(str(p.relative_to(run.path)) for p in run.path.rglob("*") if p.is_file()),
    }


def scenario_model_layout_idle_core(work: Path) -> dict:
    emu.layout = "model"
    x, w = inputs()
    opts = ns.NeuronOptions(capture_enabled_for_nc="0,1")
    with ns.profile_neuron(name="model", output_dir=work / "runs", neuron=opts) as run:
        rmsnorm_naive(x, w)
    assert run.wait(60)  # manifest and warnings are filled in by background processing
    return {"manifest": run.manifest, "warnings": run.warnings, "table": str(run.summary), "path": str(run.path)}


def scenario_session_idle_core(work: Path) -> dict:
    x, w = inputs()
    opts = ns.NeuronOptions(capture_enabled_for_nc="0,1")
    with ns.profile_neuron(name="idle", output_dir=work / "runs", neuron=opts) as run:
        rmsnorm_naive(x, w)
    assert run.wait(60)
    return {"warnings": run.warnings, "notes": list(run.summary.notes), "ntff": run.manifest["neuron"]["ntff_files"]}


def scenario_dropped_events(work: Path) -> dict:
    import sys

    x, w = inputs()
    out = {}
    for watch in (True, False):
        opts = ns.NeuronOptions(max_events_per_nc=3, watch_stderr=watch)
        print(f"user line before {watch}", file=sys.stderr, flush=True)
        with ns.profile_neuron(name="dropped", output_dir=work / "runs", neuron=opts) as run:
            for _ in range(3):
                rmsnorm_naive(x, w)
            print(f"user line inside {watch}", file=sys.stderr, flush=True)
        print(f"user line after {watch}", file=sys.stderr, flush=True)
        assert run.wait(60)
        out[str(watch)] = {
            "warnings": run.warnings,
            "dropped": run.manifest["neuron"].get("dropped_events"),
            "files": sorted(p.name for p in run.path.rglob("*") if p.is_file()),
        }
    return out


def scenario_all_ntffs_empty(work: Path) -> dict:
    x, w = inputs()
    opts = ns.NeuronOptions(capture_enabled_for_nc="1")  # the model runs on core 0 only
    with ns.profile_neuron(name="empty", output_dir=work / "runs", neuron=opts) as run:
        rmsnorm_naive(x, w)
    assert run.wait(60)
    return {"warnings": run.warnings, "notes": list(run.summary.notes), "ntff": run.manifest["neuron"]["ntff_files"]}


def scenario_artifacts_cli(work: Path) -> dict:
    """``neuronscope artifacts`` (text and --json) on runs with an idle core, the model layout,
    and dropped events."""
    from click.testing import CliRunner

    from neuronscope.cli import cli

    x, w = inputs()
    runs = {}
    for name, layout, opts in (
        ("idle", "session", ns.NeuronOptions(capture_enabled_for_nc="0,1")),
        ("model", "model", ns.NeuronOptions(capture_enabled_for_nc="0,1")),
        ("dropped", "session", ns.NeuronOptions(max_events_per_nc=3)),
    ):
        emu.layout = layout
        with ns.profile_neuron(name=name, output_dir=work / "runs", neuron=opts) as run:
            for _ in range(3):
                rmsnorm_naive(x, w)
        assert run.wait(60)
        runner = CliRunner()
        as_json = runner.invoke(cli, ["artifacts", str(run.path), "--json"])
        text = runner.invoke(cli, ["artifacts", str(run.path)])
        assert as_json.exit_code == 0 and text.exit_code == 0, (as_json.output, text.output)
        runs[name] = {"json": json.loads(as_json.stdout), "text": text.stdout, "warnings": run.warnings,
                      "notes": list(run.summary.notes), "path": str(run.path)}
    return runs


def scenario_options_reach_neuronconfig(work: Path) -> dict:
    """NeuronOptions -> NeuronConfig kwargs and the runtime's environment, then restored."""
    import os

    import torch_neuronx.profiling as tp

    seen: list[dict] = []
    real_init = tp.NeuronConfig.__init__

    def spy(self, **kwargs):
        seen.append({k: str(v) for k, v in kwargs.items()})
        real_init(self, **kwargs)

    tp.NeuronConfig.__init__ = spy
    emu.layout = "model"
    x, w = inputs()
    runs = {}
    os.environ.pop("TORCH_NEURONX_NEFF_CACHE_DIR", None)
    opts = ns.NeuronOptions(num_warmup=1, precache_node_info=False)
    with ns.profile_neuron(name="warm", output_dir=work / "runs", neuron=opts) as run:
        rmsnorm_naive(x, w)  # aten::mul and aten::copy_ run twice (same NEFF), every other op once
        env_inside = os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP")
    run.wait(60)
    runs["default"] = {"manifest": run.manifest["neuron"], "warnings": run.warnings, "notes": list(run.summary.notes),
                       "raw": str(run.path / "neuron"), "env_inside": env_inside,
                       "env_after": os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP")}
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(work / "neff-cache")
    with ns.profile_neuron(name="env", output_dir=work / "runs") as run:
        rmsnorm_naive(x, w)
    run.wait(60)
    runs["env"] = {"manifest": run.manifest["neuron"]}
    with ns.profile_neuron(name="off", output_dir=work / "runs", neuron=ns.NeuronOptions(neff_cache_dir="")) as run:
        rmsnorm_naive(x, w)
    run.wait(60)
    runs["off"] = {"manifest": run.manifest["neuron"]}
    return {"kwargs": seen, "runs": runs}


def scenario_warmup_decorator(work: Path) -> dict:
    exporter = spans_setup()
    x, w = inputs()

    @ns.profile_neuron(name="infer", output_dir=work / "runs", warmup=2)
    def infer(a):
        return rmsnorm_naive(a, w)

    @ns.profile_neuron(name="cold", output_dir=work / "runs")
    def cold(a):
        return rmsnorm_naive(a, w)

    for _ in range(3):
        infer(x)
    ns.flush(60)
    warm = ns.last_run()
    cold(x)
    ns.flush(60)
    cold_run = ns.last_run()
    return {
        "stats": ns.stats(),
        "warm_warnings": warm.warnings,
        "cold_warnings": cold_run.warnings,
        "cold_compilation": cold_run.manifest["neuron"].get("compilation_suspected", False),
        "cold_span_flag": next(
            s for s in span_dicts(exporter) if s["name"] == "cold"
        )["attributes"].get("neuronscope.compilation_suspected", False),
    }


def scenario_env_capture_refused(work: Path) -> dict:
    import os

    os.environ["NEURON_RT_INSPECT_ENABLE"] = "1"
    try:
        ns.profile_neuron(device="neuron")
    except ns.ConfigurationError as exc:
        return {"error": str(exc)}
    return {"error": None}


def scenario_cpu_only_sees_neuron_as_auto(work: Path) -> dict:
    from neuronscope.capture.devices import select_backend

    return {"auto": select_backend("auto").name, "explicit": select_backend("neuron").name}


def scenario_memory(work: Path) -> dict:
    """memory=True on Neuron: the device allocator's totals, then an OOM with the runtime's table."""
    import os

    from neuronscope.capture.devices.neuron_memory import parse_neuron_mem_table

    MiB = 1 << 20
    os.environ["NEURONSCOPE_NEURON_MEM_TABLE_DIR"] = str(work)
    x, w = inputs()
    emu.allocate(64 * MiB)  # weights, before the profile
    with ns.profile_neuron(name="mem", output_dir=work / "runs", memory=True) as run:
        emu.allocate(256 * MiB)  # activations
        rmsnorm_naive(x, w)
        emu.free(128 * MiB)
    run.wait(60)
    raised = None
    try:
        with ns.profile_neuron(name="oom", output_dir=work / "runs", memory=True) as oom_run:
            emu.allocate(512 * MiB)
            rmsnorm_naive(x, w)
            raise emu.out_of_memory(4 << 30, categories={"Model Code": 96 * MiB, "Tensors": 704 * MiB, "Shared Scratchpad": 512 * MiB})
    except RuntimeError as exc:
        raised = str(exc)
    oom_run.wait(60)
    table_files = sorted(p.name for p in work.glob("neuron_mem_table_device_*_hbm_*.log"))
    return {
        "device": run.device,
        "memory": run.memory.to_dict(),
        "memory_line": run.diagnosis.memory_line,
        "summary_memory": json.loads((run.path / "summary.json").read_text())["memory"],
        "oom_status": oom_run.status,
        "oom_error": oom_run.error,
        "raised": raised,
        "oom_memory": oom_run.memory.to_dict(),
        "oom_findings": [f.to_dict() for f in oom_run.diagnosis.findings],
        "table_files": table_files,
        "table_parsed": parse_neuron_mem_table((work / table_files[0]).read_text()) if table_files else None,
    }


if __name__ == "__main__":
    name, work = sys.argv[1], Path(sys.argv[2])
    result = globals()[f"scenario_{name}"](work)
    print(json.dumps(result, default=str))
