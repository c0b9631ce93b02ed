"""AWS Trainium / Inferentia through TorchNeuron (torch-neuronx).

TorchNeuron registers itself as PyTorch's PrivateUse1 backend renamed to ``"neuron"`` and
enters the profiler as a Kineto child profiler. Capturing needs both activities
(CPU = framework dispatch, PrivateUse1 = runtime + NeuronCore) and, for the raw
NEFF/NTFF/runtime files, a ``torch_neuronx.profiling.NeuronConfig`` passed as
``experimental_config`` whose ``profile_output_dir`` we point inside the run directory.

``torch_neuronx`` is not on PyPI: it is imported lazily, only when a Neuron profile starts.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.profiler import ProfilerActivity

from ... import _env
from ...errors import ConfigurationError, DeviceUnavailableError
from ...result import CaptureFacts, DeviceFacts
from .base import DeviceBackend

if TYPE_CHECKING:
    from ...trace.model import Trace

__all__ = ["NeuronBackend", "NeuronOptions", "StderrTee"]

log = logging.getLogger("neuronscope")

PROFILE_MODES = ("device", "runtime", "cpu_util", "host_memory")
_INSTALL_HINT = (
    "TorchNeuron (torch-neuronx) is not installed or not working. It is not on PyPI: install it from the "
    "AWS Neuron repository (pip install torch-neuronx --extra-index-url=https://pip.repos.neuron.amazonaws.com) "
    "or use a Neuron Deep Learning AMI / container, on a Trainium or Inferentia instance."
)


_EXPLORER_MODES = ("auto", "on", "off")
#: NeuronConfig(neff_cache_dir=...) is left unset when NeuronOptions(neff_cache_dir="")
_NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
_NUM_WARMUP_ENV = "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP"


@dataclass(frozen=True)
class NeuronOptions:
    """What the Neuron runtime captures, and what neuronscope does with it afterwards.

    Maps onto ``torch_neuronx.profiling.NeuronConfig`` (how-to-profile-workload.rst,
    "NeuronConfig parameters"):

    ``modes``: any of ``"device"`` (NEFF + NTFF; reserves ~5 GB HBM on Trn2), ``"runtime"``
    (``ntrace.pb``, ``trace_info.pb``), ``"cpu_util"``, ``"host_memory"``.
    ``max_events_per_nc``, ``capture_enabled_for_nc`` (``"0,1,2-5"``), ``precache_node_info``
    (TorchNeuron's default: True) are passed through as given.
    ``neff_cache_dir``: where TorchNeuron finds the cached NEFFs it copies next to the NTFFs.
    Default: ``$TORCH_NEURONX_NEFF_CACHE_DIR`` when set, else the run's ``neuron/`` folder;
    ``""`` leaves TorchNeuron's own default.
    ``num_warmup``: ``NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP`` for the capture (Neuron
    2.33+, model-mode device profiles: executions of each NEFF to skip before capturing).

    After the profile: ``explorer`` (``"auto"`` | ``"on"`` | ``"off"``) runs ``neuron-explorer``
    for the device metrics when it is installed and the NTFFs total at most
    ``explorer_max_ntff_bytes`` (``"on"``: whatever the size), each step within
    ``explorer_timeout_s``; ``watch_stderr`` tees the process's stderr during the capture to
    catch the runtime's ``Warning: N trace events were dropped``.
    """

    modes: tuple[str, ...] = ("device", "runtime")
    max_events_per_nc: int | None = None
    capture_enabled_for_nc: str | None = None
    neff_cache_dir: str | None = None
    precache_node_info: bool | None = None
    num_warmup: int | None = None
    #: a Neuron system-profile JSON (``neuron-explorer view -d <dir> --output-format json``)
    #: whose runtime and hardware lanes join the spans; found in <run>/explorer/ when not given
    system_profile: str | None = None
    explorer: str = "auto"
    explorer_timeout_s: float = 600.0
    explorer_max_ntff_bytes: int = 1024**3
    watch_stderr: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        modes = tuple(m.lower() for m in self.modes) if not isinstance(self.modes, str) else (self.modes.lower(),)
        bad = [m for m in modes if m not in PROFILE_MODES]
        if bad or not modes:
            raise ConfigurationError(f"NeuronOptions(modes={self.modes!r}): use a non-empty subset of {PROFILE_MODES}")
        object.__setattr__(self, "modes", modes)
        for name in ("max_events_per_nc", "explorer_max_ntff_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigurationError(f"NeuronOptions({name}={value!r}): use a positive int")
        if self.num_warmup is not None and (
            not isinstance(self.num_warmup, int) or isinstance(self.num_warmup, bool) or self.num_warmup < 0
        ):
            raise ConfigurationError(f"NeuronOptions(num_warmup={self.num_warmup!r}): use an int >= 0")
        if self.precache_node_info is not None and not isinstance(self.precache_node_info, bool):
            raise ConfigurationError(f"NeuronOptions(precache_node_info={self.precache_node_info!r}): use True or False")
        if self.explorer not in _EXPLORER_MODES:
            raise ConfigurationError(f"NeuronOptions(explorer={self.explorer!r}): use one of {_EXPLORER_MODES}")
        if (
            not isinstance(self.explorer_timeout_s, (int, float))
            or isinstance(self.explorer_timeout_s, bool)
            or self.explorer_timeout_s <= 0
        ):
            raise ConfigurationError(
                f"NeuronOptions(explorer_timeout_s={self.explorer_timeout_s!r}): use a positive number of seconds"
            )


_COMPILE_MARKERS = ("neuronx-cc", "neuronx_cc", "compile", "model_load")


def _compilation_evidence(trace: Any, first_call: bool) -> str | None:
    if trace is not None:
        hits = [n for n in trace.names if any(m in n.lower() for m in _COMPILE_MARKERS)]
        if hits:
            return f"events such as {hits[0]!r}"
    if first_call:
        return "first call of this function, without warmup="
    return None


def _neff_cache_dir(option: str | None, raw_dir: Path) -> tuple[str, str] | None:
    """Where TorchNeuron's cached NEFFs are, so it copies them next to the NTFFs on stop.

    how-to-profile-workload.rst ("Ensuring NEFFs are in your output directory"): without it
    the NEFFs may stay in the compiler cache and the NTFFs cannot be processed.
    """
    if option is not None:
        return (option, "NeuronOptions(neff_cache_dir=...)") if option else None
    env = _env.env_str(_NEFF_CACHE_ENV, None)
    if env:
        return env, _NEFF_CACHE_ENV
    return str(raw_dir), "default: the run's neuron/ folder"


def refuse_env_capture() -> None:
    """Environment-variable capture (NEURON_RT_INSPECT_*) and torch.profiler capture must not mix."""
    if _env.env_str("NEURON_RT_INSPECT_ENABLE", "0") != "0":
        raise ConfigurationError(
            "NEURON_RT_INSPECT_ENABLE is set: the Neuron runtime is already capturing through environment "
            "variables, which must not be combined with torch.profiler capture. Unset NEURON_RT_INSPECT_* to use "
            "profile_neuron, or use `neuronscope run --neuron-inspect script.py` for whole-program capture."
        )


@functools.cache
def _torch_neuronx_installed() -> bool:
    """Whether ``torch_neuronx`` can be imported, looked up once: a lookup scans every
    ``sys.path`` entry (50-200 us, more beside busy processes), on the caller's thread at each
    capture's start. A package installed while the process runs is seen at its next start."""
    return importlib.util.find_spec("torch_neuronx") is not None


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


_MAX_LOG_SCAN = 8 * 1024 * 1024  # the runtime prints its summary last: read the log's tail


class StderrTee:
    """For the length of a Neuron capture, file descriptor 2 goes through ``tee``.

    The Neuron runtime is native code: it writes to fd 2, not to ``sys.stderr``. The tee
    is a separate process (``tee -i -a <log>``, in its own session so Ctrl-C does not stop
    it), so the user's stderr keeps its order, reaches the terminal as it is written and
    survives a crash of this process; a copy lands in ``log`` for :meth:`stop` to scan.
    POSIX only; anything that goes wrong leaves fd 2 as it was.
    """

    _lock = threading.Lock()

    def __init__(self, log: Path) -> None:
        self.log = log
        self._saved: int | None = None
        self._probe: int | None = None  # our copy of the pipe's read end: how much is unread
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def start(self) -> bool:
        tee = shutil.which("tee")
        if os.name != "posix" or tee is None:
            return False
        with self._lock:
            if self._saved is not None:
                return True
            read_end = write_end = saved = None
            try:
                _flush_stderr()
                saved = os.dup(2)
                read_end, write_end = os.pipe()
                self._proc = subprocess.Popen(
                    [tee, "-i", "-a", str(self.log)],
                    stdin=read_end,
                    stdout=saved,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                    start_new_session=True,
                )
                os.dup2(write_end, 2)
                self._saved, self._probe, read_end = saved, read_end, None
                return True
            except OSError as exc:
                log.debug("neuronscope: stderr tee not started: %s", exc)
                if saved is not None:
                    os.close(saved)
                if self._proc is not None:
                    self._proc.kill()
                    self._proc = None
                return False
            finally:
                for fd in (read_end, write_end):
                    if fd is not None:
                        os.close(fd)

    def stop(self, timeout_s: float = 2.0) -> str:
        """Give fd 2 back, wait for the tee to forward everything, return the captured text."""
        with self._lock:
            saved, probe, proc = self._saved, self._probe, self._proc
            self._saved = self._probe = self._proc = None
            if saved is None:
                return ""
            try:
                _flush_stderr()
                os.dup2(saved, 2)  # drops this process's write end: the tee sees EOF ...
            finally:
                os.close(saved)
            try:
                if proc is not None:
                    _wait_drained(proc, probe, timeout_s)
            finally:
                if probe is not None:
                    os.close(probe)
        try:
            with open(self.log, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - _MAX_LOG_SCAN))
                text = fh.read().decode("utf-8", errors="replace")
            self.log.unlink()
        except OSError:
            return ""
        return text


def _wait_drained(proc: subprocess.Popen[bytes], probe: int | None, timeout_s: float) -> None:
    """Until the tee exits (EOF) -- or, when a child forked during the capture (a DataLoader
    worker) still holds the pipe, until the pipe is empty: then the tee has everything."""
    import array
    import fcntl
    import termios
    import time

    deadline = time.monotonic() + timeout_s
    empty_polls = 0
    while time.monotonic() < deadline:
        try:
            proc.wait(0.003)  # the usual case: EOF, and the tee exits within a millisecond
            return
        except subprocess.TimeoutExpired:
            pass
        unread = array.array("i", [0])
        try:
            fcntl.ioctl(probe, termios.FIONREAD, unread, True)  # type: ignore[arg-type]
            empty_polls = empty_polls + 1 if unread[0] == 0 else 0
        except (OSError, TypeError):
            empty_polls = 0  # cannot tell: wait for the exit
        if empty_polls >= 3:
            log.debug("neuronscope: stderr tee still held open by a child process; pipe drained, not waiting")
            return


def _flush_stderr() -> None:
    with contextlib.suppress(Exception):  # a closed or replaced sys.stderr
        sys.stderr.flush()


class NeuronBackend(DeviceBackend):
    name = "neuron"
    needs_run_dir_at_start = True  # the runtime writes its raw files during the profile

    def __init__(self, options: NeuronOptions | None = None) -> None:
        refuse_env_capture()  # a capture the environment variables already run would collide with ours
        self.options = options or NeuronOptions()
        self._config: Any = None
        self._neff_cache: tuple[str, str] | None = None  # (dir, where the choice came from)
        self._tee: StderrTee | None = None
        self._dropped: Any = None  # DroppedEvents the runtime reported on stderr during the capture
        self._env_restore: dict[str, str | None] = {}

    @classmethod
    def is_available(cls) -> bool:
        # Cheap checks only: this runs for device="auto" on every capture start.
        return privateuse1_is_neuron() or "torch_neuronx" in sys.modules or _torch_neuronx_installed()

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
        opts = self.options
        mode_enum = profiling.ProfileMode
        kwargs: dict[str, Any] = {
            "modes": [getattr(mode_enum, m.upper()) for m in opts.modes],
            "profile_output_dir": str(raw_dir),
        }
        if opts.max_events_per_nc is not None:
            kwargs["max_events_per_nc"] = opts.max_events_per_nc
        if opts.capture_enabled_for_nc is not None:
            kwargs["capture_enabled_for_nc"] = opts.capture_enabled_for_nc
        if opts.precache_node_info is not None:
            kwargs["precache_node_info"] = opts.precache_node_info
        self._neff_cache = _neff_cache_dir(opts.neff_cache_dir, raw_dir)
        if self._neff_cache is not None:
            kwargs["neff_cache_dir"] = self._neff_cache[0]
        kwargs.update(opts.extra)
        self._config = profiling.NeuronConfig(**kwargs)
        if opts.num_warmup is not None:
            self._set_env(_NUM_WARMUP_ENV, str(opts.num_warmup))
        if opts.watch_stderr:
            self._start_tee(raw_dir.parent / ".neuron-stderr.log")
        return self._config

    def _set_env(self, key: str, value: str) -> None:
        self._env_restore.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def _restore_env(self) -> None:
        for key, old in self._env_restore.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        self._env_restore.clear()

    def _start_tee(self, log_file: Path) -> None:
        tee = StderrTee(log_file)
        if tee.start():
            self._tee = tee
            # Backstop: a profile that never reaches on_trace_ready still gives fd 2 back.
            weakref.finalize(self, tee.stop, 0.5)

    def _stop_capture_side_effects(self) -> None:
        from .neuron_artifacts import parse_dropped_events

        tee, self._tee = self._tee, None
        if tee is not None:
            try:
                self._dropped = parse_dropped_events(tee.stop()) or self._dropped
            except Exception:  # noqa: BLE001 - never into the user's code
                log.debug("neuronscope: stopping the stderr tee failed", exc_info=True)
        self._restore_env()

    def synchronize(self) -> None:
        neuron = getattr(torch, "neuron", None)
        sync = getattr(neuron, "synchronize", None)
        if sync is None:
            sync = getattr(importlib.import_module("torch_neuronx"), "synchronize", None)
        if sync is not None:
            sync()

    def on_trace_ready(self, prof: Any, raw_dir: Path | None) -> None:
        # The runtime has stopped (it prints its messages then): stderr and env are the user's again.
        # With schedule=, only the first window's messages are caught.
        self._stop_capture_side_effects()
        # TorchNeuron's own exporter post-processes its files next to the runtime's output.
        profiling = _profiling_module()
        if profiling is not None and self._config is not None and hasattr(profiling, "NeuronProfiler"):
            profiling.NeuronProfiler(self._config).export_trace(prof)

    def finish_run(self, name: str, trace: Trace, raw_dir: Path | None, *, first_call: bool = False) -> DeviceFacts:
        from .neuron_artifacts import find_artifacts
        from .neuron_explorer import find_explorer

        self._stop_capture_side_effects()  # normally done in on_trace_ready already
        opts = self.options
        notes: list[str] = []
        warnings: list[str] = []
        info: dict[str, Any] = {"modes": list(opts.modes)}
        compile_hint = _compilation_evidence(trace, first_call)
        if compile_hint:
            info["compilation_suspected"] = True
            warnings.append(
                f"this profile likely contains compilation ({compile_hint}): warm up first "
                "(profile_neuron(warmup=3) on a decorator, or run 3+ iterations before profiling)"
            )
        if self._neff_cache is not None:
            info["neff_cache_dir"], info["neff_cache_dir_source"] = self._neff_cache
        dropped, self._dropped = self._dropped, None  # with schedule=: reported with the first window only
        artifacts = None
        if raw_dir is not None:
            # Absolute paths: the printed Neuron Explorer commands must work from anywhere.
            raw = raw_dir.resolve()
            artifacts = find_artifacts(
                raw, device_mode="device" in opts.modes, display_name=name, explorer_out=raw.parent / "explorer"
            )
            info.update(artifacts.to_manifest())
            warnings.extend(artifacts.all_problems())
            notes += artifacts.all_notes()
        if dropped is not None:
            info["dropped_events"] = dropped.to_dict()
            warnings.append(dropped.problem())
        profile = None
        if opts.system_profile:
            profile = self._read_system_profile(opts.system_profile, info, warnings)
        elif raw_dir is None and find_explorer() is None:
            notes.append(
                "runtime/hardware lanes come from the trace only; for the full system profile install "
                "aws-neuronx-tools (neuron-explorer) or pass NeuronOptions(system_profile=...)"
            )
        return DeviceFacts(
            manifest={"neuron": info}, notes=tuple(notes), warnings=tuple(warnings), system_profile=profile, handoff=artifacts
        )

    def enrich(self, name: str, raw_dir: Path | None, facts: DeviceFacts) -> DeviceFacts:
        """Neuron Explorer over the run's NTFFs (subprocesses, up to ``explorer_timeout_s``)."""
        from .neuron_explorer import collect_explorer, explorer_notes

        artifacts = facts.handoff
        if raw_dir is None or artifacts is None:
            return DeviceFacts()
        opts = self.options
        raw = raw_dir.resolve()
        info = dict(facts.manifest.get("neuron") or {})
        notes: list[str] = []
        warnings: list[str] = []
        explorer = collect_explorer(
            raw.parent,
            artifacts,
            mode=opts.explorer,
            timeout_s=opts.explorer_timeout_s,
            max_ntff_bytes=opts.explorer_max_ntff_bytes,
        )
        info["explorer"] = explorer.to_manifest()
        notes += list(explorer_notes(explorer))
        warnings.extend(explorer.errors)
        if "dropped_events" not in info and explorer.dropped is not None:
            info["dropped_events"] = explorer.dropped.to_dict()
            warnings.append(explorer.dropped.problem())
        profile = None
        if facts.system_profile is None and explorer.system_profile:
            profile = self._read_system_profile(explorer.system_profile, info, warnings)
        commands = artifacts.explorer_commands()
        notes += [f"open in Neuron Explorer: {cmd}" for cmd in commands[:3]]
        if len(commands) > 3:  # the json / perfetto exports, the per-pair views
            notes.append(f"{len(commands) - 3} more Explorer commands: neuronscope artifacts <run dir>")
        return DeviceFacts(manifest={"neuron": info}, notes=tuple(notes), warnings=tuple(warnings), system_profile=profile)

    @staticmethod
    def _read_system_profile(path: str, info: dict[str, Any], warnings: list[str]) -> Any:
        from ...sinks.otel.lanes import load_system_profile

        try:
            profile = load_system_profile(path)
        except Exception as exc:  # noqa: BLE001 - a bad side file must not lose the run
            warnings.append(f"system profile not read: {exc}")
            return None
        info["system_profile"] = profile.facts()
        return profile

    # -- memory ----------------------------------------------------------------------------------
    def memory_start(self, mode: str) -> dict[str, Any]:
        from .neuron_memory import neuron_memory_stats

        return {"neuron_memory_stats": neuron_memory_stats()}  # the device allocator at the start

    def memory_end(self, mode: str) -> dict[str, Any]:
        from .neuron_memory import neuron_memory_stats

        return {"neuron_memory_stats": neuron_memory_stats()}  # ... and at the end (the device synchronised)

    def memory_facts(self, capture: CaptureFacts, *, error: str | None, start_ns: int) -> dict[str, Any]:
        from .neuron_memory import neuron_oom_table

        facts: dict[str, Any] = {}
        # the runtime's OOM table, when the profiled code failed and the runtime wrote one
        table = neuron_oom_table(since_ns=start_ns - 1_000_000_000) if error else None
        if table is not None:
            facts["neuron_oom_table"] = table
        start = capture.device_start.get("neuron_memory_stats")
        end = capture.device_end.get("neuron_memory_stats")
        if end:
            facts["neuron_memory_stats"] = {"start": start, "end": end}
        return facts

    def device_limits(self) -> Any:
        """A NeuronCore's roofs, by the EC2 instance family (trn1/inf2/trn2/trn3) this runs on."""
        from ...analysis.roofs import neuron_core_limits

        try:
            instance = Path("/sys/devices/virtual/dmi/id/product_name").read_text().strip()
        except OSError:
            instance = ""
        lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
        return neuron_core_limits(instance, int(lnc) if lnc and lnc.isdigit() else None)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"device": self.name, "neuron_modes": list(self.options.modes)}
        try:
            mod = importlib.import_module("torch_neuronx")
            info["torch_neuronx"] = getattr(mod, "__version__", "unknown")
            info["emulated"] = bool(getattr(mod, "__neuronscope_emulator__", False))
        except Exception:  # noqa: BLE001
            log.debug("torch_neuronx version unavailable", exc_info=True)
        return info
