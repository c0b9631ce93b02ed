"""Stand-ins for ``torch_neuronx``, ``torch_neuronx.profiling`` and ``torch.neuron``.

Only :func:`neuronscope.testing.install_emulated_neuron` uses this module. It
builds module objects that mirror the documented TorchNeuron profiling API:

* ``torch_neuronx.profiling.ProfileMode`` (``DEVICE``, ``RUNTIME``,
  ``CPU_UTIL``, ``HOST_MEMORY``),
* ``torch_neuronx.profiling.NeuronConfig``, a subclass of
  ``torch._C._profiler._ExperimentalConfig`` meant for
  ``torch.profiler.profile(experimental_config=...)``,
* ``torch_neuronx.profiling.NeuronProfiler`` whose ``export_trace`` is an
  ``on_trace_ready`` callback,
* ``torch_neuronx.synchronize()`` and ``torch.neuron.synchronize()``.

How the settings reach the emulated runtime: like TorchNeuron, ``NeuronConfig``
passes them through ``_ExperimentalConfig(custom_profiler_config=...)`` as
``"key:value;key:value"`` (``profile_output_dir``, ``max_events_per_nc``,
``capture_enabled_for_nc``, ``host_memory`` are TorchNeuron's documented keys;
``device_profile``, ``system_profile``, ``cpu_util``, ``neff_cache_dir`` and
``precache_node_info`` are the emulator's names for the other settings).
PyTorch hands that string to Kineto, Kineto to the child profiler's
``configure()``, so a plain ``_ExperimentalConfig(custom_profiler_config=
"profile_output_dir:/tmp/x")`` works too. Kineto reads it as one
``CUSTOM_CONFIG=...`` line, where ``#`` starts a comment and ``=`` splits the
line, so the characters ``% # = ; \\n \\r`` are %-encoded in values.
"""

from __future__ import annotations

import enum
import os
import re
import sys
import types
from typing import Any, Iterable

from .. import _env

#: Attribute set on every fake module so code can tell it is the emulator.
EMULATOR_MARKER = "__neuronscope_emulator__"

_ENCODE = {c: f"%{ord(c):02X}" for c in "%#=;\n\r"}
_NC_LIST = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


#: the emulated device allocator (torch.neuron.memory_stats()); EmulatedNeuron.allocate/free move it
DEVICE_MEMORY: dict[str, int] = {
    "allocated_bytes.all.current": 0,
    "allocated_bytes.all.peak": 0,
    "reserved_bytes.all.current": 0,
    "reserved_bytes.all.peak": 0,
}


def _encode(value: Any) -> str:
    return "".join(_ENCODE.get(c, c) for c in str(value))


def make_device_module() -> types.ModuleType:
    """Return the module registered as ``torch.neuron``.

    ``synchronize()`` is a no-op: the emulator derives its device timeline
    from the recorded ops when the profiler stops, so there is never work in
    flight. ``is_available()`` is ``False`` because no tensor can be placed on
    the emulated device; it exists for profiling only.
    """
    mod = types.ModuleType("torch.neuron", "Emulated Neuron device module (neuronscope.testing).")

    def synchronize(device: Any = None) -> None:
        """Wait for the device (no-op on the emulator)."""

    def is_available() -> bool:
        """``False``: the emulated device cannot hold tensors."""
        return False

    def device_count() -> int:
        """Number of NeuronCores visible (``NEURON_RT_NUM_CORES``, default 1)."""
        return max(1, _env.env_int("NEURON_RT_NUM_CORES", 1))

    def current_device() -> int:
        """Always core 0."""
        return 0

    def memory_stats(device: Any = None) -> dict[str, int]:
        """The emulated device allocator's totals, in PyTorch's accelerator allocator keys
        (``allocated_bytes.all.current`` / ``.peak``, ``reserved_bytes.all.current`` / ``.peak``).
        The emulator holds no tensors: the values are what the test set with
        ``EmulatedNeuron.allocate()`` / ``.free()``."""
        return dict(DEVICE_MEMORY)

    def memory_allocated(device: Any = None) -> int:
        """``allocated_bytes.all.current`` of :func:`memory_stats`."""
        return DEVICE_MEMORY["allocated_bytes.all.current"]

    def max_memory_allocated(device: Any = None) -> int:
        """``allocated_bytes.all.peak`` of :func:`memory_stats`."""
        return DEVICE_MEMORY["allocated_bytes.all.peak"]

    for fn in (synchronize, is_available, device_count, current_device, memory_stats, memory_allocated, max_memory_allocated):
        fn.__module__ = mod.__name__
        setattr(mod, fn.__name__, fn)
    setattr(mod, EMULATOR_MARKER, True)
    return mod


def make_torch_neuronx(emu: Any) -> tuple[types.ModuleType, types.ModuleType]:
    """Build the fake ``torch_neuronx`` package and its ``profiling`` submodule.

    ``emu`` is the :class:`~neuronscope.testing.EmulatedNeuron`; the profiler
    uses it to find the directory the emulated runtime last wrote to.
    """
    import torch

    pkg = types.ModuleType(
        "torch_neuronx",
        "Emulated torch_neuronx (neuronscope.testing); not AWS's package.",
    )
    pkg.__path__ = []  # a package, so ``import torch_neuronx.profiling`` works
    prof_mod = types.ModuleType(
        "torch_neuronx.profiling",
        "Emulated torch_neuronx.profiling (neuronscope.testing).",
    )

    class ProfileMode(enum.Enum):
        """What the Neuron runtime captures (and which raw files it writes).

        ``DEVICE``: ``.neff`` + ``.ntff``; ``RUNTIME``: ``ntrace.pb`` +
        ``trace_info.pb``; ``CPU_UTIL``: ``cpu_util.pb``; ``HOST_MEMORY``:
        ``host_mem.pb``.
        """

        DEVICE = "device"
        RUNTIME = "runtime"
        CPU_UTIL = "cpu_util"
        HOST_MEMORY = "host_memory"

    NeuronConfig = _neuron_config_class(emu, ProfileMode)
    NeuronProfiler = _neuron_profiler_class(emu, NeuronConfig)

    def synchronize(device: Any = None) -> None:
        """Wait for the Neuron device (no-op on the emulator)."""
        torch.neuron.synchronize(device)

    for obj in (ProfileMode, NeuronConfig, NeuronProfiler):
        obj.__module__ = prof_mod.__name__
        setattr(prof_mod, obj.__name__, obj)
    synchronize.__module__ = pkg.__name__
    pkg.synchronize = synchronize
    pkg.profiling = prof_mod
    pkg.__version__ = "0.0.0+neuronscope.emulator"
    for mod in (pkg, prof_mod):
        setattr(mod, EMULATOR_MARKER, True)
        mod.__file__ = __file__
    return pkg, prof_mod


def _neuron_config_class(emu: Any, ProfileMode: Any) -> type:
    """``torch_neuronx.profiling.NeuronConfig``, built per emulator (its sessions are ``emu``'s)."""
    from torch._C._profiler import _ExperimentalConfig

    class NeuronConfig(_ExperimentalConfig):
        """Neuron profiling options, passed as ``experimental_config=``.

        Args:
            modes: ``ProfileMode`` values; default ``[DEVICE, RUNTIME]``.
            profile_output_dir: where the (emulated) runtime writes raw files.
            max_events_per_nc: device events kept per NeuronCore; the emulator
                overwrites the oldest executions beyond it and prints the runtime's
                "Warning: N trace events were dropped" on stderr (see
                :mod:`neuronscope.testing`).
            capture_enabled_for_nc: cores to capture, e.g. ``"0,1,2-5"``;
                ``None`` captures every visible core.
            neff_cache_dir: accepted; no effect on the emulator.
            precache_node_info: accepted; no effect on the emulator.
        """

        def __init__(
            self,
            modes: Iterable[ProfileMode] | None = None,
            profile_output_dir: str | os.PathLike[str] = "./profile_output",
            max_events_per_nc: int = 1_000_000,
            capture_enabled_for_nc: str | None = None,
            neff_cache_dir: str | os.PathLike[str] | None = None,
            precache_node_info: bool = True,
        ) -> None:
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME] if modes is None else list(modes)
            for m in modes:
                if not isinstance(m, ProfileMode):
                    raise TypeError(f"modes must hold ProfileMode values, got {m!r}")
            if int(max_events_per_nc) < 0:
                raise ValueError("max_events_per_nc must be >= 0")
            if capture_enabled_for_nc is not None and not _NC_LIST.match(str(capture_enabled_for_nc)):
                raise ValueError(f"capture_enabled_for_nc must look like '0,1,2-5', got {capture_enabled_for_nc!r}")
            items = {
                "profile_output_dir": os.fspath(profile_output_dir),
                "max_events_per_nc": int(max_events_per_nc),
                "device_profile": ProfileMode.DEVICE in modes,
                "system_profile": ProfileMode.RUNTIME in modes,
                "cpu_util": ProfileMode.CPU_UTIL in modes,
                "host_memory": ProfileMode.HOST_MEMORY in modes,
                "precache_node_info": bool(precache_node_info),
            }
            if capture_enabled_for_nc is not None:
                items["capture_enabled_for_nc"] = str(capture_enabled_for_nc).replace(" ", "")
            if neff_cache_dir is not None:
                items["neff_cache_dir"] = os.fspath(neff_cache_dir)
            text = ";".join(f"{k}:{_encode(str(v).lower() if isinstance(v, bool) else v)}" for k, v in items.items())
            super().__init__(custom_profiler_config=text)
            self.modes = modes
            self.profile_output_dir = os.fspath(profile_output_dir)
            self.max_events_per_nc = int(max_events_per_nc)
            self.capture_enabled_for_nc = capture_enabled_for_nc
            self.neff_cache_dir = None if neff_cache_dir is None else os.fspath(neff_cache_dir)
            self.precache_node_info = bool(precache_node_info)

        def get_session_dir(self) -> str:
            """Directory of the last capture written for ``profile_output_dir``.

            Session layout: ``<dir>/<instance-id>_pid_<pid>/<timestamp>``; model
            layout: ``<dir>/<instance-id>_pid_<pid>`` (or its ``<timestamp>``
            subdirectory when system-profile files were written). Empty string
            before the first capture.
            """
            return emu.extension.last_session_dir(self.profile_output_dir)

        def __repr__(self) -> str:
            return (
                f"NeuronConfig(modes={self.modes!r}, profile_output_dir={self.profile_output_dir!r}, "
                f"max_events_per_nc={self.max_events_per_nc!r}, "
                f"capture_enabled_for_nc={self.capture_enabled_for_nc!r})"
            )

    return NeuronConfig


def _neuron_profiler_class(emu: Any, NeuronConfig: Any) -> type:
    """``torch_neuronx.profiling.NeuronProfiler``, built per emulator."""
    import torch

    class NeuronProfiler:
        """Exports the framework trace next to the runtime's raw files.

        ``export_trace(prof)`` is meant as ``on_trace_ready``; it writes
        ``trace.json`` into the capture's session directory (model layout:
        ``neuron_framework_trace_rank_<RANK>.json`` in the instance directory)
        and returns the path. The raw files themselves are written by the
        emulated runtime when the profiler stops, whether or not this
        callback is used.
        """

        def __init__(self, config: NeuronConfig) -> None:
            self.config = config

        def export_trace(self, prof: Any) -> str:
            cfg = self.config
            base = cfg.get_session_dir()
            if not base:  # nothing written by the runtime (e.g. no modes)
                base = os.path.join(
                    cfg.profile_output_dir,
                    f"{emu.instance_id}_pid_{os.getpid()}",
                )
            os.makedirs(base, exist_ok=True)
            if emu.layout == "model" and os.path.basename(base).startswith(emu.instance_id):
                name = f"neuron_framework_trace_rank_{_env.env_str('RANK', '0')}.json"
            else:
                name = "trace.json"
            path = os.path.join(base, name)
            prof.export_chrome_trace(path)
            return path

        def profile(self, **kwargs: Any) -> Any:
            """A ``torch.profiler.profile`` set up for Neuron (CPU + PrivateUse1)."""
            kwargs.setdefault(
                "activities",
                [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1],
            )
            kwargs.setdefault("experimental_config", self.config)
            kwargs.setdefault("on_trace_ready", self.export_trace)
            return torch.profiler.profile(**kwargs)

    return NeuronProfiler


def install_modules(emu: Any) -> bool:
    """Put the fake ``torch_neuronx`` modules into ``sys.modules``.

    Returns ``False`` (and installs nothing) when a real, importable
    ``torch_neuronx`` is present. PyPI's placeholder package of that name,
    whose import raises, does not count as real.
    """
    existing = sys.modules.get("torch_neuronx")
    if existing is not None and getattr(existing, EMULATOR_MARKER, False):
        return True
    if existing is None:
        import importlib
        import importlib.util

        if importlib.util.find_spec("torch_neuronx") is not None:
            try:
                importlib.import_module("torch_neuronx")
                return False
            except Exception:  # noqa: BLE001 - the PyPI placeholder raises on import (any error)
                sys.modules.pop("torch_neuronx", None)
    else:
        return False
    pkg, prof_mod = make_torch_neuronx(emu)
    sys.modules["torch_neuronx"] = pkg
    sys.modules["torch_neuronx.profiling"] = prof_mod
    return True
