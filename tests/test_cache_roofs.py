"""A CPU's cache-aware roofline: a bandwidth per cache level, each op held to the level its
working set fits, no op above its roof without the reason, and the bf16-units flag.

Expected values are computed here from the shapes the test chose, the sysfs files read by hand
and the limits the test gave (or the measured ones, taken as given), never by the code under test.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope.analysis.diagnosis import diagnose_trace
from neuronscope.analysis.fold import fold_summaries
from neuronscope.analysis.roofline import Roofline, roofline_of
from neuronscope.analysis.roofs import DEVICES, DeviceLimits, limits_from_user
from neuronscope.analysis.summary import Summary, summarize
from neuronscope.analysis.work import OpWork
from neuronscope.capture.devices import cpu_limits as cl
from neuronscope.errors import ConfigurationError
from neuronscope.report.html import render_html
from neuronscope.trace.kineto import trace_from_kineto

KIB, MIB = 1 << 10, 1 << 20
DRAM = 20e9
LEVELS = (("L1", 32 * KIB, 400e9), ("L2", 2 * MIB, 200e9), ("L3", 32 * MIB, 100e9))
LIMITS = DeviceLimits("test cpu", DRAM, {"matrix/fp32": 100e9, "vector/fp32": 100e9}, "the test", "2 threads", LEVELS)

# float32 elements: 8 KiB, 1 MiB, 128 MiB read + written a call (L1, L2 and past L3: each at most half a level)
SMALL, MID, BIG = 1024, 128 * 1024, 4096 * 4096


@pytest.fixture(autouse=True)
def _no_configured_limits():
    yield
    ns.configure(device_limits=None)


def _profile(fn, calls: int = 3):
    fn()  # warm: first touch of the pages
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            fn()
    return trace_from_kineto(prof.profiler.kineto_results)


@pytest.fixture(scope="module")
def sized_trace():
    small, mid, big = torch.rand(SMALL), torch.rand(MID), torch.rand(BIG)
    mixed_a, mixed_b = torch.rand(SMALL), torch.rand(2 * MIB)  # one op, two sizes: L1 and L3

    def step():
        torch.neg(small), torch.abs(mid), torch.sqrt(big)
        torch.exp(mixed_a), torch.exp(mixed_b)

    return _profile(step)


def test_the_level_is_the_smallest_cache_that_holds_one_call():
    # a level holds up to half its size: the working set its bandwidth was measured with
    assert LIMITS.memory_roof(1) == ("L1", 400e9)
    assert LIMITS.memory_roof(16 * KIB) == ("L1", 400e9)
    assert LIMITS.memory_roof(16 * KIB + 1) == ("L2", 200e9)
    assert LIMITS.memory_roof(16 * MIB) == ("L3", 100e9)
    assert LIMITS.memory_roof(16 * MIB + 1) == ("DRAM", DRAM)
    # a cache measured slower than what lies under it was measured in noise: held to the faster one
    noisy = replace(LIMITS, cache_levels=(("L1", 32 * KIB, 150e9), ("L2", 2 * MIB, 10e9), ("L3", 32 * MIB, 100e9)))
    assert noisy.memory_roof(MIB) == ("L2", 100e9) and noisy.memory_roof(KIB) == ("L1", 150e9)
    # one memory roof (a GPU, a CPU whose caches sysfs does not describe)
    assert DEVICES["NVIDIA H100 SXM5"].memory_roof(KIB) == ("", 3350e9)


def test_each_op_is_held_to_the_level_its_working_set_fits(sized_trace):
    s = summarize(sized_trace, limits=LIMITS)
    for op, n, level, bw in (
        ("aten::neg", SMALL, "L1", 400e9),
        ("aten::abs", MID, "L2", 200e9),
        ("aten::sqrt", BIG, "DRAM", DRAM),
    ):
        rf = s[op].roofline
        per_call = 2 * n * 4  # the input read, the output written
        assert (rf.memory_level, rf.roof_bytes_per_s, rf.largest_call_bytes) == (level, bw, per_call), op
        assert rf.memory_time_us == pytest.approx(3 * per_call / bw * 1e6), op
        assert rf.time_at_roof_us == pytest.approx(max(3 * per_call / bw, 3 * n / 100e9) * 1e6), op
        assert rf.pct_of_roof == pytest.approx(100 * rf.time_at_roof_us / rf.time_us), op
    # one op at two sizes: each call's bytes at its own level; the row names the level of most bytes
    exp = s["aten::exp"].roofline
    small_b, big_b = 2 * SMALL * 4, 2 * 2 * MIB * 4
    assert exp.memory_time_us == pytest.approx(3 * (small_b / 400e9 + big_b / 100e9) * 1e6)
    assert exp.memory_level == "L3" and exp.largest_call_bytes == big_b
    assert s["aten::exp"].work.bytes_by_call_size == {13: (3.0 * small_b, small_b), 24: (3.0 * big_b, big_b)}


def test_the_table_the_report_and_the_data_show_the_level(sized_trace):
    s = summarize(sized_trace, limits=LIMITS)
    text = s.roofline_table(limit=None)
    header = next(line for line in text.splitlines() if line.startswith("Name"))
    assert header.split()[6:8] == ["Bound", "Level"]
    sqrt_line = next(line for line in text.splitlines() if line.startswith("aten::sqrt "))
    assert sqrt_line.split()[8:11] == ["memory", "fp32", "DRAM"]  # Bound, Level
    assert "L1 (32 KiB) 400 GB/s, L2 (2 MiB) 200 GB/s, L3 (32 MiB) 100 GB/s, DRAM 20 GB/s" in text
    html = render_html(s)
    for name, _, bw in LEVELS:
        assert f'class="roof roof-cache" data-level="{name}" data-bytes-per-s="{bw}"' in html
    assert 'class="roof roof-memory" data-level="DRAM"' in html and '<th class="text">Level</th>' in html
    back = Summary.from_json(s.to_json())  # the JSON keeps the levels and each row's sizes
    assert back.limits == s.limits and back["aten::exp"].work == s["aten::exp"].work
    assert back["aten::exp"].roofline == s["aten::exp"].roofline
    folded = fold_summaries([s, back])  # two windows: the sizes add up, the level stays
    assert folded["aten::exp"].roofline.memory_time_us == pytest.approx(2 * s["aten::exp"].roofline.memory_time_us)
    # a GPU: one memory roof, no level column
    gpu = summarize(sized_trace, limits=DEVICES["NVIDIA H100 SXM5"])
    assert gpu["aten::sqrt"].roofline.memory_level == "" and "Level" not in gpu.roofline_table()


def _with_dram(limits: DeviceLimits, bw: float, levels=None) -> DeviceLimits:
    return replace(limits, memory_bandwidth=bw, cache_levels=LEVELS if levels is None else levels)


def test_no_op_is_above_its_roof_without_the_reason_nor_called_at_the_limit():
    big = torch.randn(BIG)
    trace = _profile(lambda: big.mul(2.0))
    per_call = 2 * BIG * 4 + 8  # in, out, the wrapped scalar (a 0-dim tensor)
    t = summarize(trace, limits=LIMITS)["aten::mul"].roofline.time_us / 1e6
    achieved = 3 * per_call / t
    by_pct = {}
    for pct in (85.0, 105.0, 300.0):  # a DRAM roof that puts the op at this share of it
        s = summarize(trace, limits=_with_dram(LIMITS, achieved * 100 / pct, levels=(("L3", 32 * MIB, 10 * achieved),)))
        by_pct[pct] = s
        rf = s["aten::mul"].roofline
        assert rf.memory_level == "DRAM" and rf.pct_of_roof == pytest.approx(pct, rel=1e-6)
    at85, at105, at300 = (by_pct[p]["aten::mul"].roofline for p in (85.0, 105.0, 300.0))
    assert at85.at_limit and at85.above_roof == ""
    assert at105.at_limit and "noise" in at105.above_roof  # above 100 %: says why, within the noise
    assert not at300.at_limit and at300.time_at_stake_us == 0
    assert "above the DRAM roof, below the L3 one" in at300.above_roof and "was still in L3" in at300.above_roof
    text = by_pct[300.0].roofline_table()
    row = next(line for line in text.splitlines() if line.startswith("aten::mul "))
    assert "300.0% *" in row and "at limit" not in row
    assert f"* aten::mul at 300% of its DRAM roof: {at300.above_roof}" in text
    # the diagnosis: at 85 % the op is at the limit; at 300 % it is neither at the limit nor a finding
    notes85 = diagnose_trace(trace, summary=by_pct[85.0]).notes
    assert any("at the device's limit" in n and "aten::mul" in n for n in notes85)
    d300 = diagnose_trace(trace, summary=by_pct[300.0])
    assert not any("at the device's limit" in n and "aten::mul" in n for n in d300.notes)
    assert d300.finding("below_roof") is None
    # faster than every level, or roofs measured under load: each its own reason
    slow = _with_dram(LIMITS, achieved / 3, levels=(("L3", 32 * MIB, achieved / 2),))
    assert "faster than any measured bandwidth" in summarize(trace, limits=slow)["aten::mul"].roofline.above_roof
    loaded = replace(slow, source="measured under load (other processes used 1.2 CPUs) ...")
    assert "measured while other processes" in summarize(trace, limits=loaded)["aten::mul"].roofline.above_roof


def test_limits_and_work_saved_before_the_levels_still_load():
    old = {  # a cache file / summary.json "limits" written before the levels (no cache_levels)
        "name": "CPU of vm",
        "memory_bandwidth": 22658083279.7,
        "peak_flops": {"matrix/fp32": 95973652741.3, "matrix/bf16": 206928996543.9, "vector/fp32": 95973652741.3},
        "source": "measured 2026-12-05 with torch 2.13.0+cpu, 2 threads; cached cpu-limits-vm-torch2.13.0+cpu-t2.json",
        "scope": "2 threads",
    }
    limits = DeviceLimits.from_dict(old)
    assert limits.cache_levels == () and limits.memory_roof(KIB) == ("", old["memory_bandwidth"])
    assert "22.7 GB/s memory" in limits.line() and "cache_levels" not in limits.to_dict()
    # a row's work saved before the sizes: its mean call picks the level
    work = OpWork.from_dict({"calls": 2, "flops": 2048.0, "bytes": 16384.0, "time_us": 1.0, "flops_by_roof": {"vector/fp32": 2048.0}})
    rf = roofline_of(work, LIMITS)
    assert rf is not None and rf.memory_level == "L1" and rf.memory_time_us == pytest.approx(16384 / 400e9 * 1e6)
    assert roofline_of(work, limits).memory_level == ""
    # a row's roofline saved before the reasons: above its roof, it says why and is not at the limit
    saved = {"calls": 20, "flops": 8.4e7, "bytes": 3.36e8, "time_us": 10244.0, "achieved_flops_per_s": 8.2e9}
    saved |= {"achieved_bytes_per_s": 3.28e10, "intensity": 0.25, "bound": "memory", "roof_flops_per_s": 9.6e10}
    saved |= {"dtype": "vector/fp32", "time_at_roof_us": 14813.0, "pct_of_roof": 144.6}
    old_rf = Roofline.from_dict(saved)
    assert not old_rf.at_limit and "one memory roof" in old_rf.above_roof
    assert Roofline.from_dict(saved | {"pct_of_roof": 93.0}).above_roof == ""
    # configured levels: checked like the rest
    given = limits_from_user({"memory_bandwidth": 1e10, "peak_flops": {"matrix/fp32": 1e11}, "cache_levels": [["L2", MIB, 1e11]]})
    assert given.cache_levels == (("L2", float(MIB), 1e11),) and given.memory_roof(KIB) == ("L2", 1e11)
    for bad in ([["L2", 0, 1e11]], [["L2", MIB]], "L2"):
        with pytest.raises(ConfigurationError, match="cache"):
            limits_from_user({"memory_bandwidth": 1e10, "peak_flops": {"matrix/fp32": 1e11}, "cache_levels": bad})


def _write_cache_dir(root: Path, entries: list[tuple[str, str, str, str]]) -> Path:
    for i, (level, kind, size, shared) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(value + "\n")
    return root


def test_cache_sizes_come_from_sysfs_and_a_cpu_without_it_has_one_memory_roof(tmp_path, monkeypatch):
    fake = _write_cache_dir(
        tmp_path / "cache",
        [("1", "Data", "48K", "0,16"), ("1", "Instruction", "32K", "0,16"), ("2", "Unified", "2048K", "0,16"), ("3", "Unified", "105M", "0-31")],
    )
    assert cl.cache_topology(fake) == [("L1", 48 * KIB, 2), ("L2", 2 * MIB, 2), ("L3", 105 * MIB, 32)]
    assert cl.cache_topology(tmp_path / "absent") == []
    monkeypatch.setattr(cl, "cache_topology", lambda: [])
    assert cl._cache_levels(torch.get_num_threads(), None) == ()  # nothing measured: the DRAM roof alone


def _sysfs_caches() -> list[tuple[int, int]]:
    """(level, bytes) of CPU 0's data and unified caches, read by hand."""
    out = {}
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if (d / "type").read_text().strip() != "Instruction":
            size = (d / "size").read_text().strip()
            out[int((d / "level").read_text())] = int(size[:-1]) * {"K": KIB, "M": MIB}[size[-1]]
    return sorted(out.items())


@pytest.mark.timing
def test_measured_levels_are_this_cpus_caches_and_faster_than_its_memory():
    sysfs = _sysfs_caches()
    if not sysfs:
        pytest.skip("this machine's sysfs does not describe its caches")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a second process on a 2-core machine leaves it a core
    try:
        limits = cl.measure_cpu_limits()
    finally:
        torch.set_num_threads(threads)
    measured = {name: (size, bw) for name, size, bw in limits.cache_levels}
    assert set(measured) <= {f"L{level}" for level, _ in sysfs} and "L2" in measured, limits.line()
    for level, size in sysfs:  # one thread: one core's caches
        if f"L{level}" in measured:
            assert measured[f"L{level}"][0] == size
    # loosely (a loaded machine): the private caches stream no slower than main memory, the fastest clearly faster
    dram = limits.memory_bandwidth
    assert all(bw >= dram for name, (_, bw) in measured.items() if name in ("L1", "L2")), limits.line()
    assert max(bw for _, bw in measured.values()) >= 1.5 * dram, limits.line()


@pytest.mark.timing
def test_on_this_cpu_a_small_and_a_large_op_sit_at_different_levels_within_their_roofs():
    small, big = torch.randn(2048), torch.randn(BIG)  # 16 KiB and 128 MiB read + written a call
    small.neg(), big.mul(2.0)
    with ns.profile_neuron(record_shapes=True) as run:
        for _ in range(20):
            small.neg()
        for _ in range(3):
            big.mul(2.0)
    s = run.summary
    assert s.limits is not None
    cached = cl.cache_path()
    if not s.limits.source.startswith("measured under load"):  # the levels were read from the cache file
        assert [list(x) for x in s.limits.cache_levels] == json.loads(cached.read_text()).get("cache_levels", [])
    neg, mul = s["aten::neg"].roofline, s["aten::mul"].roofline

    def level_of(nbytes: float) -> str:
        # the first level whose half holds it (the working set each level was measured with)
        return next((name for name, size, _ in s.limits.cache_levels if nbytes <= size / 2), "DRAM" if s.limits.cache_levels else "")

    assert neg.memory_level == level_of(2 * 2048 * 4) and mul.memory_level == level_of(2 * BIG * 4 + 8)
    if s.limits.cache_levels:
        assert neg.memory_level != mul.memory_level
    for rf in (neg, mul):  # above its roof: says why, and is not at the limit
        assert (rf.pct_of_roof > 100) == bool(rf.above_roof), rf
        assert rf.pct_of_roof <= 110 or not rf.at_limit, rf


def test_the_roofs_say_whether_bf16_has_matrix_units():
    assert DEVICES["NVIDIA A100 SXM4 80GB"].has_bf16_matrix_units  # 312 vs 19.5 TFLOP/s
    assert DEVICES["NeuronCore-v2 (Trn1/Inf2)"].has_bf16_matrix_units
    assert not DEVICES["NVIDIA V100 SXM2"].has_bf16_matrix_units  # fp16 tensor cores only
    no_units = DeviceLimits("CPU", 3e10, {"matrix/fp32": 1.7e11, "matrix/bf16": 1.3e9}, cache_levels=LEVELS)
    assert not no_units.has_bf16_matrix_units and "no bf16 matrix units: bf16 matmul 0.0076x fp32" in no_units.line()
    assert "bf16" not in DEVICES["NVIDIA H100 SXM5"].line().split("matrix/fp32")[1].split("memory")[0]


def _bf16_speedup(rounds: int, m: int = 512) -> float:
    """fp32 over bf16 matmul time (> 1: bf16 faster), each the best of ``rounds`` calls taken in
    alternating order: a burst of load that slows one call leaves the best of the others."""
    operands = {dt: (torch.randn(m, m).to(dt), torch.randn(m, m).to(dt)) for dt in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(operands, float("inf"))
    for a, b in operands.values():
        torch.mm(a, b)  # first-call set-up
    for k in range(rounds):
        for dt in list(operands)[:: 1 if k % 2 == 0 else -1]:
            a, b = operands[dt]
            t = time.perf_counter()
            torch.mm(a, b)
            best[dt] = min(best[dt], time.perf_counter() - t)
    return best[torch.float32] / best[torch.bfloat16]


@pytest.mark.timing
def test_this_cpus_bf16_flag_agrees_with_timing_both_matmuls_here():
    limits = cl.cpu_limits()
    # the flag's threshold is 1.5x; a timing near it is measured again, with more rounds
    speedup = _bf16_speedup(15)
    for rounds in (60, 240):
        if not 1.2 < speedup < 1.8:
            break
        speedup = _bf16_speedup(rounds)
    assert limits.has_bf16_matrix_units == (speedup >= 1.5), (speedup, limits.line())
