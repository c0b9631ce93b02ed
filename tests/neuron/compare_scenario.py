"""ns.compare against the emulated Neuron device, in a fresh interpreter (renaming PrivateUse1 is
irreversible): prints one JSON object (last line).

    python compare_scenario.py <work_dir>

The emulator's ``torch.neuron.synchronize`` is wrapped to count its calls, and every variant call
is counted, so the test can check the device was synchronised around each timed block.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neuronscope.testing import install_emulated_neuron

emu = install_emulated_neuron()

import torch  # noqa: E402

import neuronscope as ns  # noqa: E402

syncs = {"n": 0}
_sync = torch.neuron.synchronize


def counted_sync(*args, **kwargs):
    syncs["n"] += 1
    return _sync(*args, **kwargs)


torch.neuron.synchronize = counted_sync
calls = {"naive": 0, "rms_norm": 0}


def naive(x, w, eps=1e-6):
    calls["naive"] += 1
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def fused(x, w, eps=1e-6):
    calls["rms_norm"] += 1
    return torch.rms_norm(x, (x.shape[-1],), w, eps)


def main(work: Path) -> dict:
    torch.manual_seed(0)
    x, w = torch.randn(16, 128), torch.randn(128)
    c = ns.compare({"naive": naive, "rms_norm": fused}, x, w, steps=3, max_time_s=0.5, output_dir=work / "runs")
    ns.flush(60)
    out = c.to_dict()
    out["syncs"] = syncs["n"]
    out["calls"] = calls
    out["run_devices"] = {v.name: v.run.device for v in c if v.run is not None}
    out["run_files"] = {v.name: sorted(str(p.relative_to(v.path)) for p in v.path.rglob("*") if p.is_file()) for v in c}
    out["table"] = c.table()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), default=str))
