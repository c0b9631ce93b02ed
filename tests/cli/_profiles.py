"""Real profiles for the CLI and report tests: RMSNorm on CPU, saved as run directories.

Built once per session (profiling takes ~0.1 s each) into a tmp dir:

* ``small``: naive RMSNorm, 2 steps of 4x64, in regions forward/norm;
* ``big``:   the same code, 20 steps of 256x4096 (~10,000x the work): certainly slower;
* ``fused``: ``torch.rms_norm``, 2 steps of 4x64 in the same regions: different ops.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from workloads import rmsnorm_naive

import neuronscope as ns

DATA = Path(__file__).resolve().parent.parent / "data"
COMMITTED_TRACE = DATA / "cpu_rmsnorm.trace.json.gz"


@dataclass(frozen=True)
class Profiles:
    small: Path
    big: Path
    fused: Path


def _profile(name: str, out: Path, fn, x: torch.Tensor, w: torch.Tensor, steps: int) -> Path:
    with ns.profile_neuron(name=name, output_dir=out, device="cpu") as run:
        for _ in range(steps):
            with ns.region("forward"), ns.region("norm"):
                fn(x, w)
    assert run.wait(60) and run.path is not None, run
    return run.path


def build_profiles(out: Path) -> Profiles:
    torch.manual_seed(0)
    xs, ws = torch.randn(4, 64), torch.randn(64)
    xb, wb = torch.randn(256, 4096), torch.randn(4096)
    # Warm up torch and the profiler first, so first-call costs don't land in ``small``.
    _profile("warmup", out / "warmup", rmsnorm_naive, xs, ws, 2)

    def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.rms_norm(x, (x.shape[-1],), w, 1e-6)

    return Profiles(
        small=_profile("small", out, rmsnorm_naive, xs, ws, 2),
        big=_profile("big", out, rmsnorm_naive, xb, wb, 20),
        fused=_profile("fused", out, fused, xs, ws, 2),
    )


def cli_runner():
    """A CliRunner that keeps stderr apart from stdout (the default from click 8.2 on)."""
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


PYTHON = sys.executable
