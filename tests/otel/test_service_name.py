"""The default ``service.name`` (issue 35, item 5): what a user set wins (OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES), else the script or module that runs, else the module of the
profiled function, and a replayed run is named after the program it was recorded in. Real
processes exporting to a real OTLP receiver; the name read back from the spans' resource."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.otlp_receiver import OtlpReceiver

SCRIPT = """
import torch
import neuronscope as ns
with ns.profile_neuron(name="named") as run:
    torch.relu(torch.ones(8))
assert run.wait(60)
print(run.path)
"""

SERVICE_MODULE = """
import torch
import neuronscope as ns

@ns.profile_neuron(name="handler")
def handler():
    return torch.relu(torch.ones(8))
"""


def _env(tmp_path: Path, endpoint: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(NEURONSCOPE_OUTPUT_DIR=str(tmp_path / "runs"), OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", **extra)
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    return env


def _service_names(rx: OtlpReceiver, name: str) -> set[str]:
    spans = rx.wait_for_spans(1, timeout=30)
    return {s["resource"].get("service.name") for s in spans if s["name"] == name}


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, "train_job"),  # the script's stem
        ({"OTEL_SERVICE_NAME": "llm-api"}, "llm-api"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,team=ml"}, "from-attrs"),
    ],
    ids=["script", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"],
)
def test_a_script_names_the_service_unless_the_user_did(tmp_path, extra, expected):
    script = tmp_path / "train_job.py"
    script.write_text(SCRIPT)
    with OtlpReceiver("http") as rx:
        _run([sys.executable, str(script)], _env(tmp_path, rx.endpoint, **extra))
        assert _service_names(rx, "named") == {expected}


def test_a_module_run_with_dash_m_names_the_service(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "serve.py").write_text(SCRIPT)
    with OtlpReceiver("http") as rx:
        env = _env(tmp_path, rx.endpoint)
        paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *paths])  # mypkg importable, like `cd there`
        _run([sys.executable, "-m", "mypkg.serve"], env)
        assert _service_names(rx, "named") == {"mypkg.serve"}


def test_without_a_script_the_decorated_functions_module_names_it(tmp_path):
    """``python -c`` (as a launcher would be) names no program: the profiled function's module does."""
    (tmp_path / "inference_handlers.py").write_text(SERVICE_MODULE)
    code = "import sys; sys.path.insert(0, sys.argv[1]); import inference_handlers; inference_handlers.handler()"
    with OtlpReceiver("http") as rx:
        _run([sys.executable, "-c", code, str(tmp_path)], _env(tmp_path, rx.endpoint))
        assert _service_names(rx, "handler") == {"inference_handlers"}


def test_a_replayed_run_is_named_after_the_program_it_was_recorded_in(tmp_path):
    script = tmp_path / "offline_job.py"
    script.write_text(SCRIPT)
    run_dir = _run([sys.executable, str(script)], _env(tmp_path, None)).strip().splitlines()[-1]
    import json

    assert json.loads((Path(run_dir) / "manifest.json").read_text())["program"] == "offline_job"
    with OtlpReceiver("http") as rx:
        _run([sys.executable, "-m", "neuronscope", "export", run_dir, "--otlp-endpoint", rx.endpoint], _env(tmp_path, None))
        assert _service_names(rx, "named") == {"offline_job"}


def test_neuronscope_run_names_the_service_after_the_script(tmp_path):
    script = tmp_path / "bench_step.py"
    script.write_text("import torch\ntorch.relu(torch.ones(8))\n")
    with OtlpReceiver("http") as rx:
        argv = [sys.executable, "-m", "neuronscope", "run", "--quiet", "--otlp-endpoint", rx.endpoint, str(script)]
        _run(argv, _env(tmp_path, None))
        assert _service_names(rx, "bench_step") == {"bench_step"}
