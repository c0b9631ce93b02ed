"""An asyncio service on a contended core, for test_async_trigger_timing.py:
``python _async_loaded.py CORE CALLS EVERY GAP_MS RARE`` pins this process to CORE (the test has
two CPU-burning processes there) and serves CALLS calls of an ``async def`` function with a
SlowCalls trigger: short ones, and every EVERY-th call a rare one of the kinds in RARE in turn --
``long`` (a slow path of 200 more matrix multiplications, ~0.5 ms of CPU), ``io`` (its await takes
5 ms) -- back to back or GAP_MS apart (a service waiting for requests); prints one JSON line of
what it saw. Run directories go to ``NEURONSCOPE_OUTPUT_DIR``.

In a child process so that the pinning stays with it: threads inherit their creator's CPUs, and
neuronscope's workers or torch's thread pool made during a pinned test would stay pinned for the
rest of the session."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import torch

import neuronscope as ns

W = torch.randn(64, 64) / 8
#: the slow path's extra matrix multiplications, on top of the 2 of every call
LONG_EXTRA_MM = 200
IO_S = 0.005  # how long an I/O call's await takes


def kind(x: torch.Tensor) -> str:
    return {16: "long", 4: "io"}.get(x.shape[0], "short")


ROWS = {"short": 8, "long": 16, "io": 4}


async def reply_after(seconds: float) -> None:
    """What a call awaits: a reply that takes ``seconds`` -- the same work on the loop's thread
    whatever it is, so an I/O call differs from a short one by its wait alone."""
    loop = asyncio.get_running_loop()
    reply = loop.create_future()
    loop.call_later(seconds, reply.set_result, None)
    await reply


@ns.profile_neuron(name="async-serve", trigger=ns.SlowCalls(key=kind, capture=1, max_per_hour=50))
async def serve(x: torch.Tensor) -> torch.Tensor:
    k = kind(x)
    y = x @ W
    for _ in range(LONG_EXTRA_MM // 2 if k == "long" else 0):
        y = y @ W
    await reply_after(IO_S if k == "io" else 0)
    for _ in range(LONG_EXTRA_MM // 2 if k == "long" else 0):
        y = y @ W
    return (y @ W).relu()


def _waited_ns() -> int:
    """Nanoseconds this thread was runnable but waited for a core (Linux schedstat)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat", "rb") as f:
        return int(f.read().split()[1])


async def main(calls: int, every: int, gap_s: float, rare: list[str]) -> dict:
    kinds: dict[str, list[int]] = {"long": [], "io": []}  # the calls of each rare kind
    outer_is_coroutine = True
    timed = serve._self_neuronscope_calls
    contended_calls = 0  # calls begun while the trigger read the loop's thread as contended
    waited0, t0 = _waited_ns(), time.monotonic_ns()
    for i in range(1, calls + 1):  # numbered as the trigger numbers them ("call N took ...")
        k = "short" if i % every else rare[i // every % len(rare)]
        if k != "short":
            kinds[k].append(i)
        pending = serve(torch.ones(ROWS[k], 64))
        outer_is_coroutine &= asyncio.iscoroutine(pending)  # what frameworks check
        contended_calls += timed.contended[0]
        await pending
        if gap_s:
            await asyncio.sleep(gap_s)
    state = timed.state
    return {
        **kinds,
        "wait_share": (_waited_ns() - waited0) / (time.monotonic_ns() - t0),
        "contended_calls": contended_calls,
        "outer_is_coroutine": outer_is_coroutine,
        "calls_timed": [state.total, state.busy_total],
        "thresholds_us": [state.threshold[0] / 1e3, state.busy_threshold[0] / 1e3],
    }


if __name__ == "__main__":
    core, n, every, gap_ms = (int(a) for a in sys.argv[1:5])
    rare = sys.argv[5].split(",")
    os.sched_setaffinity(0, {core})  # before any thread exists: all of them share the core
    torch.set_num_threads(1)
    seen = asyncio.run(main(n, every, gap_ms / 1e3, rare))
    ns.flush(120)
    print(json.dumps({**seen, "stats": ns.stats()}), flush=True)
