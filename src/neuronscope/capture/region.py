"""``region``: name a piece of code in the profile (``torch.profiler.record_function``).

With no profiler running, entering a region is one flag check — cheaper than
``record_function`` itself, which always allocates a handle.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast

import torch.autograd.profiler as _autograd_profiler
import wrapt
from torch.profiler import record_function

from .. import _config
from ..errors import ConfigurationError

__all__ = ["Region", "close_open_regions", "continue_open_regions", "region"]

F = TypeVar("F", bound=Callable[..., Any])

# Regions open while a profiler records, per thread: [name, record_function handle] boxes,
# outermost first. When a nested profile ends and the outer one's session restarts, the
# boxes still open on that thread get a fresh handle (see :func:`continue_open_regions`),
# so the region keeps recording and the analysis stitches its pieces together.
_open_by_thread: dict[int, list[list[Any]]] = {}


def _enter(name: str) -> list[Any]:
    handle = record_function(name)
    handle.__enter__()
    box = [name, handle]
    _open_by_thread.setdefault(threading.get_ident(), []).append(box)
    return box


def _exit(box: list[Any]) -> None:
    stack = _open_by_thread.get(threading.get_ident())
    if stack and stack[-1] is box:
        stack.pop()
    else:  # left on another thread (an awaited coroutine resumed elsewhere), or out of order
        for other in list(_open_by_thread.values()):
            if any(b is box for b in other):
                other[:] = [b for b in other if b is not box]
                break
    if box[1] is None:
        return  # closed when its session stopped, not continued since
    try:
        box[1].__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - a handle from a session that ended: nothing to close
        pass


def forget_open_regions() -> None:
    """No capture is open any more: regions still open cannot be continued into anything."""
    _open_by_thread.clear()


def close_open_regions() -> None:
    """Leave this thread's open regions' handles before the session stops (innermost first):
    torch's profiler stopped under an open ``record_function`` corrupts memory (a crash in the
    GC later, as with torch's own regions: capture/watchdog.py). :func:`continue_open_regions`
    enters them again in the next session; the user's exit then leaves that handle."""
    for box in reversed(_open_by_thread.get(threading.get_ident(), [])):
        handle, box[1] = box[1], None
        if handle is not None:
            try:
                handle.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - a handle of a session that already ended
                pass


def continue_open_regions() -> tuple[str, ...]:
    """Re-enter this thread's open regions in the session that just started (outermost
    first); their names, for stitching."""
    stack = _open_by_thread.get(threading.get_ident(), [])
    for box in stack:
        handle = record_function(box[0])
        handle.__enter__()
        box[1] = handle
    return tuple(box[0] for box in stack)


def _profiling() -> bool:
    # torch sets this module-level flag in its profiler's start/stop callbacks.
    return _autograd_profiler._is_profiler_enabled and _config.is_enabled()


class Region:
    """A named region; ``with`` or decorator. Reusable and thread-safe."""

    def __init__(self, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"region(name={name!r}): the name must be a non-empty string")
        self.name = name
        self._local = threading.local()

    def __enter__(self) -> "Region":
        if self.name is None:
            raise ConfigurationError("region() needs a name when used with `with`: `with neuronscope.region('decode'):`")
        handle = _enter(self.name) if _profiling() else None
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(handle)
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        handle = self._local.stack.pop()
        if handle is not None:
            _exit(handle)
        return False

    def __call__(self, func: F) -> F:
        name = str(self.name or getattr(func, "__qualname__", None) or getattr(func, "__name__", "region"))
        if inspect.iscoroutinefunction(func):

            @wrapt.decorator(enabled=_profiling)  # no profile: wrapt calls the function directly
            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                box = _enter(name)
                try:
                    return await wrapped(*args, **kwargs)
                finally:
                    _exit(box)

            return cast(F, async_wrapper(func))

        @wrapt.decorator(enabled=_profiling)
        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            box = _enter(name)
            try:
                return wrapped(*args, **kwargs)
            finally:
                _exit(box)

        return cast(F, wrapper(func))

    def __repr__(self) -> str:
        return f"<neuronscope.region {self.name!r}>"


class _RegionFactory:
    """Name a piece of code in the profile (a ``torch.profiler.record_function`` region).

        with neuronscope.region("prefill"):   # a with-block
            ...

        @neuronscope.region("decode")          # a decorator; bare @region uses the qualified name
        def decode(...): ...

    Regions nest into paths (``forward/attn``) that the summary, the spans and the report use.
    With no profile running, a region costs one flag check: less than ``record_function``.
    ``async def`` functions are supported (the region covers the awaited body).
    """

    def __call__(self, name_or_func: Any = None, /) -> Any:
        if name_or_func is None or isinstance(name_or_func, str):
            return Region(name_or_func)
        if callable(name_or_func):
            return Region()(name_or_func)
        raise ConfigurationError(f"region() takes a name or a function, not {name_or_func!r}")

    def __enter__(self) -> None:
        raise ConfigurationError("use `with neuronscope.region('name'):` — with brackets and a name")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover
        return None

    def __repr__(self) -> str:
        return "<function neuronscope.region>"


region = _RegionFactory()
region.__doc__ = _RegionFactory.__doc__
