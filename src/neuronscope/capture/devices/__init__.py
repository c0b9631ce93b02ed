"""Device backends: everything device-specific lives in one module per device.

Nothing outside this package says "neuron" or "cuda" when deciding *how* to capture.
"""

from __future__ import annotations

from ...errors import ConfigurationError, DeviceUnavailableError
from .base import DeviceBackend
from .cpu import CpuBackend
from .cuda import CudaBackend
from .neuron import NeuronBackend

__all__ = ["DEVICE_CHOICES", "DeviceBackend", "select_backend"]

DEVICE_CHOICES = ("auto", "neuron", "cuda", "cpu")
_BACKENDS: dict[str, type[DeviceBackend]] = {"neuron": NeuronBackend, "cuda": CudaBackend, "cpu": CpuBackend}


def validate_device(device: object) -> str:
    if not isinstance(device, str) or device.lower() not in DEVICE_CHOICES:
        raise ConfigurationError(f"device={device!r} is not a known device; use one of {', '.join(DEVICE_CHOICES)}")
    return device.lower()


def select_backend(device: str = "auto") -> DeviceBackend:
    """The backend for ``device``; ``"auto"`` prefers neuron, then cuda, then cpu.

    An explicitly requested device that is absent raises DeviceUnavailableError with what to install.
    """
    device = validate_device(device)
    if device == "auto":
        for cls in (NeuronBackend, CudaBackend):
            if cls.is_available():
                return cls()
        return CpuBackend()
    cls = _BACKENDS[device]
    if not cls.is_available():
        raise DeviceUnavailableError(f'device="{device}" was requested but is not available: {cls.install_hint()}')
    return cls()
