"""A decorated generator or async generator (a streaming response) is profiled over its whole
iteration, not around the creation of the generator object; a window with nothing in it gets no
verdict."""

from __future__ import annotations

import asyncio

import pytest
import torch

import neuronscope as ns

W = torch.randn(64, 64)


def test_a_generator_is_profiled_over_its_iteration():
    @ns.profile_neuron(name="stream")
    def stream(n):
        x = torch.randn(8, 64)
        for _ in range(n):
            x = x @ W
            yield float(x.sum())

    gen = stream(4)
    assert ns.last_run() is None or ns.last_run().name != "stream"  # nothing ran yet
    chunks = list(gen)
    assert len(chunks) == 4
    run = ns.last_run()
    assert run.name == "stream"
    ns.flush()
    assert run.summary["aten::mm"].calls == 4
    assert run.diagnosis.bound_by != "none"


def test_a_generator_closed_early_ends_its_profile_normally():
    @ns.profile_neuron(name="stream_early")
    def stream():
        x = torch.randn(8, 64)
        while True:
            x = x @ W
            yield x

    gen = stream()
    next(gen), next(gen)
    gen.close()  # the client went away
    run = ns.last_run()
    ns.flush()
    assert run.name == "stream_early" and run.error is None
    assert run.summary["aten::mm"].calls == 2


def test_an_async_generator_is_profiled_over_its_iteration():
    @ns.profile_neuron(name="astream")
    async def astream(n):
        x = torch.randn(8, 64)
        for _ in range(n):
            x = x @ W
            await asyncio.sleep(0)
            yield float(x.sum())

    async def consume():
        return [c async for c in astream(3)]

    assert len(asyncio.run(consume())) == 3
    run = ns.last_run()
    ns.flush()
    assert run.name == "astream" and run.summary["aten::mm"].calls == 3


def test_a_generator_with_a_trigger_is_refused_with_what_to_do():
    with pytest.raises(ns.ConfigurationError, match="generator 'gen'.*every=, sample="):

        @ns.profile_neuron(name="gen", trigger=ns.SlowCalls())
        def gen():
            yield 1


def test_an_empty_window_gets_no_verdict():
    with ns.profile_neuron(name="empty") as run:
        sum(range(1000))  # Python only: no torch op
    ns.flush()
    d = run.diagnosis
    assert d.bound_by == "none" and not d.findings
    assert str(d).startswith("nothing was recorded")
