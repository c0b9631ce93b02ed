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
    return {"warnings": run.warnings, "ntff": run.manifest["neuron"]["ntff_files"]}


def scenario_dropped_events(work: Path) -> dict:
    x, w = inputs()
    opts = ns.NeuronOptions(max_events_per_nc=3)
    with ns.profile_neuron(name="dropped", output_dir=work / "runs", neuron=opts) as run:
        for _ in range(3):
            rmsnorm_naive(x, w)
    assert run.wait(60)
    return {"warnings": run.warnings}


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


if __name__ == "__main__":
    name, work = sys.argv[1], Path(sys.argv[2])
    result = globals()[f"scenario_{name}"](work)
    print(json.dumps(result, default=str))
