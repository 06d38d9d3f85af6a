"""Inference speed of the delta rule on the CPU: the C kernel vs the chunked torch kernel vs the recurrence.

Prints ONE JSON object: for every (batch B, length T) of the grid (H = 4 heads, d_k = d_v = 16, as
the shipped models; no gradients, torch.inference_mode), seconds per call of

  c_kernel      models/ops/csrc/delta_rule.c (what chunk_delta_rule runs on a CPU with a C compiler)
  torch_chunked the chunked WY kernel in torch (the fallback; chunk 64)
  recurrence    delta_rule_recurrence, the token-by-token reference in torch

and the ratios recurrence / c_kernel and torch_chunked / c_kernel (> 1: the C kernel is faster).
`never_slower_than_recurrence` is true when every cell's recurrence / c_kernel ratio is >= 1.

    python3 benchmarks/inference.py [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from timing import best_seconds

from deltalens.models.ops.delta_rule import chunk_delta_rule, delta_rule_recurrence
from deltalens.models.ops.native import native_kernels

H, K = 4, 16


def cell(B: int, T: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, T, H, K, generator=g) * K**-0.5
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, K, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2
    with torch.inference_mode():
        with native_kernels(True):
            c = best_seconds(lambda: chunk_delta_rule(q, k, v, beta, native=True))
        with native_kernels(False):
            chunked = best_seconds(lambda: chunk_delta_rule(q, k, v, beta))
        recurrence = best_seconds(lambda: delta_rule_recurrence(q, k, v, beta), budget_s=0.5)
    return {
        "B": B,
        "T": T,
        "c_kernel_s": c,
        "torch_chunked_s": chunked,
        "recurrence_s": recurrence,
        "recurrence_over_c": round(recurrence / c, 1),
        "torch_chunked_over_c": round(chunked / c, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a 2 x 2 grid instead of 4 x 4")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [16, 1024] if args.quick else [16, 64, 256, 1024]
    batches = [1, 512] if args.quick else [1, 8, 64, 512]
    cells = [cell(B, T) for B in batches for T in lengths]
    for row in cells:
        for key in ("c_kernel_s", "torch_chunked_s", "recurrence_s"):
            row[key] = float(f"{row[key]:.3g}")
    print(
        json.dumps(
            {
                "benchmark": "inference",
                "threads": args.threads,
                "heads": H,
                "d_k": K,
                "never_slower_than_recurrence": all(r["recurrence_over_c"] >= 1 for r in cells),
                "min_recurrence_over_c": min(r["recurrence_over_c"] for r in cells),
                "min_torch_chunked_over_c": min(r["torch_chunked_over_c"] for r in cells),
                "cells": cells,
            }
        )
    )


if __name__ == "__main__":
    main()
