"""AWS Trainium / Inferentia through TorchNeuron (torch-neuronx).

TorchNeuron registers itself as PyTorch's PrivateUse1 backend renamed to ``"neuron"`` and
enters the profiler as a Kineto child profiler. Capturing needs both activities
(CPU = framework dispatch, PrivateUse1 = runtime + NeuronCore) and, for the raw
NEFF/NTFF/runtime files, a ``torch_neuronx.profiling.NeuronConfig`` passed as
``experimental_config`` whose ``profile_output_dir`` we point inside the run directory.

``torch_neuronx`` is not on PyPI: it is imported lazily, only when a Neuron profile starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from ...errors import ConfigurationError, DeviceUnavailableError
from .base import DeviceBackend

__all__ = ["NeuronBackend", "NeuronOptions"]

log = logging.getLogger("neuronscope")

PROFILE_MODES = ("device", "runtime", "cpu_util", "host_memory")
_INSTALL_HINT = (
    "TorchNeuron (torch-neuronx) is not installed or not working. It is not on PyPI: install it from the "
    "AWS Neuron repository (pip install torch-neuronx --extra-index-url=https://pip.repos.neuron.amazonaws.com) "
    "or use a Neuron Deep Learning AMI / container, on a Trainium or Inferentia instance."
)


@dataclass(frozen=True)
class NeuronOptions:
    """What the Neuron runtime captures. Maps onto ``torch_neuronx.profiling.NeuronConfig``.

    ``modes``: any of ``"device"`` (NEFF + NTFF; reserves ~5 GB HBM on Trn2), ``"runtime"``
    (``ntrace.pb``, ``trace_info.pb``), ``"cpu_util"``, ``"host_memory"``.
    """

    modes: tuple[str, ...] = ("device", "runtime")
    max_events_per_nc: int | None = None
    capture_enabled_for_nc: str | None = None
    neff_cache_dir: str | None = None
    #: a Neuron system-profile JSON (events with name/timestamp/duration/group) whose runtime
    #: and hardware lanes join the spans; see docs/trainium.md for producing one
    system_profile: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        modes = tuple(m.lower() for m in self.modes) if not isinstance(self.modes, str) else (self.modes.lower(),)
        bad = [m for m in modes if m not in PROFILE_MODES]
        if bad or not modes:
            raise ConfigurationError(f"NeuronOptions(modes={self.modes!r}): use a non-empty subset of {PROFILE_MODES}")
        object.__setattr__(self, "modes", modes)
        if self.max_events_per_nc is not None and (
            not isinstance(self.max_events_per_nc, int) or self.max_events_per_nc <= 0
        ):
            raise ConfigurationError(f"NeuronOptions(max_events_per_nc={self.max_events_per_nc!r}): use a positive int")


_COMPILE_MARKERS = ("neuronx-cc", "neuronx_cc", "compile", "model_load")


def _compilation_evidence(run: Any, first_call: bool) -> str | None:
    trace = run._trace
    if trace is not None:
        hits = [n for n in trace.names if any(m in n.lower() for m in _COMPILE_MARKERS)]
        if hits:
            return f"events such as {hits[0]!r}"
    if first_call:
        return "first call of this function, without warmup="
    return None


def refuse_env_capture() -> None:
    """Environment-variable capture (NEURON_RT_INSPECT_*) and torch.profiler capture must not mix."""
    import os

    if os.environ.get("NEURON_RT_INSPECT_ENABLE", "").strip() not in ("", "0"):
        raise ConfigurationError(
            "NEURON_RT_INSPECT_ENABLE is set: the Neuron runtime is already capturing through environment "
            "variables, which must not be combined with torch.profiler capture. Unset NEURON_RT_INSPECT_* to use "
            "profile_neuron, or use `neuronscope run --neuron-inspect script.py` for whole-program capture."
        )


def privateuse1_is_neuron() -> bool:
    try:
        return torch._C._get_privateuse1_backend_name() == "neuron"
    except Exception:  # very old torch without the accessor  # noqa: BLE001
        log.debug("cannot read PrivateUse1 backend name", exc_info=True)
        return False


def _profiling_module() -> Any | None:
    """``torch_neuronx.profiling``, or None when TorchNeuron is absent (imported lazily)."""
    try:
        return importlib.import_module("torch_neuronx.profiling")
    except Exception as exc:  # ImportError, or the PyPI placeholder's "WRONG PACKAGE"  # noqa: BLE001
        log.debug("torch_neuronx.profiling unavailable: %r", exc)
        return None


class NeuronBackend(DeviceBackend):
    name = "neuron"

    def __init__(self, options: NeuronOptions | None = None) -> None:
        self.options = options or NeuronOptions()
        self._config: Any = None

    @classmethod
    def is_available(cls) -> bool:
        # Cheap checks only: this runs for device="auto" on every capture start.
        return privateuse1_is_neuron() or importlib.util.find_spec("torch_neuronx") is not None

    @classmethod
    def install_hint(cls) -> str:
        return _INSTALL_HINT

    def activities(self) -> list[ProfilerActivity]:
        if not privateuse1_is_neuron():
            # find_spec saw a torch_neuronx; importing it registers the backend.
            try:
                importlib.import_module("torch_neuronx")
            except Exception as exc:  # noqa: BLE001
                raise DeviceUnavailableError(f"importing torch_neuronx failed ({exc!r}). {_INSTALL_HINT}") from exc
        return [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

    def experimental_config(self, raw_dir: Path | None, *, all_threads: bool = False) -> Any | None:
        # NeuronConfig carries TorchNeuron's own options; torch's profile_all_threads cannot be
        # added to it, so on Neuron a profile records the thread that started it.
        profiling = _profiling_module()
        if profiling is None or raw_dir is None:
            return None
        mode_enum = profiling.ProfileMode
        kwargs: dict[str, Any] = {
            "modes": [getattr(mode_enum, m.upper()) for m in self.options.modes],
            "profile_output_dir": str(raw_dir),
        }
        if self.options.max_events_per_nc is not None:
            kwargs["max_events_per_nc"] = self.options.max_events_per_nc
        if self.options.capture_enabled_for_nc is not None:
            kwargs["capture_enabled_for_nc"] = self.options.capture_enabled_for_nc
        if self.options.neff_cache_dir is not None:
            kwargs["neff_cache_dir"] = self.options.neff_cache_dir
        kwargs.update(self.options.extra)
        self._config = profiling.NeuronConfig(**kwargs)
        return self._config

    def synchronize(self) -> None:
        neuron = getattr(torch, "neuron", None)
        sync = getattr(neuron, "synchronize", None)
        if sync is None:
            sync = getattr(importlib.import_module("torch_neuronx"), "synchronize", None)
        if sync is not None:
            sync()

    def on_trace_ready(self, prof: Any, raw_dir: Path | None) -> None:
        # TorchNeuron's own exporter post-processes its files next to the runtime's output.
        profiling = _profiling_module()
        if profiling is not None and self._config is not None and hasattr(profiling, "NeuronProfiler"):
            profiling.NeuronProfiler(self._config).export_trace(prof)

    def finish_run(self, run: Any, raw_dir: Path | None, *, first_call: bool = False) -> list[str]:
        from .neuron_artifacts import find_artifacts

        notes: list[str] = []
        info: dict[str, Any] = {"modes": list(self.options.modes)}
        compile_hint = _compilation_evidence(run, first_call)
        if compile_hint:
            info["compilation_suspected"] = True
            run.warnings.append(
                f"this profile likely contains compilation ({compile_hint}): warm up first "
                "(profile_neuron(warmup=3) on a decorator, or run 3+ iterations before profiling)"
            )
        if self.options.system_profile:
            from ...sinks.otel.lanes import read_system_profile

            try:
                run._system_events = read_system_profile(self.options.system_profile)
                info["system_profile"] = str(self.options.system_profile)
            except Exception as exc:  # noqa: BLE001 - a bad side file must not lose the run
                run.warnings.append(f"system profile not read: {exc}")
        elif shutil.which("neuron-explorer") is None:
            notes.append(
                "runtime/hardware lanes come from the trace only; for the full system profile install "
                "aws-neuronx-tools (neuron-explorer) and pass NeuronOptions(system_profile=...)"
            )
        if raw_dir is not None:
            # Absolute paths: the printed Neuron Explorer command must work from anywhere.
            artifacts = find_artifacts(raw_dir.resolve(), device_mode="device" in self.options.modes)
            info.update(artifacts.to_manifest())
            run.warnings.extend(artifacts.all_problems())
            notes += [f"open in Neuron Explorer: {cmd}" for cmd in artifacts.explorer_commands()[:4]]
        run.manifest["neuron"] = info
        return notes

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"device": self.name, "neuron_modes": list(self.options.modes)}
        try:
            mod = importlib.import_module("torch_neuronx")
            info["torch_neuronx"] = getattr(mod, "__version__", "unknown")
            info["emulated"] = bool(getattr(mod, "__neuronscope_emulator__", False))
        except Exception:  # noqa: BLE001
            log.debug("torch_neuronx version unavailable", exc_info=True)
        return info
