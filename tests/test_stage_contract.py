"""One contract between the stages (issue 26): each stage hands the next a frozen record,
sinks and reports read only the finished RunResult, slow device enrichment runs after the
summary is published, and every sink is flushed through one path with one deadline."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from pathlib import Path

import pytest
import torch

import neuronscope as ns
from neuronscope import sinks
from neuronscope.capture import lifecycle as lifecycle_module
from neuronscope.capture.devices.cpu import CpuBackend
from neuronscope.result import Analysis, DeviceFacts, RunResult

SRC = Path(ns.__file__).parent


def _work() -> None:
    x = torch.randn(64, 64)
    for _ in range(3):
        x = torch.tanh(x @ x)


def test_a_sink_gets_the_frozen_result_the_run_hands_out():
    seen: list[RunResult] = []
    sink = sinks.CallbackSink(seen.append, name="collect")
    sinks.add_sink(sink)
    try:
        with ns.profile_neuron(name="contract") as run:
            _work()
        assert run.wait(60)
    finally:
        sinks.remove_sink(sink)
    (result,) = [r for r in seen if r.name == "contract"]
    # the sinks saw the result the run completes with (manifest.json then adds its file list)
    assert isinstance(result, RunResult) and result.analysis is run.result.analysis
    assert result.summary is run.summary and result.diagnosis is run.diagnosis and result.trace is run.trace
    assert result.path == run.path and result.path is not None and dict(result.manifest)["name"] == "contract"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "complete"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.analysis.summary = None  # type: ignore[misc,union-attr]


def test_sinks_run_in_order_and_one_failing_does_not_stop_the_next():
    order: list[str] = []

    def broken(result: RunResult) -> None:
        order.append("broken")
        raise RuntimeError("a sink bug")

    first, second = sinks.CallbackSink(broken, name="broken"), sinks.CallbackSink(lambda r: order.append("second"), name="second")
    sinks.add_sink(first)
    sinks.add_sink(second)
    try:
        errors = ns.stats()["errors"]
        with ns.profile_neuron(name="order") as run:
            _work()
        assert run.wait(60)
    finally:
        sinks.remove_sink(first)
        sinks.remove_sink(second)
    assert order == ["broken", "second"]
    assert ns.stats()["errors"] == errors + 1 and run.status == "complete" and run.path is not None


def test_a_callable_is_not_a_sink():
    with pytest.raises(ns.ConfigurationError, match="export"):
        sinks.add_sink(print)  # type: ignore[arg-type]


class _SlowEnrichment(CpuBackend):
    """A device whose enrichment (Neuron Explorer's place) takes a while and adds a note."""

    release = threading.Event()

    def enrich(self, name, raw_dir, facts):
        self.release.wait(30)
        return DeviceFacts(manifest={"enriched": True}, notes=("enrichment note",), warnings=("enrichment warning",))


def test_slow_enrichment_runs_after_the_summary_is_published(monkeypatch):
    monkeypatch.setattr(lifecycle_module, "select_backend", lambda device, neuron=None: _SlowEnrichment())
    _SlowEnrichment.release.clear()
    with ns.profile_neuron(name="enriched") as run:
        _work()
    t0 = time.monotonic()
    summary = run.summary  # published before the enrichment ran
    assert summary is not None and "enrichment note" not in summary.notes
    assert run.diagnosis is not None and not run.done
    assert time.monotonic() - t0 < 25
    _SlowEnrichment.release.set()
    assert run.wait(60)
    assert "enrichment note" in run.summary.notes and "enrichment warning" in run.warnings
    assert run.manifest["enriched"] is True


def test_flush_and_shutdown_reach_every_sink_within_one_deadline():
    calls: list[tuple[str, float | None]] = []

    class Recording(sinks.CallbackSink):
        def force_flush(self, timeout_s):
            calls.append(("flush", timeout_s))
            time.sleep(0.2)
            return True

    a, b = Recording(lambda r: None, name="a"), Recording(lambda r: None, name="b")
    sinks.add_sink(a)
    sinks.add_sink(b)
    try:
        assert sinks.flush(5.0)
    finally:
        sinks.remove_sink(a)
        sinks.remove_sink(b)
    (_, first), (_, second) = calls
    assert first is not None and second is not None and 4.0 < first <= 5.0 and second <= first - 0.15


def test_no_stage_reaches_into_another_stages_private_fields():
    # the handle is written only through its own methods; nothing reads private attributes
    # of a run by name, and no attribute is bolted onto one
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        for pattern in (r"getattr\(\w*run\w*, \"_", r"\brun\._(?!publish|complete|finish|wait|summarised|diagnosed|done)\w+ ="):
            offenders += [f"{path.relative_to(SRC)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert offenders == []


def test_the_analysis_and_result_records_are_frozen_dataclasses():
    for cls in (Analysis, DeviceFacts, RunResult):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
