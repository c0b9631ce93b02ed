"""An emulated AWS Neuron device for testing profiling code on CPU-only machines.

TorchNeuron (``torch_neuronx``) feeds device activity into ``torch.profiler``
through a Kineto child profiler registered with
``libkineto::api().registerProfilerFactory``. This module builds a small C++
extension that registers such a child profiler, names PyTorch's PrivateUse1
backend ``"neuron"`` and installs stand-in ``torch_neuronx`` modules, so code
written for Trainium/Inferentia profiling runs unchanged in CI::

    from neuronscope.testing import install_emulated_neuron

    emu = install_emulated_neuron()          # once per process; cannot be undone

    import torch
    from torch.profiler import profile, ProfilerActivity
    from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
                       profile_output_dir="./profile_output")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg,
                 on_trace_ready=NeuronProfiler(cfg).export_trace) as prof:
        model(x)                               # ordinary CPU tensors
        torch.neuron.synchronize()
    print(prof.key_averages().table(sort_by="self_device_time_total"))

Because ``torch.utils.rename_privateuse1_backend`` is process-wide and
irreversible, run emulated profiles in a dedicated process (for pytest, a
subprocess per scenario) if other tests must see an unnamed PrivateUse1.

What a profile shows
--------------------
The emulator watches the op nesting that Kineto reports through
``pushCorrelationId``/``popCorrelationId`` and, when the profiler stops, turns
every op it considers *executed on the device* into three events:

* ``nrta_execute_schedule`` -- ``PRIVATEUSE1_RUNTIME`` on the op's thread,
  linked to the op (a CPU row in ``key_averages()``, category
  ``privateuse1_runtime`` in the chrome trace), start of an ``ac2g`` flow;
* ``neff_<id>:<op>`` -- ``CONCURRENT_KERNEL`` on device ``neuron:0`` (chrome
  pid 0, row "NC0 NEFF executions"), linked to the op, so ``key_averages()``
  gives the op ``Self NEURON`` time; end of the ``ac2g`` flow;
* ``nc_exec_running`` -- ``GPU_USER_ANNOTATION`` on the hardware row
  ``neuron_hw/NC0:4``, *not* linked, so device time is counted once.

Timing is deterministic given the ops' own CPU times: for an op recorded over
``[s, s+d]`` the runtime event covers ``[g+(s+d-g)/4, g+(s+d-g)/2]``, where
``g`` is ``s`` or, if ops are nested in it, the end of the last one (so the
runtime event nests under its op only); the kernel starts when the runtime
event ends (or when NeuronCore 0 is free -- it runs one NEFF at a time) and
lasts ``device_time_ratio * d`` (at least 1 ns). Timestamps are Unix-epoch ns.
The ``<id>`` is a stable 15-digit hash of the op name (eager mode compiles one
NEFF per op; the input shapes would join the key if the profiler had attached
``Input Dims`` by the time the trace is processed, which torch 2.13 does not).
Emulated events use correlation/flow ids from 2**30 up, apart from PyTorch's
op ids; in the chrome trace a kernel's and a runtime event's
``"External id"`` is its op's, and ``args["correlation"]`` (also the ``ac2g``
flow id) ties the runtime event, kernel and ``nc_exec_running`` together.

Which ops execute (``attribution``):

* ``"leaf"`` (default): ops with no device op nested in them. Operators that
  move no data on a device (views, ``aten::empty*``, ``aten::detach``, a
  no-op ``aten::to``, ...) and records that are not operators (autograd
  nodes, ``record_function`` scopes) never execute and do not count as
  nesting.
* ``"backend"``: the outermost operator that reaches a backend kernel, i.e.
  not a ``CompositeImplicitAutograd`` decomposition; ops it calls run inside
  its NEFF. Closer to what TorchNeuron's eager mode dispatches (``aten::mean``
  executes as one NEFF instead of its CPU implementation's ``aten::fill_`` and
  ``aten::copy_``).

Device events appear only when the device activity (``ProfilerActivity.
PrivateUse1``, which makes Kineto request ``CONCURRENT_KERNEL``) is on; with
``activities=[CPU]`` Kineto still asks for ``PRIVATEUSE1_RUNTIME``, so the
runtime events appear (as ``cudaLaunchKernel`` rows do for CUDA) but no device
events and no raw files.

Raw files
---------
When the device activity is on and the ``experimental_config`` carries a
``profile_output_dir`` (any ``NeuronConfig`` does), the emulated runtime
writes placeholder files before the profiler's stop returns -- independent of
``on_trace_ready`` -- in one of the two layouts the Neuron runtime uses:

``layout="session"`` (native PyTorch)::

    <profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/
        neff_<id>_vnc_0.neff            one per distinct NEFF       (DEVICE)
        profile_nc_<n>_session_0.ntff   one per captured core       (DEVICE)
        ntrace.pb  trace_info.pb                                    (RUNTIME)
        cpu_util.pb                                                 (CPU_UTIL)
        host_mem.pb                                                 (HOST_MEMORY)

``layout="model"``::

    <profile_output_dir>/<instance-id>_pid_<pid>/
        neff_<id>.neff  <id>_instid_0_vnc_0.ntff     a pair per NEFF (DEVICE)
        <timestamp>/ntrace.pb ...                    system files, if any

Contents are placeholders (short text), never empty, except the NTFF of a
captured core that never ran (cores come from ``capture_enabled_for_nc``, by
default every visible core: ``NEURON_RT_NUM_CORES``, default 1; the emulator
executes everything on core 0), which is empty as on real hardware. The
instance id is the fixed :data:`EMULATED_INSTANCE_ID`; ``<timestamp>`` is
``YYYYmmdd_HHMMSS_<microseconds>`` in UTC (the runtime's own format is not
documented publicly).

The system-profile placeholders carry what the fake ``neuron-explorer`` (below) needs:
``ntrace.pb`` lists every ``nrta_execute_schedule`` and ``nc_exec_running`` with its start,
duration, thread and NeuronCore, and a ``capture stored=S total=T dropped=D`` line;
``host_mem.pb`` two samples of the host's used memory (``sysinfo``); ``cpu_util.pb`` one
sample per CPU (busy share of ``/proc/stat`` over the capture).

Dropped events: the runtime keeps the newest ``max_events_per_nc`` events per NeuronCore;
older ones are overwritten (troubleshooting.rst, "Dropped events in system profile"). The
emulator counts NEFF executions on core 0; the *oldest* executions past the limit keep their
runtime event but get no kernel and no ``nc_exec_running`` (they still occupy the core), and
the emulated runtime writes the documented sentence to file descriptor 2 when the profile
stops::

    [neuron runtime (neuronscope emulator)] Warning: 11 trace events were dropped during capture (stored 3 out of 14 total events). ...

``NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP=N`` (model layout) skips each NEFF's first N
executions before the one its NTFF records; a NEFF that ran N times or fewer gets no NTFF.

Fake Neuron Explorer
--------------------
:func:`install_fake_neuron_explorer` writes an executable ``neuron-explorer`` that reads these
files and writes Explorer's documented outputs (``summary-json``, ``system_profile.json``),
so code that shells out to Neuron Explorer runs in CI against a real subprocess::

    from neuronscope.testing import install_fake_neuron_explorer
    exe = install_fake_neuron_explorer("/tmp/bin")      # then PATH=/tmp/bin:$PATH

``NEURONSCOPE_FAKE_EXPLORER_SUMMARY`` (JSON) overrides summary fields;
``NEURONSCOPE_FAKE_EXPLORER_SCHEMA=2.34`` uses the field names of Neuron 2.34. See
``neuronscope.testing._fake_neuron_explorer`` for the fields.

Limits
------
* Tensors stay on the CPU: nothing can be placed on ``"neuron"`` and
  ``torch.neuron.is_available()`` is ``False``. Code that picks the tensor
  device from the PrivateUse1 name alone will fail under the emulator.
* Ops are only seen with CPU activity on (Kineto calls
  ``pushCorrelationId`` only then), so ``activities=[PrivateUse1]`` alone
  gives no device events.
* Only the Kineto path is emulated. The legacy
  ``torch.autograd.profiler.profile(use_device="neuron")`` (``use_kineto=False``)
  needs PrivateUse1 ``ProfilerStubs``, which TorchNeuron also registers and
  the emulator does not.
* ``neff_cache_dir`` and ``precache_node_info`` are accepted and ignored; the
  NEFF/NTFF/``.pb`` contents are placeholders, not the real formats (only the fake
  ``neuron-explorer`` reads them).
* A Kineto trace can be saved once: ``NeuronProfiler.export_trace`` calls
  ``prof.export_chrome_trace``, after which ``kineto_results.save()`` raises
  "Trace is already saved" (TorchNeuron's exporter must hit the same limit).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

from .. import _env
from ..errors import ConfigurationError

__all__ = [
    "install_emulated_neuron",
    "install_fake_neuron_explorer",
    "EmulatedNeuron",
    "EMULATED_INSTANCE_ID",
    "default_build_dir",
]

#: The fake EC2 instance id used in raw-file paths.
EMULATED_INSTANCE_ID = "i-00000000000e1a7ed"

_LAYOUTS = ("session", "model")
_ATTRIBUTIONS = ("leaf", "backend")
_SOURCE = Path(__file__).with_name("_emulator.cpp")
_EXT_NAME = "neuronscope_neuron_emulator"

_lock = threading.Lock()
_installed: EmulatedNeuron | None = None


def default_build_dir() -> Path:
    """Where the extension is built unless told otherwise.

    ``$NEURONSCOPE_EMULATOR_BUILD_DIR`` if set, else
    ``~/.cache/neuronscope/emulator-<torch version>``.
    """
    env = _env.EMULATOR_BUILD_DIR.get()
    if env is not None:
        return env
    import torch

    return Path.home() / ".cache" / "neuronscope" / f"emulator-{torch.__version__}"


class EmulatedNeuron:
    """Handle on the process's emulated Neuron device.

    Returned by :func:`install_emulated_neuron`; there is at most one per
    process. Settings are read when a profile starts (Kineto configures the
    session), so change them between profiles, not during one.

    Attributes:
        build_dir: directory the C++ extension was built in (kept as a cache).
        extension: the loaded extension module (``last_session_info()``,
            ``last_session_dir(profile_output_dir)``).
        instance_id: the fake instance id used in raw-file paths.
        installed_fake_torch_neuronx: whether the stand-in ``torch_neuronx``
            modules were installed (``False`` if a real one was importable).
    """

    def __init__(self, extension: Any, build_dir: Path, installed_fake: bool) -> None:
        self.extension = extension
        self.build_dir = build_dir
        self.instance_id = EMULATED_INSTANCE_ID
        self.installed_fake_torch_neuronx = installed_fake
        self._layout = "session"
        self._ratio = 0.5
        self._attribution = "leaf"
        self._verbose = False

    @property
    def layout(self) -> str:
        """Raw-file layout: ``"session"`` or ``"model"``."""
        return self._layout

    @layout.setter
    def layout(self, value: str) -> None:
        if value not in _LAYOUTS:
            raise ConfigurationError(f"layout must be one of {_LAYOUTS}, got {value!r}")
        self.extension.set_layout(value)
        self._layout = value

    @property
    def device_time_ratio(self) -> float:
        """Kernel duration as a fraction of the op's CPU duration."""
        return self._ratio

    @device_time_ratio.setter
    def device_time_ratio(self, value: float) -> None:
        value = float(value)
        if not value >= 0.0:
            raise ConfigurationError("device_time_ratio must be >= 0")
        self.extension.set_device_time_ratio(value)
        self._ratio = value

    @property
    def attribution(self) -> str:
        """Which ops execute on the device: ``"leaf"`` or ``"backend"``."""
        return self._attribution

    @attribution.setter
    def attribution(self, value: str) -> None:
        if value not in _ATTRIBUTIONS:
            raise ConfigurationError(f"attribution must be one of {_ATTRIBUTIONS}, got {value!r}")
        self.extension.set_attribution(value)
        self._attribution = value

    @property
    def verbose(self) -> bool:
        """Log each emulated session to stderr."""
        return self._verbose

    @verbose.setter
    def verbose(self, value: bool) -> None:
        self.extension.set_verbose(bool(value))
        self._verbose = bool(value)

    # -- device memory ------------------------------------------------------------------
    def allocate(self, nbytes: int, *, reserve: int | None = None) -> None:
        """Move the emulated device allocator (``torch.neuron.memory_stats()``) up by
        ``nbytes`` (and its reserved bytes to at least ``reserve``, default the allocated)."""
        from ._fake_torch_neuronx import DEVICE_MEMORY as m

        m["allocated_bytes.all.current"] += int(nbytes)
        m["allocated_bytes.all.peak"] = max(m["allocated_bytes.all.peak"], m["allocated_bytes.all.current"])
        m["reserved_bytes.all.current"] = max(
            m["reserved_bytes.all.current"], int(reserve or 0), m["allocated_bytes.all.current"]
        )
        m["reserved_bytes.all.peak"] = max(m["reserved_bytes.all.peak"], m["reserved_bytes.all.current"])

    def free(self, nbytes: int) -> None:
        """Move the emulated device allocator down by ``nbytes`` (reserved bytes stay, as in a caching allocator)."""
        from ._fake_torch_neuronx import DEVICE_MEMORY as m

        m["allocated_bytes.all.current"] = max(m["allocated_bytes.all.current"] - int(nbytes), 0)

    def out_of_memory(
        self,
        nbytes: int,
        *,
        usage: str = "tensors",
        device: int = 0,
        core: int = 0,
        categories: dict[str, int] | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> RuntimeError:
        """What the Neuron runtime does when an allocation fails, as the Neuron docs describe it
        ("Neuron device memory", Out-of-memory (OOM) Errors): write the per-category HBM table to
        ``neuron_mem_table_device_<device>_hbm_<idx>.log`` (in ``directory``,
        ``$NEURONSCOPE_NEURON_MEM_TABLE_DIR`` or ``/tmp``, as the runtime does) and return the
        error to raise, whose message is the runtime's ``Failed to allocate ...`` line.
        ``categories``: bytes per column (the documented column names); default: the
        allocator's current bytes as ``Tensors`` plus 96 MB of ``Model Code``."""
        from ._fake_torch_neuronx import DEVICE_MEMORY

        where = Path(directory or _env.NEURON_MEM_TABLE_DIR.get())
        cats = dict(categories or {"Model Code": 96 << 20, "Tensors": DEVICE_MEMORY["allocated_bytes.all.current"]})
        failed = f"Failed to allocate {_size(nbytes)} (alignment: none, usage: {usage}) on ND {device}:NC {core}"
        text = _mem_table(failed, device, core, cats)
        path = where / f"neuron_mem_table_device_{device}_hbm_{core // 2}.log"
        path.write_text(text, encoding="utf-8")
        return RuntimeError(f"ERROR  TDRV:log_dev_mem  {failed}")

    def last_session_info(self) -> dict[str, str]:
        """Counts from the last processed session (``leaf_ops``, ``executions``,
        ``events_dropped``, ``activities``, ``session_dir``, ``layout``)."""
        return dict(self.extension.last_session_info())

    def __repr__(self) -> str:
        return (
            f"EmulatedNeuron(layout={self._layout!r}, device_time_ratio={self._ratio!r}, "
            f"attribution={self._attribution!r}, build_dir={str(self.build_dir)!r})"
        )


#: the OOM table's columns, in the order the Neuron docs' example shows them (device-memory page)
_MEM_TABLE_COLUMNS = (
    ("", "TOTAL"),
    ("Model", "Code"),
    ("Model", "Constants"),
    ("", "Tensors"),
    ("Shared", "Scratchpad"),
    ("", "Scratchpad"),
    ("", "Runtime"),
    ("DMA Rings", "IO"),
    ("DMA Rings", "Spill"),
    ("DMA Rings", "Collectives"),
    ("DMA Rings", "Runtime"),
    ("", "Collectives"),
    ("", "XT CC"),
    ("Profiler", "Buffers"),
)


def _size(n: int) -> str:
    """The runtime's sizes: three decimals and B/KB/MB/GB (read back as powers of 1024)."""
    v = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if v < 1024 or unit == "GB":
            return f"{v:.3f}{unit}"
        v /= 1024
    return f"{v:.3f}GB"  # pragma: no cover


def _mem_table(failed: str, device: int, core: int, cats: dict[str, int]) -> str:
    names = [f"{a} {b}".strip() for a, b in _MEM_TABLE_COLUMNS]
    known = {n.lower(): n for n in names}
    values = {known.get(k.lower(), k): int(v) for k, v in cats.items()}
    total = sum(values.values())
    cell = lambda s: f"{s:^10}"  # noqa: E731
    head1 = "              |" + "|".join(cell(a) for a, _ in _MEM_TABLE_COLUMNS) + "|"
    head2 = "              |" + "|".join(cell(b) for _, b in _MEM_TABLE_COLUMNS) + "|"

    def row(label: str) -> str:
        cells = [_size(total)] + [_size(values.get(n, 0)) for n in names[1:]]
        return f"{label:<14}|" + "|".join(cell(c) for c in cells) + "|"

    stamp = "2025-May-15 20:58:33.897479 224822:224822 ERROR  TDRV:"
    return "\n".join(
        [
            f"{stamp}log_dev_mem                             {failed}",
            f"{stamp}log_dev_mem_usage_table                 Displaying Current Memory Utilization:",
            "(NOTE: the lines are LONG, and NEFF id to name mapping is printed after)",
            "",
            head1,
            head2,
            row(f"ND {device} Overall"),
            row(f"\\_NC {core}"),
            "",
            "NEFF id to name mapping:",
            "",
        ]
    )


def install_fake_neuron_explorer(bin_dir: str | os.PathLike[str]) -> Path:
    """Write an executable ``neuron-explorer`` into ``bin_dir`` and return its path.

    It runs :mod:`neuronscope.testing._fake_neuron_explorer` with this interpreter; put
    ``bin_dir`` first on ``PATH`` for code that looks the tool up. Needs no emulator and
    changes nothing in this process.
    """
    bin_path = Path(bin_dir)
    bin_path.mkdir(parents=True, exist_ok=True)
    exe = bin_path / "neuron-explorer"
    src = str(Path(__file__).resolve().parents[1])  # so the script finds this neuronscope
    exe.write_text(
        f"#!{sys.executable}\n"
        "# neuronscope's stand-in for Neuron Explorer (neuronscope.testing.install_fake_neuron_explorer)\n"
        "import sys\n"
        f"sys.path.insert(0, {src!r})\n"
        "from neuronscope.testing._fake_neuron_explorer import main\n"
        "sys.exit(main())\n"
    )
    exe.chmod(0o755)
    return exe


def _decomposing_ops() -> list[str]:
    """Op names whose default overload is CompositeImplicitAutograd (or, with
    no default overload, all of whose overloads are)."""
    import torch

    by_name: dict[str, list[bool]] = {}
    default: dict[str, bool] = {}
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        base = f"{ns}::{rest.split('.')[0]}"
        flag = bool(torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"))
        by_name.setdefault(base, []).append(flag)
        if full == base:
            default[base] = flag
    return sorted(b for b, flags in by_name.items() if default.get(b, all(flags)))


def _build(build_dir: Path, verbose: bool) -> Any:
    import torch
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    kineto_include = Path(torch.__file__).parent / "include" / "kineto"
    if not (kineto_include / "IActivityProfiler.h").exists():
        raise RuntimeError(f"Kineto headers not found in {kineto_include}; this torch build cannot host the emulator")
    return load(
        name=_EXT_NAME,
        sources=[str(_SOURCE)],
        extra_include_paths=[str(kineto_include)],
        extra_cflags=["-O1", "-DUSE_KINETO", "-DFMT_HEADER_ONLY"],
        build_directory=str(build_dir),
        verbose=verbose,
    )


def install_emulated_neuron(
    layout: str = "session",
    build_dir: str | os.PathLike[str] | None = None,
    device_time_ratio: float = 0.5,
    verbose: bool = False,
    attribution: str = "leaf",
) -> EmulatedNeuron:
    """Install the emulated Neuron device in this process and return its handle.

    Steps (the first call only; later calls return the same handle with the
    given ``layout``, ``device_time_ratio``, ``attribution`` and ``verbose``
    applied, and ignore ``build_dir``):

    1. build (or load from cache) the C++ extension with
       ``torch.utils.cpp_extension.load`` -- about 40 s the first time on 2
       cores, instant afterwards -- and register its Kineto child profiler;
    2. ``torch.utils.rename_privateuse1_backend("neuron")`` and register
       ``torch.neuron`` (``synchronize()`` is a no-op);
    3. put stand-in ``torch_neuronx`` / ``torch_neuronx.profiling`` modules
       into ``sys.modules`` unless a real ``torch_neuronx`` imports; they carry
       ``__neuronscope_emulator__ = True``.

    This cannot be undone, and fails if PrivateUse1 was already renamed to
    something other than ``"neuron"``.

    Args:
        layout: raw-file layout, ``"session"`` or ``"model"``.
        build_dir: extension build directory; default :func:`default_build_dir`.
        device_time_ratio: kernel duration / the op's CPU duration.
        verbose: show the compiler output and log sessions to stderr.
        attribution: ``"leaf"`` or ``"backend"`` (see the module docstring).
    """
    global _installed
    if layout not in _LAYOUTS:
        raise ConfigurationError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
    if attribution not in _ATTRIBUTIONS:
        raise ConfigurationError(f"attribution must be one of {_ATTRIBUTIONS}, got {attribution!r}")
    with _lock:
        if _installed is None:
            import torch

            name = torch._C._get_privateuse1_backend_name()
            if name not in ("privateuseone", "neuron"):
                raise RuntimeError(f"PrivateUse1 is already named {name!r}; the Neuron emulator needs it as 'neuron'")
            bdir = Path(build_dir) if build_dir is not None else default_build_dir()
            ext = _build(bdir, verbose)
            ext.set_decomposing_ops(_decomposing_ops())
            ext.register_profiler()
            if name != "neuron":
                torch.utils.rename_privateuse1_backend("neuron")
            from . import _fake_torch_neuronx

            if not hasattr(torch, "neuron"):
                torch._register_device_module("neuron", _fake_torch_neuronx.make_device_module())
            emu = EmulatedNeuron(ext, bdir, installed_fake=False)
            emu.installed_fake_torch_neuronx = _fake_torch_neuronx.install_modules(emu)
            if not emu.installed_fake_torch_neuronx:
                warnings.warn(
                    "a real torch_neuronx is importable; the emulator's profiler is registered "
                    "but the real torch_neuronx modules were left in place",
                    RuntimeWarning,
                    stacklevel=2,
                )
            _installed = emu
        emu = _installed
        emu.layout = layout
        emu.device_time_ratio = device_time_ratio
        emu.attribution = attribution
        emu.verbose = verbose
        return emu
