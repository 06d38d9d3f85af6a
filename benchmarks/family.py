"""CPU speed of the delta-rule family's kernels: forward + backward of one layer's recurrence.

Prints ONE JSON object: for n_h in {1, 2, 3} factors per token, gated or not, and T in {64, 256, 1024}
tokens (B = 8, H = 4, d_k = d_v = 16, as the family sweep's models), seconds per forward + backward of

  fast           what a model runs on a CPU: chunk_gated_delta_rule on the n_h sub-tokens per token, i.e.
                 the C kernel (models/ops/csrc/delta_rule.c, with the decay when gated)
  torch_chunked  the chunked torch kernels (the fallback without a C compiler: the plain delta rule's,
                 or the WY kernel with the decay folded in)
  recurrence     gated_delta_rule_recurrence, the token-by-token reference

and recurrence / fast, torch_chunked / fast (> 1: the C kernel is faster), measured side by side in one run.

    python3 benchmarks/family.py [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from timing import best_seconds

from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule, gated_delta_rule_recurrence, interleave
from deltalens.models.ops.native import native_kernels

B, H, K = 8, 4, 16


def layer_inputs(n: int, gated: bool, T: int) -> tuple:
    """One layer's per-token inputs as the family's models make them: q, k [.., n, K], v, beta in [0, 2],
    the log-decay (None ungated). B = 8, H = 4, d_k = d_v = 16, seed 0."""
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, n, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, n, K, generator=g)
    beta = torch.rand(B, T, H, n, generator=g) * 2
    decay = -torch.rand(B, T, H, generator=g) if gated else None
    return q, k, v, beta, decay


def cell(n: int, gated: bool, T: int) -> dict:
    q, k, v, beta, decay = layer_inputs(n, gated, T)
    leaves = [x.requires_grad_() for x in (q, k, v, beta)] + ([decay.requires_grad_()] if gated else [])

    def run(kernel):
        def step():
            for x in leaves:
                x.grad = None
            o = kernel(*interleave(q, k, v, beta, decay))[0]
            o.sum().backward()

        return step

    with native_kernels(True):
        fast = best_seconds(run(chunk_gated_delta_rule), max_calls=10)
    with native_kernels(False):
        chunked = best_seconds(run(chunk_gated_delta_rule), max_calls=10)
    recurrence = best_seconds(run(gated_delta_rule_recurrence), budget_s=0.5, max_calls=10)
    return {
        "n_h": n,
        "gated": gated,
        "T": T,
        "fast_s": fast,
        "torch_chunked_s": chunked,
        "recurrence_s": recurrence,
        "recurrence_over_fast": round(recurrence / fast, 1),
        "torch_chunked_over_fast": round(chunked / fast, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="T = 64 only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [64] if args.quick else [64, 256, 1024]
    cells = [cell(n, gated, T) for n in (1, 2, 3) for gated in (False, True) for T in lengths]
    print(
        json.dumps(
            {
                "benchmark": "family",
                "B": B,
                "H": H,
                "d_k": K,
                "threads": args.threads,
                "cells": cells,
                "never_slower_than_recurrence": all(c["recurrence_over_fast"] >= 1 for c in cells),
            }
        )
    )


if __name__ == "__main__":
    main()
