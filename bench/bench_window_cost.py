"""Where the time of a windowed run goes (issue 36.2): the MLP training loop of
bench_long_runs.py, in one process, measured step by step.

    python bench/bench_window_cost.py [--steps 300] [--rounds 3]

Per round, interleaved: the loop unprofiled; the same loop under a bare ``torch.profiler``
(recording cost per event); its synchronous ``stop()`` (per event); reading its events into
neuronscope's trace model and analysing them (summary + diagnosis, per event, on this thread);
then the loop under ``ns.profile_neuron(windows=ns.Windows())`` (10 s windows, every thread) — the defaults of
``neuronscope run`` — with what it recorded. Prints medians and the model that ties them:
slowdown ≈ 1 + recorded share × (recording + stop) cost per step + what analysis on the
worker takes from the loop.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import neuronscope as ns


def make_loop(steps: int) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
    loss_fn = torch.nn.CrossEntropyLoss()

    def loop() -> float:
        t0 = time.perf_counter()
        for x, y in DataLoader(data, batch_size=64):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        return time.perf_counter() - t0

    return loop


def bare_profile(loop: Any) -> dict[str, float]:
    from neuronscope.analysis.diagnosis import diagnose_trace
    from neuronscope.analysis.summary import summarize
    from neuronscope.trace.kineto import trace_from_kineto

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    loop_s = loop()
    t0 = time.perf_counter()
    prof.stop()
    stop_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace = trace_from_kineto(prof.profiler.kineto_results)
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = summarize(trace)
    diagnose_trace(trace, summary=summary)
    analyse_s = time.perf_counter() - t0
    return {"loop_s": loop_s, "stop_s": stop_s, "read_s": read_s, "analyse_s": analyse_s, "events": float(len(trace))}


def windowed(loop: Any, tmp: str) -> dict[str, float]:
    with ns.profile_neuron(name="windows", output_dir=tmp, windows=ns.Windows(seconds=10), all_threads=True) as run:  # `neuronscope run`'s defaults
        loop_s = loop()
    t0 = time.perf_counter()
    ns.flush(600)
    cov = run.coverage
    if cov is None:  # everything was recorded, in one window
        return {"loop_s": loop_s, "after_s": time.perf_counter() - t0, "recorded": 1.0, "steps": 1.0, "windows": 1.0,
                "events": float("nan"), "overhead_s": 0.0}
    return {
        "loop_s": loop_s,
        "after_s": time.perf_counter() - t0,
        "recorded": cov.recorded_ns / max(cov.wall_ns, 1),
        "steps": cov.recorded_steps / max(cov.steps or 1, 1),
        "windows": float(cov.windows),
        "events": float(cov.events),
        "overhead_s": (run.caller_overhead_ns or 0) / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loop = make_loop(args.steps)
    loop()  # warm up
    plain: list[float] = []
    bare: list[dict[str, float]] = []
    win: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            arms = [lambda: plain.append(loop()), lambda: bare.append(bare_profile(loop)), lambda: win.append(windowed(loop, tmp))]
            for arm in arms if k % 2 == 0 else arms[::-1]:
                arm()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    p = statistics.median(plain)
    events = med(bare, "events")
    per_event_us = {k: med(bare, k) / events * 1e6 for k in ("stop_s", "read_s", "analyse_s")}
    rec_us = (med(bare, "loop_s") - p) / events * 1e6
    print(f"MLP loop, {args.steps} steps, median of {args.rounds} interleaved rounds (1 process)")
    print(f"  unprofiled {p:.2f} s ({p / args.steps * 1e3:.2f} ms a step)")
    print(
        f"  bare torch.profiler over the whole loop: {med(bare, 'loop_s'):.2f} s (x{med(bare, 'loop_s') / p:.2f}), "
        f"{events:,.0f} events ({events / args.steps:,.0f} a step)"
    )
    print(f"    recording costs {rec_us:.2f} us an event; stop() {per_event_us['stop_s']:.2f} us an event (synchronous)")
    print(
        f"    reading into the trace model {per_event_us['read_s']:.2f} us an event, "
        f"summary + diagnosis {per_event_us['analyse_s']:.2f} us an event"
    )
    print(
        f"  ns.Windows() defaults: loop {med(win, 'loop_s'):.2f} s (x{med(win, 'loop_s') / p:.2f}); "
        f"recorded {med(win, 'recorded') * 100:.0f}% of the wall time, {med(win, 'steps') * 100:.0f}% of the steps, "
        f"{med(win, 'windows'):.0f} windows, {med(win, 'events'):,.0f} events; flushed {med(win, 'after_s'):.2f} s after"
    )


if __name__ == "__main__":
    main()
