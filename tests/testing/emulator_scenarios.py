"""Emulated-Neuron profiling scenarios, one per process.

``torch.utils.rename_privateuse1_backend`` cannot be undone, so the tests run
each scenario in a fresh interpreter::

    python emulator_scenarios.py <scenario> <work_dir>

which prints one JSON object as its last stdout line. ``make-trace-data``
writes the gzipped chrome trace kept in ``tests/data`` instead::

    python tests/testing/emulator_scenarios.py make-trace-data tests/data/emulated_neuron_rmsnorm.trace.json.gz
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from neuronscope.testing import install_emulated_neuron

emu = install_emulated_neuron()

import torch  # noqa: E402
import torch_neuronx  # noqa: E402  (the emulator's stand-in)
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode  # noqa: E402

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inputs(requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(16, 128, requires_grad=requires_grad), torch.randn(128, requires_grad=requires_grad)


def files(root: Path) -> dict[str, int]:
    """Relative path -> size of every file under root."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def summarize(prof: Any) -> dict[str, Any]:
    """What the tests look at, from one finished profile."""
    ka = prof.key_averages()
    rows = {
        e.key: {
            "self_device_us": e.self_device_time_total,
            "device_us": e.device_time_total,
            "count": e.count,
            "device_type": str(e.device_type),
        }
        for e in ka
    }
    cpu_ops, kernels, runtime, annotations = {}, [], [], []
    for e in prof.profiler.kineto_results.events():
        rec = {
            "name": e.name(),
            "device_type": str(e.device_type()),
            "device_index": e.device_index(),
            "activity_type": e.activity_type(),
            "linked": e.linked_correlation_id(),
            "corr": e.correlation_id(),
            "start_ns": e.start_ns(),
            "dur_ns": e.duration_ns(),
            "is_privateuse1": e.device_type() == DeviceType.PrivateUse1,
        }
        if e.activity_type() == "cpu_op":
            cpu_ops[e.correlation_id()] = [e.name(), e.start_ns(), e.duration_ns()]
        elif e.activity_type() == "kernel":
            kernels.append(rec)
        elif e.activity_type() == "privateuse1_runtime":
            runtime.append(rec)
        elif e.activity_type() == "gpu_user_annotation":
            annotations.append(rec)
    cpu_self_device_us = sum(
        fe.self_device_time_total for fe in prof.events() if fe.device_type == DeviceType.CPU
    )
    return {
        "table": ka.table(sort_by="self_device_time_total", row_limit=5),
        "use_device": prof.use_device,
        "rows": rows,
        "cpu_ops": {str(k): v for k, v in cpu_ops.items()},
        "kernels": kernels,
        "runtime": runtime,
        "annotations": annotations,
        "cpu_self_device_us": cpu_self_device_us,
        "info": emu.last_session_info(),
    }


def run_rmsnorm(cfg: Any, activities: list[Any] = BOTH, steps: int = 2, **kw: Any) -> Any:
    x, w = inputs()
    rmsnorm_naive(x, w)  # warm-up ("compile")
    with profile(activities=activities, experimental_config=cfg, **kw) as prof:
        for _ in range(steps):
            rmsnorm_naive(x, w)
        torch.neuron.synchronize()
    return prof


# --------------------------------------------------------------------------- scenarios


def scenario_session(work: Path) -> dict[str, Any]:
    out = work / "profile_output"
    cfg = NeuronConfig(
        modes=list(ProfileMode),
        profile_output_dir=out,
        capture_enabled_for_nc="0,1",
    )
    exported: list[str] = []
    exporter = NeuronProfiler(cfg)
    prof = run_rmsnorm(cfg, on_trace_ready=lambda p: exported.append(exporter.export_trace(p)))
    res = summarize(prof)
    res["files"] = files(out)
    res["exported"] = [str(Path(p).relative_to(out)) for p in exported]
    res["session_dir"] = str(Path(cfg.get_session_dir()).relative_to(out))
    res["pid"] = os.getpid()
    res["markers"] = {
        "torch_neuronx": getattr(torch_neuronx, "__neuronscope_emulator__", False),
        "profiling": getattr(sys.modules["torch_neuronx.profiling"], "__neuronscope_emulator__", False),
        "torch.neuron": getattr(torch.neuron, "__neuronscope_emulator__", False),
        "backend_name": torch._C._get_privateuse1_backend_name(),
        "is_experimental_config": isinstance(cfg, torch._C._profiler._ExperimentalConfig),
    }
    torch_neuronx.synchronize()
    return res


def scenario_model_layout(work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    emu.layout = "model"
    out_model = work / "model"
    prof = run_rmsnorm(NeuronConfig(modes=[ProfileMode.DEVICE], profile_output_dir=out_model))
    res["model"] = {"files": files(out_model), "kernels": len(summarize(prof)["kernels"])}
    emu.layout = "session"  # switching between profiles
    out_session = work / "session"
    run_rmsnorm(NeuronConfig(modes=[ProfileMode.DEVICE], profile_output_dir=out_session))
    res["session"] = {"files": files(out_session)}
    return res


def scenario_limits(work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    out = work / "dropped"
    with _fd2_to(work / "dropped.stderr"):  # the emulated runtime writes to fd 2 itself
        prof = run_rmsnorm(NeuronConfig(profile_output_dir=out, max_events_per_nc=3))
    s = summarize(prof)
    res["dropped"] = {
        "files": files(out),
        "kernels": s["kernels"],
        "runtime": s["runtime"],
        "info": s["info"],
        "stderr": (work / "dropped.stderr").read_text(),
        "ntrace": next(out.rglob("ntrace.pb")).read_text(),
    }
    out = work / "runtime_only"
    run_rmsnorm(NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir=out))
    res["runtime_only"] = {"files": files(out)}
    out = work / "cpu_only"
    prof = run_rmsnorm(NeuronConfig(profile_output_dir=out), activities=[ProfilerActivity.CPU])
    s = summarize(prof)
    res["cpu_only"] = {
        "files": files(out),
        "kernels": len(s["kernels"]),
        "annotations": len(s["annotations"]),
        "runtime": len(s["runtime"]),
        "cpu_self_device_us": s["cpu_self_device_us"],
        "use_device": s["use_device"],
    }
    out = work / "odd#dir=a;b"  # characters Kineto's config parser would mangle
    run_rmsnorm(NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir=out))
    res["odd_path"] = {"files": files(out)}
    out = work / "nc1_only"
    prof = run_rmsnorm(NeuronConfig(profile_output_dir=out, capture_enabled_for_nc="1"))
    res["nc1_only"] = {"files": files(out), "kernels": len(summarize(prof)["kernels"])}
    return res


class _fd2_to:
    """Send file descriptor 2 to a file for a while (what native code prints lands there)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.file = open(self.path, "wb")
        os.dup2(self.file.fileno(), 2)

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.close()


def scenario_fake_explorer(work: Path) -> dict[str, Any]:
    """The emulator's raw files through the fake neuron-explorer, a real subprocess."""
    import subprocess

    from neuronscope.testing import install_fake_neuron_explorer

    exe = install_fake_neuron_explorer(work / "bin")
    out = work / "profile_output"
    cfg = NeuronConfig(modes=list(ProfileMode), profile_output_dir=out, capture_enabled_for_nc="0,1", max_events_per_nc=5)
    exporter = NeuronProfiler(cfg)
    with _fd2_to(work / "runtime.stderr"):
        prof = run_rmsnorm(cfg, on_trace_ready=exporter.export_trace)
    s = summarize(prof)

    def cli(*args: str, **env: str) -> dict[str, Any]:
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}, cwd=work)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    res: dict[str, Any] = {"kernels": s["kernels"], "exe": str(exe)}
    res["version"] = cli("--version")
    res["summary"] = cli("view", "-d", str(out), "--output-format", "summary-json")
    res["summary_234"] = cli("view", "-d", str(out), "--output-format", "summary-json", NEURONSCOPE_FAKE_EXPLORER_SCHEMA="2.34")
    res["summary_override"] = cli(
        "view", "-d", str(out), "--output-format", "summary-json", "--output-file", str(work / "s.json"),
        NEURONSCOPE_FAKE_EXPLORER_SUMMARY='{"spill_reload_bytes": 7}',
    )
    res["summary_file"] = (work / "s.json").read_text()
    res["json"] = cli("view", "-d", str(out), "--output-format", "json", "--output-file", str(work / "x" / "integrated_trace.json"))
    res["system_profile"] = json.loads((work / "x" / "system_profile.json").read_text())
    res["device_profiles"] = sorted(p.name for p in (work / "x").glob("device_profile_model_*.json"))
    res["ingest"] = cli("view", "-d", str(out), "--ingest-only", "--display-name", "my-profile-run")
    res["missing"] = cli("view", "-d", str(work / "nope"), "--output-format", "summary-json")
    ntff = next(out.rglob("profile_nc_0_session_0.ntff"))
    runs = [tuple(map(int, ln.split()[1:])) for ln in ntff.read_text().splitlines() if ln.startswith("neff_")]
    res["ntff_span_s"] = (max(a + b for a, b in runs) - min(a for a, _ in runs)) / 1e9
    return res


def scenario_lifecycle(work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    # Repeated sessions in one process.
    out = work / "repeat"
    cfg = NeuronConfig(profile_output_dir=out)
    res["repeat"] = []
    for _ in range(3):
        s = summarize(run_rmsnorm(cfg))
        res["repeat"].append({"kernels": len(s["kernels"]), "session_dir": s["info"]["session_dir"]})

    # torch.profiler.schedule: two active cycles.
    cycles: list[dict[str, Any]] = []
    x, w = inputs()
    sched_cfg = NeuronConfig(profile_output_dir=work / "schedule")
    with profile(
        activities=BOTH,
        experimental_config=sched_cfg,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=lambda p: cycles.append(summarize(p)),
    ) as prof:
        for _ in range(8):
            rmsnorm_naive(x, w)
            prof.step()
    res["schedule"] = [
        {"kernels": len(c["kernels"]), "steps": sorted(k for k in c["rows"] if k.startswith("ProfilerStep"))}
        for c in cycles
    ]
    res["schedule_dirs"] = sorted(p.name for p in (work / "schedule").glob("*/*"))

    # Forward + backward.
    xg, wg = inputs(requires_grad=True)
    with profile(activities=BOTH, experimental_config=NeuronConfig(profile_output_dir=work / "bwd")) as prof:
        rmsnorm_naive(xg, wg).sum().backward()
    s = summarize(prof)
    in_backward = []
    by_id = {fe.id: fe for fe in prof.events() if fe.device_type == DeviceType.CPU}
    for k in s["kernels"]:
        fe = by_id.get(k["linked"])
        chain = []
        while fe is not None:
            chain.append(fe.name)
            fe = fe.cpu_parent
        in_backward.append(any("Backward" in n or n.startswith("autograd::") for n in chain))
    res["backward"] = {
        "kernels": len(s["kernels"]),
        "kernels_in_backward": sum(in_backward),
        "cpu_self_device_us": s["cpu_self_device_us"],
        "kernel_us": sum(k["dur_ns"] for k in s["kernels"]) / 1000,
        "threads": sorted({fe.thread for fe in prof.events() if fe.device_type == DeviceType.CPU}),
    }

    # attribution="backend": the outermost op reaching the backend executes.
    emu.attribution = "backend"
    prof = run_rmsnorm(NeuronConfig(profile_output_dir=work / "backend"), steps=1)
    emu.attribution = "leaf"
    s = summarize(prof)
    res["backend"] = {
        "rows": {k: v for k, v in s["rows"].items() if k.startswith("aten::")},
        "cpu_self_device_us": s["cpu_self_device_us"],
        "kernel_us": sum(k["dur_ns"] for k in s["kernels"]) / 1000,
        "min_self_cpu_us": min(fe.self_cpu_time_total for fe in prof.key_averages()),
    }
    return res


def make_trace_data(dest: Path) -> dict[str, Any]:
    """The chrome trace kept as tests/data/emulated_neuron_rmsnorm.trace.json.gz."""
    work = dest.parent / ".emulated_trace_tmp"
    x, w = inputs()
    rmsnorm_naive(x, w)
    cfg = NeuronConfig(profile_output_dir=work)
    with profile(activities=BOTH, experimental_config=cfg, record_shapes=True) as prof:
        with record_function("rmsnorm_naive"):
            for _ in range(2):
                rmsnorm_naive(x, w)
        torch.neuron.synchronize()
    raw = work / "trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(dest, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(work)
    events = json.loads(gzip.open(dest).read())["traceEvents"]
    cats: dict[str, int] = {}
    for e in events:
        cats[e.get("cat", e.get("ph"))] = cats.get(e.get("cat", e.get("ph")), 0) + 1
    return {"dest": str(dest), "bytes": dest.stat().st_size, "categories": cats}


SCENARIOS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "session": scenario_session,
    "model_layout": scenario_model_layout,
    "limits": scenario_limits,
    "lifecycle": scenario_lifecycle,
    "fake_explorer": scenario_fake_explorer,
}

if __name__ == "__main__":
    name, arg = sys.argv[1], Path(sys.argv[2])
    result = make_trace_data(arg) if name == "make-trace-data" else SCENARIOS[name](arg)
    sys.stdout.flush()
    print(json.dumps(result, default=str))
