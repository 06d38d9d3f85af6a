"""CPU speed of the value-gated delta rule: forward + backward of one layer's recurrence.

Prints ONE JSON object: for T in {256, 1024} tokens (B = 32, H = 4, d_k = d_v = 16: the PFSA-SR drain grid's
value-gated models at its batch size), seconds per forward + backward of

  per_column_c   what a model runs on a CPU now: the C kernel with gamma_t as a per-value-column decay
  spread_c       the path before it: every value column a head of its own (H x d_v heads, value size 1)
                 through the gated delta rule's C kernel
  spread_torch   the same spread through the chunked torch kernel (the fallback without a C compiler)

and spread_c / per_column_c, spread_torch / per_column_c (> 1: the per-column kernel is faster), measured
side by side in one run on one thread unless --threads says otherwise.

    python3 benchmarks/value_gated.py [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from einops import rearrange
from timing import best_seconds, machine_limits

from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule
from deltalens.models.ops.native import native_kernels
from deltalens.models.ops.value_gated_delta_rule import chunk_value_gated_delta_rule, spread

B, H, K = 32, 4, 16


def layer_inputs(T: int) -> list[torch.Tensor]:
    """q, k (normalised), v, beta in [0, 2] and the gate's log (gamma about 0.95), seed 0, as leaves."""
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, K, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2
    log_gate = F.logsigmoid(torch.randn(B, T, H, K, generator=g) + 3)
    return [x.requires_grad_() for x in (q, k, v, beta, log_gate)]


def cell(T: int) -> dict:
    leaves = layer_inputs(T)

    def per_column():
        return chunk_value_gated_delta_rule(*leaves)[0]

    def spread_heads():
        o = chunk_gated_delta_rule(*spread(*leaves)[:5])[0]
        return rearrange(o, "b t (h v) 1 -> b t h v", v=K)

    def step(forward):
        def run():
            for x in leaves:
                x.grad = None
            forward().square().sum().backward()

        return run

    with native_kernels(True):
        fast = best_seconds(step(per_column), budget_s=2.0, max_calls=5)
        spread_c = best_seconds(step(spread_heads), budget_s=2.0, max_calls=3)
    with native_kernels(False):
        spread_torch = best_seconds(step(spread_heads), budget_s=2.0, max_calls=3)
    return {
        "T": T,
        "per_column_c_s": round(fast, 4),
        "spread_c_s": round(spread_c, 4),
        "spread_torch_s": round(spread_torch, 4),
        "spread_c_over_per_column_c": round(spread_c / fast, 1),
        "spread_torch_over_per_column_c": round(spread_torch / fast, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="T = 256 only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [256] if args.quick else [256, 1024]
    out = {"benchmark": "value_gated", "B": B, "H": H, "d_k": K, "d_v": K, "threads": args.threads}
    out["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()[0]  # the machine may be shared: read it beside the figures
    out["cells"] = [cell(T) for T in lengths]
    out["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    out["machine"] = machine_limits({"layer": (B * 256, 64, 64)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
