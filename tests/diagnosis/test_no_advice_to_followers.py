"""Issue 37: no advice to code that already follows it -- the framework's fused norm is not told
to use a fused norm, compiled code is not told to compile, a foreach or fused optimizer is not
told to use foreach, ``zero_grad(set_to_none=True)`` is not told to set it."""

from __future__ import annotations

import torch

import neuronscope as ns


def _messages(run) -> list[str]:
    return [f.message for f in run.diagnosis.findings]


def test_the_fused_norm_is_not_told_to_use_a_fused_norm():
    x, w = torch.randn(8, 128, 1024), torch.randn(1024)
    torch.rms_norm(x, (1024,), w, 1e-6)
    with ns.profile_neuron(name="fused_norm", record_shapes=True) as run:
        for _ in range(4):
            torch.rms_norm(x, (1024,), w, 1e-6)
    ns.flush()
    names = set(run.trace.names)
    assert "aten::rms_norm" in names  # the premise: the run calls the framework's fused op
    for message in _messages(run):
        assert "fused norm kernel" not in message and "framework's fused op" not in message, message
        assert "use torch.rms_norm" not in message, message


def test_compiled_code_is_not_told_to_compile():
    x = torch.randn(4, 64)
    compiled = torch.compile(lambda t: (t * 2 + 1).relu())
    compiled(x)
    with ns.profile_neuron(name="compiled_small") as run:
        for _ in range(400):
            compiled(x)
    ns.flush()
    assert any(n.startswith("## Call CompiledFxGraph") or n.startswith("Torch-Compiled Region") for n in run.trace.names)
    for f in run.diagnosis.findings:
        assert "torch.compile it" not in f.message and "torch.compile the function" not in f.message, f.message


def _train(**options) -> ns.Run:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(50)])
    opt = torch.optim.Adam(model.parameters(), **options)
    x = torch.randn(8, 32)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    step()  # warm up (the first step creates the optimizer's state)
    with ns.profile_neuron(name="opt") as run:
        for _ in range(3):
            step()
    ns.flush()
    return run


def test_a_foreach_or_fused_optimizer_is_not_told_to_use_foreach():
    single = _train(foreach=False)
    # the premise: the same loop one tensor at a time is told (100 tensors: a large share of it)
    assert single.diagnosis.finding("optimizer_single_tensor") is not None
    for options in ({"foreach": True}, {"fused": True}):
        run = _train(**options)
        assert run.diagnosis.finding("optimizer_single_tensor") is None, options
        for message in _messages(run):
            assert "foreach=True" not in message and "set_to_none" not in message, (options, message)
