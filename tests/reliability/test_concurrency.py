"""16 threads + 64 asyncio tasks x 200 calls each, sample=0.1: no exception, no deadlock
(a timeout fails the test), every result correct, and the books balance:
profiled + skipped + skipped_backpressure == sampled calls."""

from __future__ import annotations

import asyncio
import threading
import time

import torch
from workloads import rmsnorm_naive

import neuronscope as ns

THREADS, TASKS, CALLS = 16, 64, 200
DEADLINE_S = 300


def test_threads_and_tasks_16x200_plus_64x200_calls_at_sample_0_1(xw):
    x, w = xw
    expected = rmsnorm_naive(x, w)

    @ns.profile_neuron(name="sync_infer", sample=0.1, seed=1)
    def infer(a):
        with ns.region("norm"):
            return rmsnorm_naive(a, w)

    @ns.profile_neuron(name="async_infer", sample=0.1, seed=2)
    async def infer_async(a):
        await asyncio.sleep(0)
        with ns.region("norm"):
            out = rmsnorm_naive(a, w)
        await asyncio.sleep(0)
        return out

    failures: list[BaseException] = []
    wrong = 0
    lock = threading.Lock()

    def thread_body():
        nonlocal wrong
        for _ in range(CALLS):
            try:
                out = infer(x)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
                continue
            if not torch.equal(out, expected):
                with lock:
                    wrong += 1

    async def task_body():
        nonlocal wrong
        for _ in range(CALLS):
            try:
                out = await infer_async(x)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
                continue
            if not torch.equal(out, expected):
                with lock:
                    wrong += 1

    async def all_tasks():
        await asyncio.gather(*(task_body() for _ in range(TASKS)))

    t0 = time.monotonic()
    threads = [threading.Thread(target=thread_body, daemon=True) for _ in range(THREADS)]
    loop_thread = threading.Thread(target=lambda: asyncio.run(all_tasks()), daemon=True)
    for t in threads + [loop_thread]:
        t.start()
    for t in threads + [loop_thread]:
        t.join(timeout=max(DEADLINE_S - (time.monotonic() - t0), 1))
        assert not t.is_alive(), "deadlock: a caller did not finish within the deadline"
    assert ns.flush(120)
    elapsed = time.monotonic() - t0
    s = ns.stats()
    total = (THREADS + TASKS) * CALLS
    sampled = total - s["unsampled"]
    print(f"{total} calls in {elapsed:.1f} s: {sampled} sampled -> profiled {s['profiled']}, skipped {s['skipped']}, "
          f"skipped_backpressure {s['skipped_backpressure']}, joined {s['joined']}, errors {s['errors']}")
    assert failures == [] and wrong == 0
    assert s["errors"] == 0 and s["joined"] == 0
    assert s["profiled"] + s["skipped"] + s["skipped_backpressure"] == sampled
    assert 0.05 * total < sampled < 0.15 * total
    assert s["profiled"] > 0
    assert not torch.autograd.profiler._is_profiler_enabled  # no leaked profiler state


def test_tasks_created_inside_a_profiled_coroutine_nest_into_it(xw):
    x, w = xw

    @ns.profile_neuron(name="inner")
    async def inner(a):
        await asyncio.sleep(0)
        return rmsnorm_naive(a, w)

    @ns.profile_neuron(name="outer")
    async def outer(a):
        return await asyncio.gather(inner(a), inner(a))

    asyncio.run(outer(x))
    ns.flush(30)
    s = ns.stats()
    # each interleaved inner call gets its own run; the outer one covers them all
    assert s["profiled"] == 3 and s["joined"] == 0 and s["skipped"] == 0
