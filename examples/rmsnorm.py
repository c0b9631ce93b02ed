"""Three RMSNorm implementations compared: naive ops, torch.rms_norm, and torch.compile.

This is the comparison from the AWS / Hugging Face "profiling on Trainium" tutorial, in one call:
ns.compare warms each variant up (compilation included), checks its output against the naive
one, profiles it (an ordinary run: neuronscope diff works on any pair), times all three
unprofiled and interleaved, places each against the device's roofs and explains how each
differs from the naive one. It runs unchanged on a Trainium instance (TorchNeuron), a CUDA
machine and a plain CPU: neuronscope detects the device.

    python examples/rmsnorm.py [--hidden 4096] [--max-time 10] [--output-dir DIR] [--html compare.html]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="calls in each variant's profile")
    parser.add_argument("--max-time", type=float, default=10.0, help="seconds the unprofiled timing may take")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--html", default=None, help="also write the comparison's HTML report here")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = parser.parse_args(argv)

    device = device_for_tensors()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, args.hidden, device=device)
    weight = torch.randn(args.hidden, device=device)

    variants = {"naive": rmsnorm_naive, "torch.rms_norm": rmsnorm_fused}
    if not args.no_compile:
        variants["torch.compile(naive)"] = torch.compile(rmsnorm_naive)

    # The share of the roof: an RMSNorm must read x and the weight and write y once (work="io").
    comparison = ns.compare(variants, x, weight, steps=args.steps, max_time_s=args.max_time, output_dir=args.output_dir)
    print(f"=== {len(variants)} RMSNorms of x={tuple(x.shape)} ===")
    print(comparison)

    naive = comparison["naive"].summary  # op by op: each of the naive variant's ops moves the whole tensor again
    if naive is not None:
        print("\n=== naive, op by op ===")
        print(naive.roofline_table(limit=8))
    if args.html:
        print(f"\nHTML report: {comparison.write_html(args.html)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
