"""The ``service.name`` of neuronscope's own providers when nobody named the service.

The OpenTelemetry SDK falls back to ``unknown_service:python``, which names nothing. What the
user set always wins — ``configure(service_name=...)``, ``OTEL_SERVICE_NAME``,
``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` — and otherwise the service is named after:

1. the program (:func:`~neuronscope.sinks.rundir.program_name`): the script (``python
   train.py``, ``neuronscope run train.py``: ``train``) or the module (``python -m
   mypkg.serve``: ``mypkg.serve``), unless that is a launcher installed with Python
   (``uvicorn``, ``gunicorn``, ``neuronscope``);
2. for ``neuronscope export``, the program the run was recorded in (its manifest's
   ``program``);
3. else the module of the first profiled function (or of the code that opened the first
   ``with ns.profile_neuron()``): a service started by a launcher is named after its code;
4. else the SDK's own fallback.
"""

from __future__ import annotations

import sys
from typing import Any

from ..rundir import installed_with_python, program_name

__all__ = ["default_service_name", "note_caller_module", "note_replayed_program", "with_default_service_name"]

_hints: dict[str, str | None] = {"caller": None, "replayed": None}


def note_caller_module() -> None:
    """Remember the user's module that starts the first profile (the providers are built for
    it). Called on the profile's start: a few frames are walked, once."""
    if _hints["caller"] is None:
        _hints["caller"] = _profiled_module(sys._getframe(1))


def note_replayed_program(name: str | None) -> None:
    """The program a replayed run was recorded in (``ns.export_run``)."""
    _hints["replayed"] = name or None


def default_service_name() -> str | None:
    return program_name() or _hints["replayed"] or _hints["caller"]


def with_default_service_name(resource: Any) -> Any:
    """``resource``, named after the program or the profiled code when its ``service.name``
    is still the SDK's ``unknown_service`` fallback."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    current = str(resource.attributes.get(SERVICE_NAME) or "")
    name = default_service_name()
    if name is None or (current and not current.startswith("unknown_service")):
        return resource
    return resource.merge(Resource({SERVICE_NAME: name}))


def _profiled_module(frame: Any) -> str | None:
    """The module of the profiled function — the ``wrapped`` callable in neuronscope's
    decorator frame — or else of the first calling frame that is the user's own code (not
    neuronscope's, not the standard library's or an installed package's: a web framework
    calling a handler is not the service)."""
    for _ in range(64):
        if frame is None:
            return None
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".")[0] == "neuronscope":
            wrapped = frame.f_locals.get("wrapped")
            owner = getattr(wrapped, "__module__", None) if callable(wrapped) else None
            if isinstance(owner, str) and _users_module(owner):
                return owner
        elif _users_module(module):
            return module
        frame = frame.f_back
    return None


def _users_module(module: str) -> bool:
    """A module of the user's own code, with a name that says something (not ``__main__``:
    the program, when it is one, was asked first)."""
    if not module or module == "__main__" or module.split(".")[0] == "neuronscope":
        return False
    path = getattr(sys.modules.get(module), "__file__", None)
    return bool(path) and not installed_with_python(str(path))
