"""torch.compile graphs get readable names in tables; JSON keeps the full names."""

from __future__ import annotations

import json

import torch

import neuronscope as ns
from neuronscope.analysis.names import display_name


def test_display_name_of_a_compiled_graph_and_of_plain_ops():
    assert display_name("## Call CompiledFxGraph fydwk3x7abcdefghijk ##") == "compiled graph fydwk3x7"
    assert display_name("aten::mul") == "aten::mul"
    assert display_name("x", {"x": "y"}) == "y"


def my_rmsnorm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_a_compiled_function_is_named_in_the_table_and_kept_whole_in_json():
    fn = torch.compile(my_rmsnorm)
    x = torch.randn(4, 32)
    fn(x)  # compile outside the profile
    with ns.profile_neuron(name="compiled") as run:
        fn(x)
    s = run.summary
    raw = [r.name for r in s.rows if r.name.startswith("## Call CompiledFxGraph")]
    assert len(raw) == 1
    label = s.label(raw[0])
    digest = raw[0].split()[3]
    assert label.startswith(f"compiled graph {digest[:8]}")
    assert "my_rmsnorm" in label and "test_compiled_names.py" in label
    table = s.table()
    assert label[:40] in table and "## Call CompiledFxGraph" not in table
    on_disk = json.loads((run.path / "summary.json").read_text())
    assert raw[0] in [r["name"] for r in on_disk["rows"]]
    assert on_disk["labels"][raw[0]] == label
