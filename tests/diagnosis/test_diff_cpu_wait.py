"""The explanation of a slower run names the time its thread waited for a core (issue 35): a
preemption lands whole in one call of one op, and without this part an op of microseconds read
as growing to milliseconds and ranked above the ops that really grew (the inference example's
triggered runs beside two CPU burners: ``aten::t`` 11 us -> 5.5 ms above ``aten::addmm``).

The contention is real: the profiled thread and a CPU-burning process are pinned to one core.
(Where the wait lands -- the ops that grew per call first -- is checked end to end by the
inference example's test beside two burners: its explanations name the matmuls, not ``aten::t``.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import neuronscope as ns
from neuronscope import _system
from neuronscope.analysis.explain import explain_diff

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins threads to a core (Linux)")


def _work(x: torch.Tensor) -> None:
    for _ in range(200):
        y = x @ x
        y.relu_()


@pytest.fixture
def one_core():
    """This thread on one core, alone with torch's one intra-op thread."""
    before_cpus, before_threads = os.sched_getaffinity(0), torch.get_num_threads()
    core = min(before_cpus)
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    yield core
    os.sched_setaffinity(0, before_cpus)
    torch.set_num_threads(before_threads)


def test_a_run_that_waited_for_a_core_says_so_rather_than_growing_an_op(one_core):
    x = torch.randn(64, 64)
    _work(x)
    with ns.profile_neuron(name="alone") as quiet:
        _work(x)
    burner = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{one_core}}}); print('on', flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # the burner spins on the core before the profile starts (its interpreter took longer to
        # start than the profile lasted: the thread once never waited, 4 ms of work alone)
        assert burner.stdout is not None and burner.stdout.readline().strip() == "on"
        waited_before = _system.core_wait_ns()
        with ns.profile_neuron(name="shared") as shared:
            for _ in range(50):  # until preempted several times (time slices of ~4 ms)
                _work(x)
                if _system.core_wait_ns() - waited_before > 10_000_000:
                    break
    finally:
        burner.kill()
        burner.wait()
    ns.flush(30)
    c = shared.diagnosis.contention
    assert c is not None and c.contended, c  # the premise: the thread shared its core

    ex = explain_diff(quiet.summary, shared.summary, quiet.diagnosis, shared.diagnosis)
    parts = {(p.kind, p.name): p for p in ex.contributions}
    assert sum(p.delta_us for p in ex.contributions) == pytest.approx(ex.delta_us, abs=0.01)  # still exact
    wait = parts[("idle", "cpu_wait")]
    # the part is what the thread's own counter says it waited, over the time the profile recorded
    recorded = shared.diagnosis.device_busy_us + sum(shared.diagnosis.idle_us_by_class.values())
    assert 0 < wait.b_us <= c.wait_us * recorded / c.wall_us + 1e-6
    assert any("idle: cpu_wait (the thread waited for a core" in line for line in ex.lines(top=50)), ex.lines(top=50)
