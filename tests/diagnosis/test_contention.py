"""CPU contention is measured and said, and claims about CPU work are not inflated by it (issue 34.4).

The same workload (a Python loop indexing a tensor row by row: CPU work on the main thread) is
profiled alone and beside two processes that burn a CPU each on this 2-core machine. The
contended profile must say so (in the verdict line and the notes, from the thread's own
run-queue wait), keep the same top finding, and leave the time the thread waited for a core out
of its claim. Measured here: the quiet claim 10.6-12.5 ms, the contended one 24-26 ms after
leaving out a 50-67 % wait (its own CPU time also grew 1.3x: a core shared with a burner runs
slower, which no run-queue counter shows) — hence "within 2x, or says it was contended".
"""

from __future__ import annotations

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


def test_a_contended_profile_says_so_and_claims_what_a_quiet_one_claims():
    torch.manual_seed(0)
    x = torch.randn(512, 64)
    _rows_loop(x)  # warm up
    quiet = _profile(x)
    burners = _burners(2)
    try:
        contended = _profile(x)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    c = contended.contention
    assert c is not None and c.contended, c
    assert "the CPU was contended" in contended.headline()[0]
    assert any(n.startswith("CPU contended") for n in contended.notes)
    # the thread really waited: Linux's run-queue time, against the wall time the profile covers
    assert 0 < c.wait_us < c.wall_us and c.run_us > 0 and c.others_cpus is not None and c.others_cpus > 1.0
    top_q, top_c = quiet.findings[0], contended.findings[0]
    assert (top_c.rule, top_c.subject) == (top_q.rule, top_q.subject) == ("forloop_indexing", "aten::select → aten::mul")
    assert top_c.evidence["contended"] == "scaled" and top_c.evidence["runnable_share"] == pytest.approx(c.runnable_share, abs=1e-3)
    # the claim leaves the measured waiting out: nearer the quiet claim than the raw time would be
    # (what remains is what the run queue cannot show: a core shared with a burner runs slower)
    import math

    raw = top_c.us_at_stake / c.runnable_share
    assert abs(math.log(top_c.us_at_stake / top_q.us_at_stake)) < abs(math.log(raw / top_q.us_at_stake))
    # the bound: within 2x of the quiet claim, or the run says the CPU was contended (it does, above)
    within = 0.5 <= top_c.us_at_stake / top_q.us_at_stake <= 2.0
    assert within or c.contended, (top_q.us_at_stake, top_c.us_at_stake, c)
