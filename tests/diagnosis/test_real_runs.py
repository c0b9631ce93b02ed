"""The diagnosis of real CPU profiles: the three RMSNorm variants, sleeps, syncs, steps,
TorchTidy's anti-patterns in real training code."""

from __future__ import annotations

import time

import pytest
import torch
from workloads import rmsnorm_naive

import neuronscope as ns
from support.gaps import gaps_slept_through


def rmsnorm_fused(x, w):
    return torch.rms_norm(x, (x.shape[-1],), w, 1e-6)


@pytest.fixture
def big():
    torch.manual_seed(0)
    return torch.randn(8, 128, 512), torch.randn(512)


def _rules(run) -> set[str]:
    return {f.rule for f in run.diagnosis.findings}


def test_naive_rmsnorm_is_an_unfused_elementwise_chain(big):
    x, w = big
    with ns.profile_neuron(name="naive") as run:
        for _ in range(5):
            rmsnorm_naive(x, w)
            ns.step()
    d = run.diagnosis
    f = d.finding("elementwise_chain")
    assert f is not None and f.evidence["occurrences"] == 5
    assert f.evidence["ops"] == ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"]
    assert "torch.rms_norm" in f.message and f.us_at_stake > 0
    assert f.us_at_stake < d.window_us  # an estimate, but never more than the run
    assert f.us_per_step == pytest.approx(f.us_at_stake / 5)
    assert d.steps is not None and d.steps.source == "ns.step" and d.steps.count == 5


def test_torch_rms_norm_has_no_elementwise_finding(big):
    x, w = big
    with ns.profile_neuron(name="fused") as run:
        for _ in range(5):
            rmsnorm_fused(x, w)
    assert "elementwise_chain" not in _rules(run)


def test_compiled_rmsnorm_shows_compilation_on_the_first_call_only(big):
    x, w = big
    # a cold compile whatever ran before: with Inductor's FX graph cache warm (an earlier test
    # compiled this function) the "first" call loads the kernel in ~0.2 s, not compiles it
    torch._dynamo.reset()
    fn = torch.compile(rmsnorm_naive)
    with torch._inductor.config.patch(fx_graph_cache=False), ns.profile_neuron(name="first") as first:
        fn(x, w)
    with ns.profile_neuron(name="second") as second:
        fn(x, w)
    f = first.diagnosis.finding("compile_in_window")
    assert f is not None and f.us_at_stake > 1000 and "warm up" in f.message
    # the ops torch.compile runs while it traces are compilation, not the model's busy time
    d = first.diagnosis
    assert d.bound_by == "compile", (d.bound_by, d.device_busy_pct, d.idle_us_by_class)
    assert d.idle_us_by_class["compile"] > 0.5 * d.window_us
    # ... and the op table agrees: torch.compile's phases are rows marked compile, outside the
    # device-time total (which is what the diagnosis calls busy, not the seconds of compiling)
    s = first.summary
    phases = [r for r in s.rows if r.compile and "(dynamo_timed)" in r.name]
    assert phases and all(r.self_device_time_us == 0 and r.device_pct == 0 for r in phases)
    assert s.compile_time_us > 0.5 * d.window_us > 10 * s.total_device_time_us
    assert s.total_device_time_us + s.compile_time_us == pytest.approx(s.total_cpu_time_us)
    assert s.total_device_time_us < 2 * d.device_busy_us + 1000
    assert not any(r.compile for r in s.top(3)) and s.top(1)[0].device_pct > 10
    assert second.summary.compile_time_us == 0
    assert "compile_in_window" not in _rules(second)
    assert "elementwise_chain" not in _rules(second)


def test_a_sleep_in_the_loop_is_host_bound_with_the_sleeping_line(xw):
    x, w = xw
    with ns.profile_neuron(name="sleepy", with_stack=True) as run:
        for _ in range(5):
            rmsnorm_naive(x, w)
            time.sleep(0.003)
    d = run.diagnosis
    assert d.bound_by == "host"
    assert d.idle_us_by_class["host_wait"] >= 5 * 3000 * 0.9
    # the gaps the sleeps made (not the longest: a time slice lost between two ops of a loaded
    # machine can be longer than 3 ms, and is rightly placed in rmsnorm_naive's file)
    by_sleep = gaps_slept_through(run, "test_a_sleep_in_the_loop_is_host_bound_with_the_sleeping_line")
    assert by_sleep and all(g.cls == "host_wait" and g.duration_us >= 2900 for g in by_sleep), by_sleep
    assert all(g.source is not None and "test_real_runs.py" in g.source for g in by_sleep)  # where the host was


def _python_work(n: int) -> float:
    s = 0.0
    for i in range(n):
        s += i * 0.5
    return s


def test_item_in_the_loop_on_a_cpu_is_not_a_sync(xw):
    """On a CPU there is no queue for .item() to drain: the time after it is the Python work
    that follows (removing .item() saves nothing), so no sync verdict and no sync advice."""
    x, w = xw
    with ns.profile_neuron(name="item") as run:
        for _ in range(30):
            v = rmsnorm_naive(x, w).sum().item()  # reads the value back every step
            _python_work(20_000 + int(v) % 2)
            ns.step()
    d = run.diagnosis
    assert d.bound_by == "host", d.headline()
    assert d.finding("sync_in_loop") is None
    assert d.idle_us_by_class["sync"] == 0.0
    # no step is called sync-bound (a step whose ops a busy machine preempted may read as
    # device-bound on a CPU: that is the ops' time, not a sync)
    assert not any(s.bound_by == "sync" for s in d.steps.per_step)


def test_many_tiny_ops_are_launch_bound(xw):
    x, w = xw
    with ns.profile_neuron(name="tiny") as run:
        # ~60 ms: many scheduler time slices, so a busy machine's preemptions average out
        for _ in range(3000):
            x.add(1.0).mul(2.0)
    d = run.diagnosis
    assert "launch_bound_loop" in _rules(run), d.headline()
    f = d.finding("launch_bound_loop")
    assert f.evidence["ops"] >= 600 and f.evidence["median_op_us"] < 50


def test_repeated_decorated_calls_are_steps(xw):
    x, w = xw

    @ns.profile_neuron(name="infer")
    def infer(a):
        return rmsnorm_naive(a, w)

    with ns.profile_neuron(name="serve") as run:
        for i in range(6):
            infer(x)
            if i == 3:
                time.sleep(0.01)
    s = run.diagnosis.steps
    assert s is not None and s.source == "region" and s.name == "infer" and s.count == 6
    assert s.p50_us <= s.p90_us <= s.p99_us <= s.max_us
    assert len(s.per_step) == 6


def test_torchtidy_patterns_in_real_training_code():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=0)
    with ns.profile_neuron(name="train", record_shapes=True) as run:
        for xb, yb in loader:
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
        t = torch.randn(20, 4)
        for i in range(20):  # indexing a tensor in a Python loop
            t[i] * 2.0
    rules = _rules(run)
    assert {"grad_not_set_to_none", "sync_dataloader", "forloop_indexing", "conv_bias_before_bn"} <= rules, rules
    # a handful of small tensors: foreach or fused would save under 2 % of this run (no advice)
    assert "optimizer_single_tensor" not in rules
    assert run.diagnosis.finding("forloop_indexing").evidence["iterations"] >= 10


def test_no_false_alarms_on_the_same_code_done_right():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    xb = torch.randn(4, 3, 8, 8)
    with ns.profile_neuron(name="train", record_shapes=True) as run:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model(xb).sum().backward()
            opt.step()
        (torch.randn(20, 4) * 2.0).sum()
    rules = _rules(run)
    assert not {"optimizer_single_tensor", "grad_not_set_to_none", "sync_dataloader", "forloop_indexing",
                "conv_bias_before_bn"} & rules, rules


def test_offline_diagnose_of_a_run_directory_and_of_its_trace_agree(xw):
    x, w = xw
    with ns.profile_neuron(name="saved") as run:
        for _ in range(3):
            rmsnorm_naive(x, w)
            time.sleep(0.002)
    assert run.wait(30)
    from_dir = ns.diagnose(run.path)
    assert from_dir.to_dict() == run.diagnosis.to_dict()  # summary.json carries it
    again = ns.diagnose(run.path / "trace.json.gz")
    assert again.bound_by == run.diagnosis.bound_by
    assert again.device_busy_pct == pytest.approx(run.diagnosis.device_busy_pct, abs=2.0)
    with pytest.raises(ns.ConfigurationError, match="gap_threshold_us"):
        ns.diagnose(run, gap_threshold_us=0)


def test_naive_to_compiled_diff_attributes_the_saving(big):
    from neuronscope.analysis.explain import explain_diff

    x, w = big
    fn = torch.compile(rmsnorm_naive)
    for _ in range(2):
        fn(x, w)
    runs = {}
    for name, f in (("naive", rmsnorm_naive), ("compiled", fn)):
        with ns.profile_neuron(name=name) as run:
            for _ in range(5):
                f(x, w)
        runs[name] = run
    a, b = runs["naive"], runs["compiled"]
    ex = explain_diff(a.summary, b.summary, a.diagnosis, b.diagnosis)
    assert sum(c.delta_us for c in ex.contributions) == pytest.approx(ex.delta_us, abs=0.01)
    by = {(c.kind, c.name): c.delta_us for c in ex.contributions}
    assert by[("op", "aten::mul")] < 0 and by[("op", "aten::pow")] < 0  # the naive ops went away
    graphs = [k for k in by if k[1].startswith("## Call CompiledFxGraph")]
    assert graphs and by[graphs[0]] > 0  # and the compiled graph took their place
