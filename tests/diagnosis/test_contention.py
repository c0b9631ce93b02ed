"""CPU contention is measured and said, and claims about CPU work are not inflated by it (issue 34.4).

The same workload (a Python loop indexing a tensor row by row: CPU work on the main thread) is
profiled alone and beside two processes that burn a CPU each on this 2-core machine. The
contended profile must say so (in the verdict line and the notes, from the thread's own
run-queue wait), keep the same top finding, and leave the time the thread waited for a core out
of its claim. Measured here: with the loop's iterations each cut back to a few times the median
one, the contended claim was 0.77-1.17x the quiet one (18-22 ms against 17-28 ms; a core shared
with a burner also runs slower, which no run-queue counter shows); scaled uniformly by the
runnable share, as before, 24-26 ms against 10.6-12.5 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pytest
import torch

import neuronscope as ns

pytestmark = pytest.mark.timing


def _rows_loop(x: torch.Tensor) -> None:
    for _ in range(8):
        torch.stack([x[i] * 2 for i in range(x.shape[0])])


def _profile(x: torch.Tensor) -> ns.Diagnosis:
    with ns.profile_neuron(name="rows") as run:
        _rows_loop(x)
    ns.flush()
    assert run.diagnosis is not None
    return run.diagnosis


def _burners(n: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    time.sleep(0.5)  # running before the profile starts
    return procs


def _contended_profile(x: torch.Tensor) -> ns.Diagnosis:
    burners = _burners(2)
    try:
        return _profile(x)
    finally:
        for p in burners:
            p.kill()
            p.wait()


def test_a_contended_profile_says_so_and_claims_what_a_quiet_one_claims():
    """Quiet and contended profiles alternate, 3 and 2: one quiet profile of this loop claimed
    29.7 ms in a CI-like run where 10.6-17.6 ms is usual (the machine's speed drifts between
    tests), and the test compared the contended claims with that one sample."""
    torch.manual_seed(0)
    x = torch.randn(512, 64)
    _rows_loop(x)  # warm up
    quiet, contended = [_profile(x)], []
    for _ in range(2):
        contended.append(_contended_profile(x))
        quiet.append(_profile(x))
    for d in contended:
        c = d.contention
        assert c is not None and c.contended, c
        assert "the CPU was contended" in d.headline()[0]
        assert any(n.startswith("CPU contended") for n in d.notes)
        # the thread really waited: Linux's run-queue time, against the wall time the profile covers
        assert 0 < c.wait_us < c.wall_us and c.run_us > 0 and c.others_cpus is not None and c.others_cpus > 1.0
        top = d.findings[0]
        assert (top.rule, top.subject) == ("forloop_indexing", "aten::select → aten::mul")
        # each iteration of the loop is cut back to a few times the median one: the time slices
        # other processes took, which land whole in single iterations, are left out
        assert top.evidence["contended"] == "trimmed"
    assert all((d.findings[0].rule, d.findings[0].subject) == ("forloop_indexing", "aten::select → aten::mul") for d in quiet)
    # the claim leaves the waiting out: within the 2x of the quiet claim (what remains is
    # what the run queue cannot show: a core shared with a burner runs slower)
    q = statistics.median(d.findings[0].us_at_stake for d in quiet)
    trimmed = statistics.median(d.findings[0].us_at_stake for d in contended)
    assert 0.5 <= trimmed / q <= 2.0, (q, trimmed)
