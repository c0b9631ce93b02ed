"""The device's limits: peak FLOP/s per dtype and memory bandwidth, and which device a trace ran on.

Vendor figures are dense peaks (half of NVIDIA's "with sparsity" figures), per device as
PyTorch sees it: one GPU, one MI250/MI250X die (GCD), one NeuronCore (a *logical* core on
Trn2/Trn3, two physical ones by default). Every figure and its source is in docs/roofline.md;
a test checks that table against :data:`DEVICES`. A CPU's limits are measured on the machine
(``capture/devices/cpu_limits.py``), not looked up.

Units: ``matrix`` is the matrix engine (tensor cores, the NeuronCore tensor engine, a CPU's
matmul), ``vector`` the rest. A key absent for a dtype falls back: ``matrix/X`` -> ``matrix/fp32``,
``vector/X`` -> ``vector/fp32`` -> ``matrix/fp32``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from .units import format_rate, size_text

__all__ = [
    "BF16_UNITS_MIN_SPEEDUP",
    "CACHE_FILL",
    "DEVICES",
    "DeviceLimits",
    "limits_for_device",
    "limits_from_user",
    "limits_for_trace",
]

_T = 1e12
_G = 1e9


#: a cache holds a call's working set up to this share of its size: the share each level's
#: bandwidth is measured at (a cache filled to the brim also holds other data, and evicts: a copy
#: over all of a 32 MiB L3 streamed at 58-130 GB/s on the CI machine, over half of it at 186)
CACHE_FILL = 0.5
#: a bf16 matmul at least this many times as fast as an fp32 one: the device has bf16 matrix units
#: (tensor cores, AMX, AVX512-BF16); below it bf16 is emulated or converted, and only halves the bytes
BF16_UNITS_MIN_SPEEDUP = 1.5


@dataclass(frozen=True)
class DeviceLimits:
    """What one device can do at most: FLOP/s per ``unit/dtype`` and memory bytes/s.

    A CPU also has ``cache_levels``: ``(name, bytes, bytes/s)`` per cache, fastest first, each
    with the bytes its caches hold for an op (those of all of torch's threads where torch splits
    the op over them) and the bandwidth measured with a working set of half that
    (``capture/devices/cpu_limits.py``). An op whose one call moves at most that many bytes is
    held to that level's roof (:meth:`memory_roof`); past the last level, to
    ``memory_bandwidth`` (main memory). A GPU or a NeuronCore has none:
    every op is held to its memory's bandwidth."""

    name: str
    memory_bandwidth: float  #: bytes/s
    peak_flops: dict[str, float] = field(default_factory=dict)  #: "matrix/bf16" -> FLOP/s
    source: str = ""  #: where the figures come from (a URL, "measured on HOST", "ns.configure")
    scope: str = ""  #: "per GPU", "per NeuronCore", "this CPU, 2 threads"
    #: ("L2", bytes it holds, bytes/s) per cache level, fastest first; () for one memory roof
    cache_levels: tuple[tuple[str, float, float], ...] = ()

    def peak(self, unit: str, dtype: str) -> float | None:
        for key in (f"{unit}/{dtype}", f"{unit}/fp32", "vector/fp32", "matrix/fp32"):
            v = self.peak_flops.get(key)
            if v:
                return v
        return None

    def matrix_speedup(self, dtype: str) -> float | None:
        """A ``dtype`` matmul's peak over the fp32 one's (None: either is unknown)."""
        low, fp32 = self.peak_flops.get(f"matrix/{dtype}"), self.peak_flops.get("matrix/fp32")
        return low / fp32 if low and fp32 else None

    @property
    def has_bf16_matrix_units(self) -> bool:
        """Whether a bf16 matmul runs on units of its own (at least 1.5x the fp32 FLOP/s): where
        it does not (a CPU without AMX or AVX512-BF16), bf16 saves bytes but no compute time."""
        speedup = self.matrix_speedup("bf16")
        return speedup is not None and speedup >= BF16_UNITS_MIN_SPEEDUP

    def memory_roof(self, call_bytes: float) -> tuple[str, float]:
        """The memory level one call moving ``call_bytes`` works in, and its roof in bytes/s: the
        fastest cache that holds them (at most :data:`CACHE_FILL` of it), else main memory
        ("DRAM"; "" without cache levels). A level's roof is never below a slower level's: a
        cache measured slower than the memory under it was measured in noise, and data it holds
        comes no slower than from there."""
        if not self.cache_levels:
            return "", self.memory_bandwidth
        floor = self.memory_bandwidth
        roofs: list[tuple[str, float, float]] = []
        for name, size, bandwidth in reversed(self.cache_levels):
            floor = max(floor, bandwidth)
            roofs.append((name, size, floor))
        for name, size, roof in reversed(roofs):
            if call_bytes <= CACHE_FILL * size:
                return name, roof
        return "DRAM", self.memory_bandwidth

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "memory_bandwidth": self.memory_bandwidth,
            "peak_flops": dict(self.peak_flops),
            "source": self.source,
            "scope": self.scope,
        }
        if self.cache_levels:
            out["cache_levels"] = [list(level) for level in self.cache_levels]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeviceLimits":
        return cls(
            name=str(data.get("name", "")),
            memory_bandwidth=float(data["memory_bandwidth"]),
            peak_flops={str(k): float(v) for k, v in (data.get("peak_flops") or {}).items()},
            source=str(data.get("source", "")),
            scope=str(data.get("scope", "")),
            cache_levels=_cache_levels(data.get("cache_levels")),  # absent in limits saved before
        )

    def line(self) -> str:
        best = max(self.peak_flops.items(), key=lambda kv: kv[1], default=None)
        top = f"{format_rate(best[1], 'FLOP/s')} {best[0]}" if best else "no FLOP/s roof"
        fp32 = self.peak("matrix", "fp32")
        fp32_text = f", {format_rate(fp32, 'FLOP/s')} matrix/fp32" if fp32 and best and best[0] != "matrix/fp32" else ""
        scope = f" ({self.scope})" if self.scope else ""
        source = f"; {self.source}" if self.source else ""
        memory = f"{format_rate(self.memory_bandwidth, 'B/s')} memory"
        if self.cache_levels:
            caches = ", ".join(f"{n} ({size_text(size)}) {format_rate(bw, 'B/s')}" for n, size, bw in self.cache_levels)
            memory = f"memory: {caches}, DRAM {format_rate(self.memory_bandwidth, 'B/s')}"
        return f"{self.name}{scope}: {top}{fp32_text}{self._bf16_text()}, {memory}{source}"

    def _bf16_text(self) -> str:
        """Whether bf16 has matrix units, where that is news: a CPU's measured roofs, or a device
        whose bf16 matmul is no faster than fp32."""
        speedup = self.matrix_speedup("bf16")
        if speedup is None or (self.has_bf16_matrix_units and not self.cache_levels):
            return ""
        units = "bf16 matrix units" if self.has_bf16_matrix_units else "no bf16 matrix units"
        return f" ({units}: bf16 matmul {speedup:.2g}x fp32)"


def _cache_levels(value: Any) -> tuple[tuple[str, float, float], ...]:
    if not value:
        return ()
    return tuple((str(name), float(size), float(bandwidth)) for name, size, bandwidth in value)


def _gpu(
    name: str, bw_gbs: float, *, fp64: float, fp32: float, source: str, scope: str = "per GPU", **matrix: float
) -> DeviceLimits:
    """``matrix`` are dense TFLOP/s by dtype (fp64 matrix, fp32 matrix, tf32, bf16, fp16, fp8, int8)."""
    peaks = {"vector/fp64": fp64 * _T, "vector/fp32": fp32 * _T, "matrix/fp32": matrix.pop("fp32_matrix", fp32) * _T}
    if "fp64_matrix" in matrix:
        peaks["matrix/fp64"] = matrix.pop("fp64_matrix") * _T
    else:
        peaks["matrix/fp64"] = fp64 * _T
    for dtype, tflops in matrix.items():
        peaks[f"matrix/{dtype}"] = tflops * _T
    return DeviceLimits(name, bw_gbs * _G, peaks, source, scope)


_N_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_N_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_N_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_N_H200 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/h200/h200-datasheet.pdf"
_N_B200 = "https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703"
_N_L4 = "https://www.nvidia.com/en-us/data-center/l4/ (datasheet)"
_N_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_A_MI210 = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html"
_A_MI250 = "https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi250.html (per GCD: half the OAM)"
_A_MI250X = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html (per GCD: half the OAM)"
_A_MI300X = "https://rocm.docs.amd.com/en/docs-6.2.2/conceptual/gpu-arch/mi300.html"
_A_MI325X = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html"
_W_NC2 = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html (chip / 2 cores)"
_W_NC3 = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/neuron-core-v3.html"
_W_NC4 = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/neuron-core-v4.html"

#: every device with vendor figures, by the name :func:`limits_for_device` resolves to
DEVICES: dict[str, DeviceLimits] = {
    d.name: d
    for d in (
        _gpu("NVIDIA V100 SXM2", 900, fp64=7.8, fp32=15.7, fp16=125, source=_N_V100),
        _gpu("NVIDIA V100 PCIe", 900, fp64=7.0, fp32=14.0, fp16=112, source=_N_V100),
        _gpu(
            "NVIDIA A100 SXM4 40GB",
            1555,
            fp64=9.7,
            fp64_matrix=19.5,
            fp32=19.5,
            tf32=156,
            bf16=312,
            fp16=312,
            int8=624,
            source=_N_A100,
        ),
        _gpu(
            "NVIDIA A100 SXM4 80GB",
            2039,
            fp64=9.7,
            fp64_matrix=19.5,
            fp32=19.5,
            tf32=156,
            bf16=312,
            fp16=312,
            int8=624,
            source=_N_A100,
        ),
        _gpu(
            "NVIDIA A100 PCIe 40GB",
            1555,
            fp64=9.7,
            fp64_matrix=19.5,
            fp32=19.5,
            tf32=156,
            bf16=312,
            fp16=312,
            int8=624,
            source=_N_A100,
        ),
        _gpu(
            "NVIDIA A100 PCIe 80GB",
            1935,
            fp64=9.7,
            fp64_matrix=19.5,
            fp32=19.5,
            tf32=156,
            bf16=312,
            fp16=312,
            int8=624,
            source=_N_A100,
        ),
        _gpu(
            "NVIDIA H100 SXM5",
            3350,
            fp64=34,
            fp64_matrix=67,
            fp32=67,
            tf32=494.5,
            bf16=989.5,
            fp16=989.5,
            fp8=1979,
            int8=1979,
            source=_N_H100,
        ),
        _gpu(
            "NVIDIA H100 PCIe",
            2000,
            fp64=26,
            fp64_matrix=51,
            fp32=51,
            tf32=378,
            bf16=756.5,
            fp16=756.5,
            fp8=1513,
            int8=1513,
            source=_N_H100,
        ),
        _gpu(
            "NVIDIA H100 NVL",
            3900,
            fp64=30,
            fp64_matrix=60,
            fp32=60,
            tf32=417.5,
            bf16=835.5,
            fp16=835.5,
            fp8=1670.5,
            int8=1670.5,
            source=_N_H100,
        ),
        _gpu(
            "NVIDIA H200",
            4800,
            fp64=34,
            fp64_matrix=67,
            fp32=67,
            tf32=494.5,
            bf16=989.5,
            fp16=989.5,
            fp8=1979,
            int8=1979,
            source=_N_H200,
        ),
        _gpu(
            "NVIDIA B200",
            8000,
            fp64=40,
            fp64_matrix=40,
            fp32=80,
            tf32=1100,
            bf16=2250,
            fp16=2250,
            fp8=4500,
            int8=4500,
            source=_N_B200,
        ),
        _gpu("NVIDIA L4", 300, fp64=0.0, fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5, int8=242.5, source=_N_L4),
        _gpu("NVIDIA L40S", 864, fp64=0.0, fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733, int8=733, source=_N_L40S),
        _gpu(
            "AMD Instinct MI210",
            1638.4,
            fp64=22.6,
            fp64_matrix=45.3,
            fp32=22.6,
            fp32_matrix=45.3,
            bf16=181,
            fp16=181,
            int8=181,
            source=_A_MI210,
        ),
        _gpu(
            "AMD Instinct MI250 (one GCD)",
            1638.4,
            fp64=22.65,
            fp64_matrix=45.25,
            fp32=22.65,
            fp32_matrix=45.25,
            bf16=181.05,
            fp16=181.05,
            int8=181.05,
            source=_A_MI250,
            scope="per GCD",
        ),
        _gpu(
            "AMD Instinct MI250X (one GCD)",
            1638.4,
            fp64=23.95,
            fp64_matrix=47.85,
            fp32=23.95,
            fp32_matrix=47.85,
            bf16=191.5,
            fp16=191.5,
            int8=191.5,
            source=_A_MI250X,
            scope="per GCD",
        ),
        _gpu(
            "AMD Instinct MI300X",
            5300,
            fp64=81.7,
            fp64_matrix=163.4,
            fp32=163.4,
            tf32=653.7,
            bf16=1307.4,
            fp16=1307.4,
            fp8=2614.9,
            int8=2614.9,
            source=_A_MI300X,
        ),
        _gpu(
            "AMD Instinct MI325X",
            6000,
            fp64=81.7,
            fp64_matrix=163.4,
            fp32=163.4,
            tf32=653.7,
            bf16=1307.4,
            fp16=1307.4,
            fp8=2614.9,
            int8=2614.9,
            source=_A_MI325X,
        ),
        # NeuronCores: the tensor engine per core; the vector engine (NC-v2: 2.3 TFLOP/s fp32) for
        # elementwise work; HBM bandwidth per core (the chip's, divided among its cores)
        DeviceLimits(
            "NeuronCore-v2 (Trn1/Inf2)",
            410 * 2**30,
            {
                "matrix/fp32": 23.75 * _T,
                "matrix/bf16": 95 * _T,
                "matrix/fp16": 95 * _T,
                "matrix/tf32": 95 * _T,
                "matrix/fp8": 95 * _T,
                "matrix/int8": 190 * _T,
                "vector/fp32": 2.3 * _T,
            },
            _W_NC2,
            "per NeuronCore",
        ),
        DeviceLimits(
            "NeuronCore-v3 (Trn2)",
            362.5 * _G,
            {
                "matrix/fp32": 22.6 * _T,
                "matrix/bf16": 79 * _T,
                "matrix/fp16": 79 * _T,
                "matrix/tf32": 79 * _T,
                "matrix/fp8": 158 * _T,
            },
            _W_NC3,
            "per physical NeuronCore",
        ),
        DeviceLimits(
            "NeuronCore-v4 (Trn3)",
            612.5 * _G,
            {
                "matrix/fp32": 20 * _T,
                "matrix/bf16": 79 * _T,
                "matrix/fp16": 79 * _T,
                "matrix/tf32": 79 * _T,
                "matrix/fp8": 315 * _T,
            },
            _W_NC4,
            "per physical NeuronCore",
        ),
    )
}


def _scaled(limits: DeviceLimits, factor: int, scope: str) -> DeviceLimits:
    return DeviceLimits(
        limits.name + f" x{factor}",
        limits.memory_bandwidth * factor,
        {k: v * factor for k, v in limits.peak_flops.items()},
        limits.source,
        scope,
    )


def limits_for_device(name: str, props: dict[str, Any] | None = None) -> DeviceLimits | None:
    """The vendor limits of a device named as ``deviceProperties[].name`` / ``get_device_name()``
    names it, using ``props`` (``computeMajor``, ``numSms``, ``totalGlobalMem``) where the name
    is generic or empty. None: a device not in the table."""
    props = props or {}
    up = (name or "").upper()
    return _nvidia(up, props) or _amd(up, props) or _neuron(up)


def _nvidia(up: str, props: dict[str, Any]) -> DeviceLimits | None:
    mem = float(props.get("totalGlobalMem") or 0)
    sms = int(props.get("numSms") or 0)
    if "V100" in up:
        return DEVICES["NVIDIA V100 PCIe" if "PCIE" in up else "NVIDIA V100 SXM2"]
    if "A100" in up:
        size = "80GB" if "80GB" in up or mem > 60e9 else "40GB"
        return DEVICES[f"NVIDIA A100 PCIe {size}" if "PCIE" in up else f"NVIDIA A100 SXM4 {size}"]
    if "H100" in up:
        if "NVL" in up:
            return DEVICES["NVIDIA H100 NVL"]
        return DEVICES["NVIDIA H100 PCIe" if "PCIE" in up or sms == 114 else "NVIDIA H100 SXM5"]
    if "H200" in up:
        return DEVICES["NVIDIA H200"]
    for pattern, device in ((r"\bB200\b", "NVIDIA B200"), (r"\bL40S\b", "NVIDIA L40S"), (r"\bL4\b", "NVIDIA L4")):
        if re.search(pattern, up):
            return DEVICES[device]
    return None


def _amd(up: str, props: dict[str, Any]) -> DeviceLimits | None:
    mem = float(props.get("totalGlobalMem") or 0)
    sms = int(props.get("numSms") or 0)
    cc = (props.get("computeMajor"), props.get("computeMinor"))
    gcd = "AMD Instinct MI250X (one GCD)" if sms == 110 else "AMD Instinct MI250 (one GCD)"
    for key, device in (("MI325", "AMD Instinct MI325X"), ("MI300X", "AMD Instinct MI300X"), ("MI210", "AMD Instinct MI210")):
        if key in up:
            return DEVICES[device]
    if "MI250X" in up and "MI250X/MI250" not in up:
        return DEVICES["AMD Instinct MI250X (one GCD)"]
    if "MI250" in up:
        return DEVICES[gcd]
    # ROCm may name the part "AMD Radeon Graphics" or nothing at all: the architecture tells
    generic = not up or "RADEON" in up
    if generic and cc == (9, 4) and sms == 304:
        return DEVICES["AMD Instinct MI325X" if mem > 220 * 2**30 else "AMD Instinct MI300X"]
    if generic and cc == (9, 0) and sms in (104, 110):
        return DEVICES[gcd]
    return None


def neuron_core_limits(instance: str, logical: int | None = None) -> DeviceLimits | None:
    """A NeuronCore's limits from the instance type (``trn2.48xlarge``) and the logical core size
    (``NEURON_LOGICAL_NC_CONFIG``; Trn2/Trn3 default to 2 physical cores per logical core)."""
    return _neuron(instance.upper(), logical)


def _neuron(up: str, logical: int | None = None) -> DeviceLimits | None:
    """A NeuronCore named by its instance family (``trn1``, ``inf2``, ``trn2``, ``trn3``) or version."""
    if re.search(r"TRN1|INF2|NEURONCORE-V2", up):
        return DEVICES["NeuronCore-v2 (Trn1/Inf2)"]
    for key, dev in (("TRN2|NEURONCORE-V3", "NeuronCore-v3 (Trn2)"), ("TRN3|NEURONCORE-V4", "NeuronCore-v4 (Trn3)")):
        if re.search(key, up):
            # Trn2/Trn3 group two physical cores into one logical core by default (LNC=2)
            lnc = logical if logical is not None else (1 if "LNC=1" in up else 2)
            return DEVICES[dev] if lnc == 1 else _scaled(DEVICES[dev], lnc, f"per logical NeuronCore (LNC={lnc})")
    return None


def limits_for_trace(trace: Any) -> DeviceLimits | None:
    """The limits a trace names: ``device_limits`` written at capture (a CPU's measured roofs, the
    live device's), else the first of its ``deviceProperties`` the table knows."""
    meta = trace.metadata or {}
    recorded = meta.get("device_limits")
    if isinstance(recorded, dict):
        try:
            return DeviceLimits.from_dict(recorded)
        except (KeyError, TypeError, ValueError):
            pass
    if trace.device == "cpu":
        return None
    for props in meta.get("deviceProperties") or ():
        if isinstance(props, dict):
            found = limits_for_device(str(props.get("name", "")), props)
            if found is not None:
                return found
    return None


def device_names(trace: Any) -> list[str]:
    return [str(p.get("name", "")) for p in (trace.metadata or {}).get("deviceProperties") or () if isinstance(p, dict)]


def limits_from_user(value: Any) -> DeviceLimits:
    """``ns.configure(device_limits=...)``: a :class:`DeviceLimits`, a device name the table knows,
    or a dict ``{"memory_bandwidth": bytes/s, "peak_flops": {"matrix/bf16": FLOP/s, ...}}``."""
    if isinstance(value, DeviceLimits):
        return value
    if isinstance(value, str):
        found = DEVICES.get(value) or limits_for_device(value)
        if found is None:
            raise ConfigurationError(
                f"device_limits={value!r}: not a device neuronscope knows; known: {', '.join(DEVICES)}. "
                'Or give its limits: {"memory_bandwidth": 3.35e12, "peak_flops": {"matrix/bf16": 989.5e12}}'
            )
        return found
    if isinstance(value, dict):
        try:
            bw = float(value["memory_bandwidth"])
            peaks = {str(k): float(v) for k, v in (value.get("peak_flops") or {}).items()}
            levels = _cache_levels(value.get("cache_levels"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                'device_limits: a dict needs "memory_bandwidth" (bytes/s) and "peak_flops" '
                '({"matrix/bf16": FLOP/s, "vector/fp32": FLOP/s, ...}), and may have "cache_levels" '
                '([["L2", bytes, bytes/s], ...], fastest first); ' + f"got {value!r} ({exc})"
            ) from None
        if any(size <= 0 or level_bw <= 0 for _, size, level_bw in levels):
            raise ConfigurationError(f"device_limits: every cache level needs a size and a bandwidth > 0; got {levels!r}")
        bad = [k for k in peaks if not re.fullmatch(r"(matrix|vector)/(fp64|fp32|tf32|bf16|fp16|fp8|int8|int)", k)]
        if bw <= 0 or not peaks or bad or any(v <= 0 for v in peaks.values()):
            raise ConfigurationError(
                "device_limits: memory_bandwidth and every peak must be > 0, with keys like "
                f'"matrix/bf16" or "vector/fp32" (unit/dtype); got bandwidth {bw!r}, peaks {peaks!r}'
            )
        return DeviceLimits(
            str(value.get("name", "configured device")),
            bw,
            peaks,
            str(value.get("source", "ns.configure(device_limits=...)")),
            str(value.get("scope", "")),
            levels,
        )
    raise ConfigurationError(f"device_limits must be a DeviceLimits, a device name or a dict, not {type(value).__name__}")
