"""Independent references computed straight from a raw Kineto file, in a few plain lines each,
for the real-trace tests (never by the code under test)."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from pathlib import Path

# kernels, copies, memsets (any Kineto format), CUPTI range-profiler kernels, MTIA device lanes
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_profiler_range", "mtia_ccp_events"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_OP_CATS = {"cpu_op", "operator"}


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"]


def reference_launches(events: list[dict]) -> list[dict]:
    """Every kernel/copy/memset with who launched it: ``name``, ``dur`` (µs), ``runtime`` (the name of
    the runtime call its correlation id names, or None) and ``owner`` (the innermost cpu_op on that
    call's thread whose span encloses it; where the file records no launching call, the cpu_op its
    External id names; None when neither gives one)."""
    def cat(e: dict) -> str:
        return (e.get("cat") or "").lower()

    xs = [e for e in events if e.get("ph") == "X"]
    def is_runtime(e: dict) -> bool:  # cuda_runtime, cuda_driver, mtia_runtime, privateuse1_runtime, "Runtime"
        return cat(e) in _RUNTIME_CATS or cat(e).endswith(("_runtime", "_driver"))

    launch = {e["args"]["correlation"]: e for e in xs if is_runtime(e) and "correlation" in (e.get("args") or {})}
    ops: dict[tuple, list] = defaultdict(list)
    for e in xs:
        if cat(e) in _OP_CATS:
            ops[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    for v in ops.values():
        v.sort(key=lambda o: (o[0], -o[1]))
    starts = {k: [o[0] for o in v] for k, v in ops.items()}
    by_external = {
        (e.get("args") or {}).get("External id"): e["name"] for e in xs if cat(e) in _OP_CATS and (e.get("args") or {}).get("External id")
    }
    out: list[dict] = []
    for e in xs:
        if cat(e) not in _DEVICE_CATS:
            continue
        args = e.get("args") or {}
        r = launch.get(args.get("correlation"))
        owner = None
        if r is None and args.get("External id") in by_external:
            owner = by_external[args["External id"]]  # no launching call recorded: the only link
        if r is not None:
            key = (r["pid"], r["tid"])
            lst = ops.get(key, [])
            i = bisect.bisect_right(starts.get(key, []), r["ts"]) - 1
            while i >= 0:  # latest-starting op that encloses the call = the innermost one
                s, end, name = lst[i]
                if end >= r["ts"] + r.get("dur", 0):
                    owner = name
                    break
                i -= 1
        out.append({"name": e["name"], "dur": float(e.get("dur", 0)), "owner": owner, "runtime": r["name"] if r else None})
    return out


def reference_attribution(events: list[dict]) -> tuple[dict[str, float], float]:
    """Device µs per op name (:func:`reference_launches`'s owner); a kernel with no owner is a row
    named after itself. Returns (µs by name, total device µs)."""
    out: dict[str, float] = defaultdict(float)
    total = 0.0
    for k in reference_launches(events):
        out[k["owner"] or k["name"]] += k["dur"]
        total += k["dur"]
    return dict(out), total


def placed_differently(ours: dict[str, float], ref: dict[str, float], total: float) -> float:
    """Share of device time placed on a different name (half the L1 distance over the total)."""
    names = set(ours) | set(ref)
    moved = sum(abs(ours.get(n, 0.0) - ref.get(n, 0.0)) for n in names) / 2
    return moved / total if total else 0.0
