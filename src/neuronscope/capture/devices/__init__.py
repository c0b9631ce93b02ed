"""Device backends: everything device-specific lives in one module per device.

Nothing outside this package says "neuron" or "cuda" when deciding *how* to capture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    from .base import DeviceBackend

__all__ = ["DEVICE_CHOICES", "DeviceBackend", "select_backend"]

DEVICE_CHOICES = ("auto", "neuron", "cuda", "cpu")


def __getattr__(name: str) -> Any:
    # The backends import torch; the file readers in this package (neuron_artifacts) must not.
    if name == "DeviceBackend":
        from .base import DeviceBackend

        return DeviceBackend
    raise AttributeError(name)


def _backends() -> dict[str, Any]:
    from .cpu import CpuBackend
    from .cuda import CudaBackend
    from .neuron import NeuronBackend

    return {"neuron": NeuronBackend, "cuda": CudaBackend, "cpu": CpuBackend}


def validate_device(device: object) -> str:
    if not isinstance(device, str) or device.lower() not in DEVICE_CHOICES:
        raise ConfigurationError(f"device={device!r} is not a known device; use one of {', '.join(DEVICE_CHOICES)}")
    return device.lower()


def select_backend(device: str = "auto", *, neuron: Any = None) -> "DeviceBackend":
    """The backend for ``device``; ``"auto"`` prefers neuron, then cuda, then cpu. ``neuron``:
    the :class:`NeuronOptions` a Neuron backend captures with.

    An explicitly requested device that is absent raises DeviceUnavailableError with what to install.
    """
    device = validate_device(device)
    backends = _backends()
    if device == "auto":
        for cls in (backends["neuron"], backends["cuda"]):
            if cls.is_available():
                return _make(cls, neuron)
        return backends["cpu"]()
    cls = backends[device]
    if not cls.is_available():
        raise DeviceUnavailableError(f'device="{device}" was requested but is not available: {cls.install_hint()}')
    return _make(cls, neuron)


def _make(cls: Any, neuron: Any) -> "DeviceBackend":
    return cls(neuron) if cls.name == "neuron" else cls()
