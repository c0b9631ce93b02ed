"""User exceptions of several types, BaseExceptions included, propagate unchanged with
their traceback; the profiler is left stopped; the next call profiles normally."""

from __future__ import annotations

import asyncio
import traceback

import pytest
import torch
from workloads import rmsnorm_naive

import neuronscope as ns


class ModelError(RuntimeError):
    pass


class Cancelled(BaseException):
    pass


@pytest.mark.parametrize("exc_type", [ValueError, ModelError, KeyError, KeyboardInterrupt, SystemExit, Cancelled])
@pytest.mark.parametrize("where", ["body", "region"])
def test_exception_propagates_unchanged(exc_type, where, xw):
    x, w = xw
    raised = exc_type("boom from the model")

    @ns.region("inner_region")
    def failing_region(a):
        a.sum()
        raise raised

    @ns.profile_neuron(name="fails")
    def fails(a):
        rmsnorm_naive(a, w)
        if where == "region":
            failing_region(a)
        raise raised

    with pytest.raises(exc_type) as info:
        fails(x)
    assert info.value is raised
    frames = [f.name for f in traceback.extract_tb(info.tb)]
    assert frames[-1] == ("failing_region" if where == "region" else "fails")
    assert not torch.autograd.profiler._is_profiler_enabled
    ns.flush(30)
    assert ns.last_run().error == exc_type.__name__

    @ns.profile_neuron(name="next")
    def ok(a):
        return rmsnorm_naive(a, w)

    assert torch.equal(ok(x), rmsnorm_naive(x, w))
    ns.flush(30)
    assert ns.last_run().name == "next" and ns.last_run().error is None
    assert ns.last_run().summary["aten::rsqrt"].calls == 1


def test_async_cancellation_propagates(xw):
    @ns.profile_neuron(name="cancelled")
    async def slow(a):
        a.sum()
        await asyncio.sleep(10)

    async def main():
        task = asyncio.create_task(slow(xw[0]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not torch.autograd.profiler._is_profiler_enabled
    ns.flush(30)
    assert ns.last_run().error == "CancelledError"
