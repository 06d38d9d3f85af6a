"""What capturing hook_state costs on a CPU: the C kernel copying the states out vs the chunked torch kernel.

Prints ONE JSON object with two parts, measured side by side in one run (no gradients, as
interp.capture runs; one thread by default):

  kernels   for n_h in {1, 2, 3} factors per token, gated or not (B = 8, T = 256 tokens, H = 4,
            d_k = d_v = 16, as the family sweep's models), seconds of chunk_gated_delta_rule on the
            n_h sub-tokens per token
              forward       no states (the C kernel)
              c_states      with_states, one state per token (the C kernel copies them out)
              torch_states  with_states on the chunked torch kernel (what ran before; also the
                            path with gradients): every sub-token's state, then one per token kept
            and c_states / forward, torch_states / c_states.
  models    for each shipped delta-rule checkpoint on a batch of 8 random 256-token inputs, seconds of
            a plain forward and of run_with_cache keeping every layer's hook_state, and their ratio
            (capture_over_forward: what looking at the states costs).

    python3 benchmarks/state_capture.py [--threads 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from family import B, H, K, layer_inputs
from timing import best_seconds

from deltalens import models
from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule, interleave

T = 256
CHECKPOINTS = [
    "s3-deltanet-neg-statement",
    "s4-deltaproduct-n3-full",
    "s4-deltaproduct-n3-noconv-full",
    "a5-deltaproduct-n2-noconv-full",
]


def kernel_cell(n: int, gated: bool) -> dict:
    inputs = interleave(*layer_inputs(n, gated, T))
    with torch.no_grad():
        forward = best_seconds(lambda: chunk_gated_delta_rule(*inputs))
        c_states = best_seconds(lambda: chunk_gated_delta_rule(*inputs, with_states=True, state_every=n))
        torch_states = best_seconds(
            lambda: chunk_gated_delta_rule(*inputs, with_states=True, state_every=n, native=False)
        )
    return {
        "n_h": n,
        "gated": gated,
        "forward_s": forward,
        "c_states_s": c_states,
        "torch_states_s": torch_states,
        "c_states_over_forward": round(c_states / forward, 2),
        "torch_states_over_c_states": round(torch_states / c_states, 2),
    }


def model_cell(name: str) -> dict:
    model = models.load(Path(__file__).resolve().parents[1] / "checkpoints" / name).eval()
    tokens = torch.randint(1, model.model_config["vocab_size"], (B, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        forward = best_seconds(lambda: model(tokens))
        capture = best_seconds(lambda: model.run_with_cache(tokens, names_filter=lambda h: h.endswith("hook_state")))
    return {
        "checkpoint": name,
        "forward_s": forward,
        "capture_s": capture,
        "capture_over_forward": round(capture / forward, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = [kernel_cell(n, gated) for n in (1, 2, 3) for gated in (False, True)]
    print(
        json.dumps(
            {
                "benchmark": "state_capture",
                "B": B,
                "T": T,
                "H": H,
                "d_k": K,
                "threads": args.threads,
                "kernels": kernels,
                "models": [model_cell(name) for name in CHECKPOINTS],
            }
        )
    )


if __name__ == "__main__":
    main()
