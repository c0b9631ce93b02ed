"""The units every renderer shares: times, rates, amounts, sizes, and what "device time" means
on each device.

A leaf: it imports nothing of neuronscope, so any module of any layer (the trace model's
readers, the analysis, the rules, the reports) can format a number without pulling in the
renderers (analysis/text.py) or closing an import circle through them.
"""

from __future__ import annotations

__all__ = ["DEVICE_HEADING", "device_heading", "format_amount", "format_rate", "format_us", "size_text"]

#: the device line of every table: the device, and what its "device time" column measures
DEVICE_HEADING = {
    "cpu": "cpu (no accelerator: device time = CPU op time)",
    "cuda": "cuda (device time = GPU kernel time)",
    "rocm": "rocm (device time = GPU kernel time)",
    "neuron": "neuron (device time = NeuronCore time)",
}


def device_heading(device: str) -> str:
    """``"cuda"`` -> ``"cuda (device time = GPU kernel time)"``; an unknown device as it is."""
    return DEVICE_HEADING.get(device, device)


def format_us(us: float) -> str:
    """Microseconds in the unit a human reads fastest."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_rate(value: float, unit: str) -> str:
    """``1.23e12, "FLOP/s"`` -> ``1.23 TFLOP/s``; ``3.1e10, "B/s"`` -> ``31.0 GB/s``."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_amount(value: float, unit: str) -> str:
    """FLOPs or bytes: ``4.0e8, "FLOP"`` -> ``400 MFLOP``."""
    return format_rate(value, unit)


def size_text(nbytes: float) -> str:
    """``32768`` -> ``32 KiB`` (a cache's size, a working set)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes:.0f} B"
