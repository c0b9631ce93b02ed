"""CUDA: CPU + CUDA activities; kernels are linked to ops by Kineto's correlation ids."""

from __future__ import annotations

from typing import Any

import torch
from torch.profiler import ProfilerActivity

from .base import DeviceBackend

__all__ = ["CudaBackend"]


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
