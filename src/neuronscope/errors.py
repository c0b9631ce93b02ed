"""Exceptions raised by neuronscope.

Everything neuronscope raises on purpose derives from :class:`NeuronscopeError`, so callers
can catch one type. Every bad argument or environment variable raises
:class:`ConfigurationError`, which is also a ``ValueError`` and a ``TypeError``: code that
catches the built-in type a Python programmer expects keeps working.
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


class ConfigurationError(NeuronscopeError, ValueError, TypeError):
    """An argument or environment variable has a value neuronscope cannot use; the message
    names it and says what to use instead."""


class DeviceUnavailableError(NeuronscopeError):
    """A device was asked for explicitly (``device="neuron"``/``"cuda"``) but is not present."""


class TraceLoadError(NeuronscopeError):
    """A trace file or run directory could not be read; the message names the file."""
