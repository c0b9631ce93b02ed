"""Griffe extension for the API reference: make neuronscope's Sphinx-isms render in Markdown.

* reST roles (``:class:`Run```, ``:func:`~neuronscope.configure```) become cross-references
  when they name a public object (``neuronscope.X`` or ``neuronscope.testing.X``), plain code
  otherwise;
* attributes documented with Sphinx's ``#:`` comments (``status: str  #: what happened``, or
  ``#:`` lines right above the assignment) get those comments as their docstrings;
* ``profile_neuron`` and ``region``, factory *instances* whose ``__doc__`` is set at run
  time, get it from the imported object.

Loaded by mkdocstrings through ``options.extensions`` in ``mkdocs.yml``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
#: Public callables that are factory *instances* (decorator and context manager in one): their
#: documentation is set at run time (``profile_neuron.__doc__ = ...``), which static analysis
#: cannot see, so it is read from the imported object.
_RUNTIME_DOCS = {
    "neuronscope.capture.profile.profile_neuron": ("neuronscope", "profile_neuron"),
    "neuronscope.capture.region.region": ("neuronscope", "region"),
}
_TESTING = {"install_emulated_neuron", "EmulatedNeuron", "EMULATED_INSTANCE_ID", "default_build_dir"}


def _public_names() -> set[str]:
    try:
        import neuronscope

        return set(neuronscope.__all__)
    except Exception:  # noqa: BLE001 - the reference still builds, without links
        return set()


class RstRoles(griffe.Extension):
    def __init__(self) -> None:
        super().__init__()
        self._public = _public_names()

    def _target(self, text: str) -> str | None:
        name = text.rsplit(".", 1)[-1]
        if text in (f"neuronscope.{name}", name) and name in self._public:
            return f"neuronscope.{name}"
        if text in (f"neuronscope.testing.{name}", name) and name in _TESTING:
            return f"neuronscope.testing.{name}"
        return None

    def _replace(self, match: re.Match[str]) -> str:
        tilde, text = match.groups()
        shown = text.rsplit(".", 1)[-1] if tilde else text
        target = self._target(text)
        return f"[`{shown}`][{target}]" if target else f"`{shown}`"

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.is_attribute and obj.docstring is None:
            comment = _sphinx_comment(obj)
            if comment:
                obj.docstring = griffe.Docstring(comment, parent=obj)
        if obj.path in _RUNTIME_DOCS and obj.docstring is None:
            module, name = _RUNTIME_DOCS[obj.path]
            try:
                doc = getattr(importlib.import_module(module), name).__doc__
            except Exception:  # noqa: BLE001
                doc = None
            if doc:
                obj.docstring = griffe.Docstring(inspect.cleandoc(doc), parent=obj)
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(self._replace, obj.docstring.value)


def _sphinx_comment(obj: griffe.Object) -> str | None:
    """The ``#:`` comment documenting an attribute: trailing on its line, or the lines above."""
    try:
        lines = obj.lines_collection[obj.filepath]  # type: ignore[index]
    except Exception:  # noqa: BLE001 - no source (e.g. inspected objects)
        return None
    if not obj.lineno or obj.lineno > len(lines):
        return None
    line = lines[obj.lineno - 1]
    if "#:" in line:
        return line.split("#:", 1)[1].strip() or None
    above: list[str] = []
    i = obj.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        above.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(above) or None
