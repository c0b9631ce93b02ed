"""CPU only: device time is CPU op time (there is no accelerator to attribute time to)."""

from __future__ import annotations

from typing import Any

from .base import DeviceBackend

__all__ = ["CpuBackend"]


class CpuBackend(DeviceBackend):
    name = "cpu"

    def device_limits(self) -> Any:
        from .cpu_limits import cpu_limits

        return cpu_limits()  # measured once per host, torch version and thread count (1-3 s), then cached
