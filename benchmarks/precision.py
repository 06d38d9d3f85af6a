"""fp32 against bf16 on a CPU: forward tokens/s of a random DeltaNet, beside the matmul peak of each dtype.

    python3 benchmarks/precision.py                 # moderate shape (hidden 512, 4 layers), ~1 minute
    python3 benchmarks/precision.py --large         # also the 1.3B config (5.5 GB of fp32 weights; slow)

Modes: fp32; bf16 weights (`cast_model(model, "bf16")`, what `dl.load(..., dtype="bf16")` gives); bf16
autocast around the fp32 model. The recurrence runs in fp32 in every mode (models/ops/precision.py), so the
bf16 gain is bounded by the share of time in the projections. Writes benchmarks/results/precision.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import best_seconds  # noqa: E402

from deltalens import models  # noqa: E402
from deltalens.models.ops.precision import cast_model  # noqa: E402

MODERATE = dict(vocab_size=4096, hidden_size=512, num_hidden_layers=4, num_heads=8, expand_k=1, expand_v=1)
LARGE = dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=24, num_heads=16, expand_k=1, expand_v=1)


def matmul_gflops(n: int, k: int, m: int, dtype: torch.dtype) -> float:
    a, b = torch.randn(n, k).to(dtype), torch.randn(k, m).to(dtype)
    return 2 * n * k * m / best_seconds(lambda: a @ b, budget_s=0.5) / 1e9


def forward_rates(config: dict, batch: int, tokens: int, budget_s: float) -> dict:
    torch.manual_seed(0)
    started = time.perf_counter()
    model = models.build("deltanet", **config).eval()
    build_s = time.perf_counter() - started
    toks = torch.randint(0, config["vocab_size"], (batch, tokens))
    n = batch * tokens
    rows = {}
    with torch.no_grad():
        ref = model(toks)
        rows["fp32"] = n / best_seconds(lambda: model(toks), budget_s)

        def autocast_forward():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(toks)

        rows["bf16_autocast"] = n / best_seconds(autocast_forward, budget_s)
        auto_err = (autocast_forward().float() - ref).abs().max().item()
        low = cast_model(model, "bf16")  # in place: the fp32 runs are done
        rows["bf16_weights"] = n / best_seconds(lambda: low(toks), budget_s)
        weights_err = (low(toks).float() - ref).abs().max().item()
    hidden = config["hidden_size"]
    fp32_peak = matmul_gflops(n, hidden, hidden, torch.float32)
    bf16_peak = matmul_gflops(n, hidden, hidden, torch.bfloat16)
    return {
        "config": config,
        "batch": batch,
        "tokens": tokens,
        "build_s": round(build_s, 1),
        "tokens_per_s": {k: round(v, 1) for k, v in rows.items()},
        "speedup_vs_fp32": {k: round(v / rows["fp32"], 2) for k, v in rows.items()},
        "max_abs_logit_diff": {"bf16_autocast": auto_err, "bf16_weights": weights_err},
        "matmul_gflops": {
            "fp32": round(fp32_peak, 1),
            "bf16": round(bf16_peak, 1),
            "ratio": round(bf16_peak / fp32_peak, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also the 1.3B DeltaNet config")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(__file__).resolve().parent / "results" / "precision.json"
    stamp = {
        "threads": torch.get_num_threads(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "load": os.getloadavg()[0],
    }
    report = json.loads(out.read_text()) if out.is_file() else {}  # a run without --large keeps the last 1.3B entry
    report["moderate"] = {**stamp, **forward_rates(MODERATE, 4, 256, budget_s=3.0)}
    if args.large:
        report["large_1.3B"] = {**stamp, **forward_rates(LARGE, 1, 256, budget_s=1.0)}
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
