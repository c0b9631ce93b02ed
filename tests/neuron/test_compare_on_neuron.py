"""ns.compare on the emulated Neuron device (neuronscope.testing): the same call as on the CPU, the
device synchronised around every timed block through the device seam, each variant's profile an
ordinary Neuron run (NeuronCore device time, raw NEFF/NTFF files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_RT_INSPECT_ENABLE", "TORCH_NEURONX_NEFF_CACHE_DIR")}
    proc = subprocess.run(
        [sys.executable, str(HERE / "compare_scenario.py"), str(tmp_path_factory.mktemp("neuron-compare"))],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_compare_runs_on_the_neuron_device_and_profiles_neuroncore_time(result):
    assert result["device"] == "neuron"
    assert result["run_devices"] == {"naive": "neuron", "rms_norm": "neuron"}
    for v in result["variants"]:
        assert v["error"] is None and v["mismatch"] is None
        assert v["device_time_us_per_step"] > 0  # NeuronCore time, from the emulated kernels
        files = result["run_files"][v["name"]]
        assert any(f.endswith(".neff") for f in files) and any(f.endswith(".ntff") for f in files)
    assert result["variants"][1]["explanation"] is not None


def test_every_call_is_accounted_for_and_each_timed_block_is_synchronised(result):
    for v in result["variants"]:
        timed = len(v["samples_s"]) * v["calls_per_sample"]
        # warm-up, the profile's steps, one untimed call after the profiles, then per round one
        # untimed call (the other variant ran last) and the timed ones -- and those of any first
        # rounds dropped when load during the warm-up made the samples be sized again
        counted = v["warmup"]["calls"] + result["steps"] + 1 + result["rounds"] + timed + v["discarded_calls"]
        assert result["calls"][v["name"]] == counted
        assert len(v["samples_s"]) == result["rounds"] * v["samples_per_round"] and result["rounds"] >= 10
    blocks = sum(len(v["samples_s"]) for v in result["variants"])
    warmups = sum(v["warmup"]["calls"] for v in result["variants"])
    # torch.neuron.synchronize: before and after every sample's block, after every warm-up call
    assert result["syncs"] >= 2 * blocks + warmups
