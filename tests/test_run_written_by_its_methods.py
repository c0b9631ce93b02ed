"""The user's ``Run`` handle is written only through its own methods (issue 38): every attribute
set on a Run, in every way a capture ends -- a ``with`` block, a decorated function and generator,
a scheduled profile and a profile nested in it, a profile in windows, a sampled-out call, a
profile that stopped at a limit, a failing call -- is set by code in ``_run.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronscope as ns
from neuronscope._run import Run

#: processing publishes a schedule window's start itself (issue 38's analysis rewrite moves it):
#: its one write is counted apart, and must stay the only one
PENDING = {("processing.py", "start_ns")}


def _work(n: int = 3) -> None:
    x = torch.randn(32, 32)
    for _ in range(n):
        x = torch.tanh(x @ x)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(module file, attribute) of every Run attribute set outside _run.py while the test runs."""
    seen: list[tuple[str, str]] = []
    original = Run.__setattr__

    def recording(self: Run, name: str, value: Any) -> None:
        where = Path(sys._getframe(1).f_code.co_filename).name
        if where != "_run.py":
            seen.append((where, name))
        original(self, name, value)

    monkeypatch.setattr(Run, "__setattr__", recording)
    return seen


def test_every_way_a_capture_ends_sets_the_run_through_its_methods(writes: list[tuple[str, str]], tmp_path: Path):
    runs: list[Run] = []
    with ns.profile_neuron(name="block", output_dir=tmp_path) as run:
        _work()
    runs.append(run)

    @ns.profile_neuron(name="decorated", output_dir=tmp_path)
    def decorated() -> None:
        _work()

    @ns.profile_neuron(name="streamed", output_dir=tmp_path)
    def streamed():
        for _ in range(2):
            _work(1)
            yield 1

    decorated()
    runs.append(ns.last_run())
    assert list(streamed()) == [1, 1]
    runs.append(ns.last_run())

    @ns.profile_neuron(name="fails", output_dir=tmp_path)
    def fails() -> None:
        _work(1)
        raise ValueError("the user's bug")

    with pytest.raises(ValueError):
        fails()
    runs.append(ns.last_run())

    schedule = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=2)
    with ns.profile_neuron(name="scheduled", schedule=schedule, output_dir=tmp_path) as scheduled:
        for _ in range(3):
            with ns.profile_neuron(name="inside") as joined:  # nested in a schedule: a region of it
                _work(1)
            scheduled.step()
    runs += [scheduled, joined]

    with ns.profile_neuron(name="windows", windows=ns.Windows(steps=2, keep=1), output_dir=tmp_path) as windowed:
        for _ in range(6):
            _work(1)
            ns.step()
    runs.append(windowed)

    with ns.profile_neuron(name="limited", max_steps=1, output_dir=tmp_path) as limited:
        for _ in range(3):
            _work(1)
            ns.step()
    runs.append(limited)

    with ns.profile_neuron(name="sampled-out", sample=0.0) as unsampled:
        _work(1)
    runs.append(unsampled)

    for r in runs:
        assert r is not None and r.wait(60)
    assert [r.status for r in runs] == ["complete", "complete", "complete", "error", "complete", "joined", "complete", "complete", "skipped"]
    assert runs[3].error == "ValueError" and limited.coverage is not None and limited.coverage.stopped == "steps"
    assert unsampled.skip_reason == "sampled out" and joined.parent is scheduled and len(scheduled.windows) == 2
    assert all(r.start_ns > 0 and r.end_ns >= r.start_ns for r in runs if r.profiled and r.parent is None)
    outside = [w for w in writes if w not in PENDING]
    assert outside == [], f"Run attributes set outside _run.py: {sorted(set(outside))}"
