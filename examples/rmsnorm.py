"""Three RMSNorm implementations, profiled: naive ops, torch.rms_norm, and torch.compile.

This is the comparison from the AWS / Hugging Face "profiling on Trainium" tutorial. It
runs unchanged on a Trainium instance (TorchNeuron), a CUDA machine and a plain CPU:
neuronscope detects the device.

    python examples/rmsnorm.py [--steps 20] [--hidden 4096] [--output-dir neuronscope-runs]
"""

from __future__ import annotations

import argparse
import sys

import torch

import neuronscope as ns


def rmsnorm_naive(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rmsnorm_fused(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), weight, eps)


def device_for_tensors() -> torch.device:
    neuron = getattr(torch, "neuron", None)
    if neuron is not None and getattr(neuron, "is_available", lambda: False)():
        return torch.device("neuron")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def profile_variant(name: str, fn, x, weight, steps: int, warmup: int, output_dir: str | None) -> ns.Run:
    for _ in range(warmup):  # the first calls compile (torch.compile, and NEFFs on Neuron)
        fn(x, weight)
    # record_shapes: the work of each op (FLOPs, bytes) for the roofline, 2-3 us more per op recorded
    with ns.profile_neuron(name=name, output_dir=output_dir, record_shapes=True) as run:
        for _ in range(steps):
            fn(x, weight)
            ns.step()  # one step per call: per-step times in the diagnosis
    return run


def roofline(runs: dict[str, ns.Run], x: torch.Tensor, weight: torch.Tensor, steps: int) -> None:
    """Where each variant stands against this machine's roofs: an RMSNorm must read x and the
    weight and write y once, so its time at the memory roof is those bytes / the bandwidth."""
    limits = next((r.summary.limits for r in runs.values() if r.summary.limits is not None), None)
    if limits is None:
        print("\n=== roofline: unknown device (ns.configure(device_limits=...)) ===")
        return
    needed = 2 * x.numel() * x.element_size() + weight.numel() * weight.element_size()
    at_roof_ms = needed / limits.memory_bandwidth * 1e3
    print(f"\n=== roofline: {limits.line()} ===")
    print(f"an RMSNorm of x={tuple(x.shape)} moves at least {needed / 2**20:.1f} MiB a step: {at_roof_ms:.3f}ms at the memory roof")
    print(f"{'variant':<22} {'step p50':>10} {'GB/s':>8} {'% of roof':>10} {'above roof':>11}")
    for name, run in runs.items():
        d = run.diagnosis  # a step's wall time: everything the variant costs (dispatch, Python, kernels)
        step_ms = d.steps.p50_us / 1e3 if d is not None and d.steps is not None else run.summary.total_device_time_us / 1e3 / steps
        if step_ms <= 0:
            continue
        print(
            f"{name:<22} {step_ms:>8.3f}ms {needed / step_ms / 1e6:>8.1f} {100 * at_roof_ms / step_ms:>9.1f}%"
            f" {max(step_ms - at_roof_ms, 0):>9.3f}ms"
        )
    if "naive" in runs:  # op by op: each of the naive variant's ops moves the whole tensor again
        print("\nnaive, op by op:")
        print(runs["naive"].summary.roofline_table(limit=8))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = parser.parse_args(argv)

    device = device_for_tensors()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, args.hidden, device=device)
    weight = torch.randn(args.hidden, device=device)

    variants = {"naive": rmsnorm_naive, "torch.rms_norm": rmsnorm_fused}
    if not args.no_compile:
        variants["torch.compile(naive)"] = torch.compile(rmsnorm_naive)

    runs: dict[str, ns.Run] = {}
    for name, fn in variants.items():
        try:
            runs[name] = profile_variant(name, fn, x, weight, args.steps, args.warmup, args.output_dir)
        except Exception as exc:  # e.g. torch.compile without a C++ compiler
            print(f"[{name}] skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        print(f"\n=== {name} ({args.steps} steps, x={tuple(x.shape)}) ===")
        print(runs[name].diagnosis)  # the verdict: busy %, what bound it, the top finding
        print(runs[name].summary.table(limit=8))

    print("\n=== comparison ===")
    print(f"{'variant':<22} {'device time':>12} {'per step':>10} {'ops':>5}  top op (share)")
    for name, run in runs.items():
        s = run.summary
        top = s.top(1)[0] if len(s) else None
        total_ms = s.total_device_time_us / 1e3
        top_txt = f"{s.label(top.name)} x{top.calls} ({top.device_pct:.1f}%)" if top else "-"
        print(f"{name:<22} {total_ms:>10.3f}ms {total_ms / args.steps:>8.3f}ms {len(s):>5}  {top_txt}")
    roofline(runs, x, weight, args.steps)
    if "naive" in runs and "torch.compile(naive)" in runs:
        from neuronscope.analysis.diff import diff_summaries, explain_diff

        a, b = runs["naive"], runs["torch.compile(naive)"]
        print(f"\n=== diff: naive -> torch.compile(naive) ===  (also: neuronscope diff {a.path} {b.path})")
        why = explain_diff(a.summary, b.summary, a.diagnosis, b.diagnosis)  # wall time, by op and idle class
        print("\n".join(why.lines(top=6, labels=diff_summaries(a.summary, b.summary).labels)))
    print(f"\nrun directories: {', '.join(str(r.path) for r in runs.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
