"""Facts about the machine, read from the OS (no neuronscope imports: any layer may use it)."""

from __future__ import annotations

__all__ = ["available_memory"]


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, bytes (None where there is none: not Linux)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
