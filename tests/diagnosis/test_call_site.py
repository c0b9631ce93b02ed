"""file:line is the line that made the call, not the function's first line (issue 25.4).

torch's Python tracer names a frame by its function's first line (the decorator of a
decorated function); these profiles run decorated functions whose calls sit several lines
below it, and the expected line is found in this file's own source by a marker comment."""

from __future__ import annotations

import functools
import inspect
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import neuronscope as ns
from support.gaps import gaps_slept_through
from neuronscope.analysis.diagnosis.locations import source_of
from neuronscope.trace.kinds import EventKind

HERE = Path(__file__).name


def _line(marker: str) -> int:
    """The line of this file that ends with ``# <marker>``."""
    lines = Path(__file__).read_text().splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def passthrough(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper


@passthrough
def decode_step(x: torch.Tensor, w: torch.Tensor) -> float:
    h = x @ w
    h = torch.tanh(h)
    time.sleep(0.05)  # sleep-line
    first = h.sum().item()  # first-item
    second = float(h.mean())  # float-read
    scaled = h * w  # mul-line
    return first + second + float(scaled[0, 0])


def _positions(trace, name: str) -> np.ndarray:
    return np.flatnonzero((trace.kind == EventKind.OP) & trace.name_mask(lambda n: n == name))


@pytest.fixture(scope="module")
def run():
    torch.manual_seed(0)
    x, w = torch.randn(32, 32), torch.randn(32, 32)
    with ns.profile_neuron(name="call-site", with_stack=True) as r:
        for _ in range(4):
            decode_step(x, w)
    assert r.trace is not None
    return r


def test_the_decorated_function_is_named_by_its_decorator_line_in_the_raw_trace(run):
    # the premise: torch's tracer names the frame by the decorator, not the line that called
    first = inspect.getsourcelines(decode_step.__wrapped__)[1]
    frames = [n for n in run.trace.names if n.endswith(": decode_step")]
    assert frames and all(f"({first})" in n for n in frames)
    assert first < _line("first-item") - 3


def test_a_value_read_points_at_its_own_line(run):
    where = source_of(run.trace, _positions(run.trace, "aten::item"), limit=3)
    assert where[0] == f"{HERE}:{_line('first-item')} (decode_step)"


def test_two_reads_in_one_function_are_told_apart(run):
    # h.sum().item() and float(h.mean()) both run aten::_local_scalar_dense, four times each
    where = source_of(run.trace, _positions(run.trace, "aten::_local_scalar_dense"), limit=5)
    assert f"{HERE}:{_line('first-item')} (decode_step)" in where
    assert f"{HERE}:{_line('float-read')} (decode_step)" in where


def test_an_operator_points_at_its_line(run):
    # h * w runs aten::mul with no Python call around it: matched to the `*` in the source
    where = source_of(run.trace, _positions(run.trace, "aten::mul"), limit=1)
    assert where == [f"{HERE}:{_line('mul-line')} (decode_step)"]


def test_the_gap_points_at_the_sleeping_line(run):
    # The gaps the sleeps made, not simply the longest gap: beside two busy processes and another
    # test process, the thread once lost its core for 99 ms inside torch.tanh's call before its
    # op began -- longer than the 50 ms sleeps, rightly attributed to the tanh line.
    by_sleep = gaps_slept_through(run, "decode_step")
    assert by_sleep and max(g.duration_us for g in by_sleep) >= 45_000
    assert all(g.cls == "host_wait" and g.source == f"{HERE}:{_line('sleep-line')} (decode_step)" for g in by_sleep), by_sleep


def test_without_the_source_the_frame_line_is_kept(run, monkeypatch):
    # a trace read on another machine: the file is not there, so the tracer's line stands
    import linecache

    from neuronscope.analysis import callsite

    first = inspect.getsourcelines(decode_step.__wrapped__)[1]
    callsite._calls.cache_clear()
    callsite._tree.cache_clear()
    monkeypatch.setattr(linecache, "getlines", lambda *a, **k: [])
    try:
        where = source_of(run.trace, _positions(run.trace, "aten::item"), limit=1)
    finally:
        callsite._calls.cache_clear()
        callsite._tree.cache_clear()
    assert where == [f"{HERE}:{first} (decode_step)"]
