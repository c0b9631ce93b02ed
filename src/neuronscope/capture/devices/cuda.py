"""CUDA: CPU + CUDA activities; kernels are linked to ops by Kineto's correlation ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from .base import DeviceBackend

__all__ = ["CudaBackend", "cuda_memory_facts", "dump_history", "start_history"]


class CudaBackend(DeviceBackend):
    name = "cuda"

    @classmethod
    def is_available(cls) -> bool:
        return bool(torch.cuda.is_available())

    @classmethod
    def install_hint(cls) -> str:
        return (
            f"torch {torch.__version__} sees no CUDA device. Install a CUDA build of torch "
            "(https://pytorch.org/get-started/locally/) on a machine with an NVIDIA GPU, or use device='auto'."
        )

    def activities(self) -> list[ProfilerActivity]:
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def experimental_config(self, raw_dir: Any, *, all_threads: bool = False) -> Any | None:
        # cuda_sync events (cudaDeviceSynchronize, stream/event syncs on the GPU timeline) let the
        # diagnosis see where the host made the device wait.
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True, profile_all_threads=all_threads)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def describe(self) -> dict[str, Any]:
        return {"device": self.name, "device_name": torch.cuda.get_device_name(), "cuda": torch.version.cuda}

    def device_limits(self) -> Any:
        from ...analysis.roofs import limits_for_device

        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        props = {
            "numSms": p.multi_processor_count,
            "totalGlobalMem": p.total_memory,
            "computeMajor": p.major,
            "computeMinor": p.minor,
        }
        return limits_for_device(p.name, props)

    # -- memory ----------------------------------------------------------------------------------
    def memory_start(self, mode: str) -> dict[str, Any]:
        if mode == "history":
            start_history()  # the allocator history the run directory's memory_snapshot.pickle holds
        return {}

    def write_memory_files(self, run_dir: Path, mode: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        if mode == "history":
            snap = dump_history(run_dir)
            if snap is not None:
                facts["memory_snapshot"] = snap.name  # open it at https://pytorch.org/memory_viz
        facts.update(cuda_memory_facts())
        return facts


# -- the allocator's history and peaks (profile_neuron(memory=...)) --------------------------------
def start_history() -> bool:
    """``memory="history"`` on CUDA: record the allocator's history (stacks included)."""
    if not torch.cuda.is_available():
        return False
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    return True


def dump_history(run_dir: Path) -> Path | None:
    """Write the snapshot pytorch.org/memory_viz opens into the run directory, stop recording."""
    target = run_dir / "memory_snapshot.pickle"
    try:
        torch.cuda.memory._dump_snapshot(str(target))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return target if target.is_file() else None


def cuda_memory_facts() -> dict[str, Any]:
    """``torch.cuda.max_memory_allocated/reserved`` for the manifest (empty without CUDA)."""
    if not torch.cuda.is_available():
        return {}
    return {
        "cuda_max_memory_allocated": int(torch.cuda.max_memory_allocated()),
        "cuda_max_memory_reserved": int(torch.cuda.max_memory_reserved()),
    }
