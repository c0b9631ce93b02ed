"""CPU only: device time is CPU op time (there is no accelerator to attribute time to)."""

from __future__ import annotations

from .base import DeviceBackend

__all__ = ["CpuBackend"]


class CpuBackend(DeviceBackend):
    name = "cpu"
