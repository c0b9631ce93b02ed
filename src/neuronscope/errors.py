"""Exceptions raised by neuronscope.

Everything neuronscope raises on purpose derives from :class:`NeuronscopeError`, so callers
can catch one type. Invalid arguments additionally derive from the built-in type a Python
programmer expects (``ValueError`` / ``TypeError``).
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DeviceUnavailableError",
    "NeuronscopeError",
    "TraceLoadError",
]


class NeuronscopeError(Exception):
    """Base class of every error neuronscope raises on purpose."""


class ConfigurationError(NeuronscopeError, ValueError):
    """An argument or environment variable has a value neuronscope cannot use."""


class DeviceUnavailableError(NeuronscopeError):
    """A device was asked for explicitly (``device="neuron"``/``"cuda"``) but is not present."""


class TraceLoadError(NeuronscopeError):
    """A trace file or run directory could not be read; the message names the file."""
