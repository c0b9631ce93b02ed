"""profile_neuron and region as users write them, against real torch.profiler runs (CPU)."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from workloads import rmsnorm_naive

import neuronscope as ns


def test_context_manager_gives_a_complete_run(xw, _isolated_runs):
    x, w = xw
    with ns.profile_neuron(name="ctx") as run:
        for _ in range(5):
            rmsnorm_naive(x, w)
    assert run.wait(30)
    assert run.status == ns.RunStatus.COMPLETE and run.device == "cpu"
    assert run.summary["aten::rsqrt"].calls == 5
    assert run.path.parent == _isolated_runs and run.path.name.startswith("ctx-")
    assert (run.path / "trace.json.gz").is_file()
    assert run.start_ns < run.end_ns
    assert ns.last_run() is run
    assert "aten::rsqrt" in str(run.summary)
    assert [r.name for r in run.summary.top(2)] == [r.name for r in run.summary.rows[:2]]


def test_bare_decorator_keeps_metadata_and_results(xw):
    x, w = xw

    def original(a: torch.Tensor, b: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        """Run the model."""
        return rmsnorm_naive(a, b) * scale

    infer = ns.profile_neuron(original)
    assert infer.__name__ == "original" and infer.__doc__ == "Run the model."
    assert inspect.signature(infer) == inspect.signature(original)
    assert "scale" in str(inspect.signature(infer))
    out = infer(x, w, scale=2.0)
    assert torch.equal(out, rmsnorm_naive(x, w) * 2.0)
    assert ns.flush(30)
    run = ns.last_run()
    assert run.name.endswith("original") and run.summary["aten::rsqrt"].calls == 1
    # Decorators default to no trace file (production): summary and manifest only.
    assert sorted(p.name for p in run.path.iterdir()) == ["manifest.json", "summary.json"]


def test_decorator_with_arguments(xw, tmp_path):
    x, w = xw

    @ns.profile_neuron(name="infer", output_dir=tmp_path / "mine", save_trace=True)
    def infer(a, b):
        return rmsnorm_naive(a, b)

    infer(x, w)
    ns.flush(30)
    run = ns.last_run()
    assert run.name == "infer" and run.path.parent == tmp_path / "mine"
    assert (run.path / "trace.json.gz").is_file()


def test_methods_static_and_class_methods(xw):
    x, w = xw

    class Model:
        def __init__(self):
            self.w = w

        @ns.profile_neuron
        def forward(self, a):
            return rmsnorm_naive(a, self.w)

        @staticmethod
        @ns.profile_neuron(name="static")
        def static(a):
            return a.sum()

        @classmethod
        @ns.profile_neuron(name="klass")
        def klass(cls, a):
            return cls.__name__, a.mean()

        @ns.profile_neuron(name="outer_static")
        @staticmethod
        def outer_static(a):
            return a.max()

    m = Model()
    assert torch.equal(m.forward(x), rmsnorm_naive(x, w))
    assert Model.static(x) == x.sum()
    assert m.klass(x)[0] == "Model"
    assert Model.outer_static(x) == x.max()
    ns.flush(30)
    assert ns.stats()["profiled"] == 4
    assert Model.forward.__qualname__.endswith("Model.forward")


def test_async_function_profile_covers_the_awaited_body(xw):
    x, w = xw

    @ns.profile_neuron(name="async_infer")
    async def infer(a):
        await asyncio.sleep(0.01)
        return rmsnorm_naive(a, w)  # runs after the await: must be inside the profile

    assert inspect.iscoroutinefunction(infer)
    out = asyncio.run(infer(x))
    assert torch.equal(out, rmsnorm_naive(x, w))
    ns.flush(30)
    run = ns.last_run()
    assert run.name == "async_infer" and run.summary["aten::rsqrt"].calls == 1
    assert run.end_ns - run.start_ns >= 10_000_000


def test_exceptions_pass_through_unchanged_and_are_recorded(xw):
    class Boom(Exception):
        pass

    @ns.profile_neuron(name="fails")
    def fails(a):
        a.sum()
        raise Boom("original")

    with pytest.raises(Boom, match="original") as info:
        fails(xw[0])
    assert info.traceback[-1].name == "fails"
    ns.flush(30)
    run = ns.last_run()
    assert run.error == "Boom" and run.manifest["error"] == "Boom"
    # The profiler is stopped: the next profile works.
    with ns.profile_neuron() as run2:
        xw[0].sum()
    assert run2.summary["aten::sum"].calls == 1
    assert not torch.autograd.profiler._is_profiler_enabled


def test_keyboard_interrupt_like_base_exceptions_propagate(xw):
    @ns.profile_neuron
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    ns.flush(30)
    assert ns.last_run().error == "KeyboardInterrupt"


def test_nested_profiles_get_their_own_runs_and_the_outer_covers_them(xw):
    x, w = xw

    @ns.profile_neuron(name="inner_call")
    def inner(a):
        return rmsnorm_naive(a, w)

    with ns.profile_neuron(name="outer") as outer:
        inner(x)
        with ns.profile_neuron(name="inner_block") as nested:
            x.sum()
        # ready as soon as the inner block ended, while the outer one still records
        assert nested.summary["aten::sum"].calls == 1
    assert ns.stats()["joined"] == 0
    assert set(outer.summary.regions) == {"inner_call", "inner_block"}
    assert outer.summary.regions["inner_call"]["aten::rsqrt"].calls == 1
    assert outer.summary.regions["inner_block"]["aten::sum"].calls == 1
    assert nested.path is not None and outer.path is not None and nested.path != outer.path
    ns.flush(30)
    assert ns.stats()["profiled"] == 3


def test_call_on_another_thread_runs_unprofiled_and_counted(xw):
    x, w = xw
    results = []

    @ns.profile_neuron(name="threaded")
    def infer(a):
        return rmsnorm_naive(a, w)

    with ns.profile_neuron(name="main"):
        t = threading.Thread(target=lambda: results.append(infer(x)))
        t.start()
        t.join()
    assert torch.equal(results[0], rmsnorm_naive(x, w))
    assert ns.stats()["skipped"] == 1


def test_foreign_torch_profiler_is_joined_not_broken(xw):
    x, w = xw
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with ns.profile_neuron(name="mine") as run:
            rmsnorm_naive(x, w)
    assert run.status == ns.RunStatus.SKIPPED
    assert "mine" in {e.key for e in prof.key_averages()}  # shows up as a region in theirs


def test_schedule_windows_become_runs(xw):
    x, w = xw
    with ns.profile_neuron(name="loop", schedule=schedule(wait=1, warmup=1, active=2, repeat=2)) as run:
        for _ in range(9):
            rmsnorm_naive(x, w)
            run.step()
    assert len(run.windows) == 2
    assert all(win.wait(30) for win in run.windows)
    for win in run.windows:
        assert win.summary["aten::rsqrt"].calls == 2
    assert len({win.path for win in run.windows}) == 2
    assert run.summary is run.windows[-1].summary


def test_step_without_schedule_is_a_clear_error():
    with ns.profile_neuron() as run:
        with pytest.raises(ns.ConfigurationError, match="schedule"):
            run.step()


def test_disabled_means_plain_calls(xw):
    ns.configure(enabled=False)
    try:
        with ns.profile_neuron() as run:
            with ns.region("r"):
                xw[0].sum()
        assert run.status == ns.RunStatus.SKIPPED and run.summary is None
        assert not torch.autograd.profiler._is_profiler_enabled
    finally:
        ns.configure(enabled=True)


def test_region_decorator_and_with(xw):
    x, w = xw

    @ns.region
    def embed(a):
        return a * 2

    @ns.region("decode")
    async def decode(a):
        await asyncio.sleep(0)
        return rmsnorm_naive(a, w)

    with ns.profile_neuron() as run:
        with ns.region("forward"):
            embed(x)
            asyncio.run(decode(x))
    regions = run.summary.regions
    qual = embed.__qualname__
    assert f"forward/{qual}" in regions and "forward/decode" in regions
    assert regions["forward/decode"]["aten::rsqrt"].calls == 1
    # No profile: a plain call.
    assert torch.equal(embed(x), x * 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"device": "tpu"}, "device='tpu'.*auto, neuron, cuda, cpu"),
        ({"name": ""}, "name"),
        ({"output_dir": 3}, "output_dir"),
        ({"schedule": 5}, "schedule"),
        ({"save_trace": "yes"}, "save_trace"),
        ({"record_shapes": 1}, "record_shapes"),
    ],
)
def test_bad_arguments_fail_at_creation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ns.profile_neuron(**kwargs)


def test_missing_devices_say_what_to_install():
    with pytest.raises(ns.DeviceUnavailableError, match="CUDA build of torch"):
        ns.profile_neuron(device="cuda")
    with pytest.raises(ns.DeviceUnavailableError, match="torch-neuronx"):

        @ns.profile_neuron(device="neuron")
        def infer():
            pass


def test_forgotten_brackets_give_helpful_errors():
    with pytest.raises(TypeError, match="brackets"):
        with ns.profile_neuron:
            pass
    with pytest.raises(TypeError, match="brackets"):
        with ns.region:
            pass
    with pytest.raises(TypeError, match="name="):
        ns.profile_neuron("infer")
    with pytest.raises(TypeError, match="needs a name"):
        with ns.region():
            pass
