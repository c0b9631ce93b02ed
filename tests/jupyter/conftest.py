from __future__ import annotations

from dataclasses import dataclass

import pytest

import neuronscope as ns

from ._workload import workload


@dataclass
class Runs:
    shaped: ns.Run  #: record_shapes=True: rows carry work and a roofline
    plain: ns.Run  #: no shapes: no roofline
    memory: ns.Run  #: memory=True: run.memory


@pytest.fixture(scope="package")
def runs(tmp_path_factory) -> Runs:
    out = tmp_path_factory.mktemp("notebook-runs")
    made = []
    for name, options in (("shaped", {"record_shapes": True}), ("plain", {}), ("memory", {"memory": True})):
        with ns.profile_neuron(name=name, output_dir=out, **options) as run:
            workload()
        assert run.wait(300), f"run {name} was not written"
        made.append(run)
    return Runs(*made)
