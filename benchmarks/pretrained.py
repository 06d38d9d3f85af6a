"""Pretrained-LM scale on a CPU: the 1.3B DeltaNet and Gated DeltaNet configs with random weights.

Prints ONE JSON object. Per model, measured in fresh processes (one builds and saves the folder, one
loads and measures it, so the RSS is the loaded model's and nothing else's):

  build_s, save_s, load_s     models.build, save_pretrained, dl.load of the saved folder
  rss_over_weights            the loading process's RSS after dl.load / the weights' bytes
  tokens_per_s                forward of one sequence of --tokens tokens, fp32 and bf16 weights
                              (dl.load(..., dtype="bf16"): bf16 matmuls, fp32 recurrence), best of 2
  matmul_s, matmul_share      the same forward's linear layers timed alone as plain matmuls at the model's
                              shapes (x (T, in) @ W (in, out), each distinct shape, times its count) in this
                              run, and matmul_s / forward_s: the share of the matmul-only time the forward
                              reaches (1.0 = the forward costs no more than its matmuls)
  capture                     dl.capture of beta (every layer) and one layer's states at the reveal
                              positions (kinds=REVEAL, one token in 16) against a plain forward: seconds, the
                              ratio, Capture.nbytes beside its estimate, and the RSS the capture added (peak)
  bf16                        speedup over fp32, logits' max |diff| and RMS error ratio, argmax agreement

Targets (issue 26): bf16 >= 4x fp32 tokens/s; fp32 forward >= 60% of the matmul peak (matmul_share >= 0.6);
RSS <= 1.15x the weights; capture <= 1.3x a forward.

    nice -n 10 python3 benchmarks/pretrained.py --small           # hidden 256, 4 layers: a quick check
    nice -n 10 python3 benchmarks/pretrained.py --out benchmarks/results/pretrained.json   # the 1.3B configs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = {
    # the config: 339 tensors, 1,365,677,056 parameters (fla-hub/delta_net-1.3B-100B's shapes)
    "deltanet": dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=24, num_heads=16, expand_k=1, expand_v=1),
    # fla's GatedDeltaNetConfig defaults (its 1.3B shape: 6 heads of d_k 256, d_v 512, 21 layers)
    "gated_deltanet": dict(
        vocab_size=32000, hidden_size=2048, num_hidden_layers=21, num_heads=6, head_dim=256, expand_v=2
    ),
}
SMALL = {
    "deltanet": dict(vocab_size=4096, hidden_size=256, num_hidden_layers=4, num_heads=4, expand_k=1, expand_v=1),
    "gated_deltanet": dict(vocab_size=4096, hidden_size=256, num_hidden_layers=4, num_heads=2, head_dim=64),
}
TARGETS = {"bf16_speedup": 4.0, "matmul_share": 0.6, "rss_over_weights": 1.15, "capture_over_forward": 1.3}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class PeakRSS:
    """The highest RSS seen (sampled every 5 ms) while the block runs."""

    def __enter__(self):
        self.peak, self._stop = rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def best_of(fn, runs: int = 2) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


# ---- child processes -----------------------------------------------------------------------------


def child_build(arch: str, config: dict, folder: str) -> dict:
    import torch

    from deltalens import models

    started = time.perf_counter()
    model = models.build(arch, **config)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    model.save_pretrained(folder)
    save_s = time.perf_counter() - started
    tensors = list(model.state_dict().values())
    return {
        "build_s": round(build_s, 2),
        "save_s": round(save_s, 2),
        "tensors": len(tensors),
        "parameters": sum(p.numel() for p in model.parameters()),
        "weight_bytes": sum(t.numel() * t.element_size() for t in tensors),
        "torch_threads": torch.get_num_threads(),
    }


def linear_shapes(model) -> dict[tuple[int, int], int]:
    import torch.nn as nn

    counts: dict[tuple[int, int], int] = {}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            shape = (module.in_features, module.out_features)
            counts[shape] = counts.get(shape, 0) + 1
    return counts


def matmul_seconds(shapes: dict[tuple[int, int], int], T: int, dtype) -> tuple[float, float]:
    """(seconds of every linear layer of one forward as plain matmuls, peak GFLOP/s among the shapes)."""
    import torch

    total, peak = 0.0, 0.0
    for (n_in, n_out), count in shapes.items():
        x, w = torch.randn(T, n_in).to(dtype), torch.randn(n_in, n_out).to(dtype)
        x @ w  # warm-up
        seconds = best_of(lambda x=x, w=w: x @ w, runs=3)
        total += count * seconds
        peak = max(peak, 2 * T * n_in * n_out / seconds / 1e9)
    return total, peak


def child_measure(arch: str, folder: str, T: int, weight_bytes: int) -> dict:
    import torch

    import deltalens as dl
    from deltalens.models.ops.precision import cast_model
    from deltalens.tasks import TokenKind

    out: dict = {}
    rss0 = rss_bytes()
    started = time.perf_counter()
    model = dl.load(folder)
    out["load_s"] = round(time.perf_counter() - started, 2)
    rss1 = rss_bytes()
    out["rss_after_load_gb"] = round(rss1 / 2**30, 3)
    out["rss_before_load_gb"] = round(rss0 / 2**30, 3)
    out["rss_over_weights"] = round(rss1 / weight_bytes, 3)
    out["rss_growth_over_weights"] = round((rss1 - rss0) / weight_bytes, 3)

    vocab = model.cfg.d_vocab
    tokens = torch.randint(3, vocab, (1, T), generator=torch.Generator().manual_seed(0))
    shapes = linear_shapes(model)
    rates = {}
    with torch.inference_mode():
        model(tokens[:, :16])  # warm-up (allocator, kernels)
        forward_fp32 = best_of(lambda: model(tokens))
        logits_fp32 = model(tokens).float()
    mm32, peak32 = matmul_seconds(shapes, T, torch.float32)
    rates["fp32"] = {
        "forward_s": round(forward_fp32, 3),
        "tokens_per_s": round(T / forward_fp32, 1),
        "matmul_s": round(mm32, 3),
        "matmul_share": round(mm32 / forward_fp32, 3),
        "matmul_peak_gflops": round(peak32, 1),
        "forward_matmul_gflops": round(sum(2 * T * i * o * c for (i, o), c in shapes.items()) / forward_fp32 / 1e9, 1),
    }

    # capture: beta everywhere + the states of the middle delta-rule layer, at the reveal positions only
    kinds = torch.zeros(1, T, dtype=torch.long)
    kinds[:, 15::16] = int(TokenKind.REVEAL)
    batch = {"tokens": tokens, "lengths": torch.tensor([T]), "kinds": kinds}
    layer = model.delta_layers[len(model.delta_layers) // 2]
    names = ["beta", f"blocks.{layer}.attn.hook_state"]
    dl.capture(model, {**batch, "tokens": tokens[:, :16], "kinds": kinds[:, :16]}, names=names)  # warm-up
    before = rss_bytes()
    with PeakRSS() as watch:
        started = time.perf_counter()
        cap = dl.capture(model, batch, names=names, kinds=TokenKind.REVEAL)
        capture_s = time.perf_counter() - started
    out["capture"] = {
        "names": names,
        "rows": len(cap),
        "seconds": round(capture_s, 3),
        "plain_forward_s": round(forward_fp32, 3),
        "over_forward": round(capture_s / forward_fp32, 3),
        "nbytes": cap.nbytes,
        "estimated_bytes": cap.estimated_bytes,
        "peak_rss_added_mb": round((watch.peak - before) / 2**20, 1),
        "one_layer_states_all_positions_mb": round(T * cap[names[1]][0].numel() * 4 / 2**20, 1),
    }
    del cap

    model = cast_model(model, "bf16")
    with torch.inference_mode():
        model(tokens[:, :16])
        forward_bf16 = best_of(lambda: model(tokens))
        logits_bf16 = model(tokens).float()
    mm16, peak16 = matmul_seconds(shapes, T, torch.bfloat16)
    rates["bf16"] = {
        "forward_s": round(forward_bf16, 3),
        "tokens_per_s": round(T / forward_bf16, 1),
        "matmul_s": round(mm16, 3),
        "matmul_share": round(mm16 / forward_bf16, 3),
        "matmul_peak_gflops": round(peak16, 1),
    }
    diff = logits_bf16 - logits_fp32
    out["rates"] = rates
    out["bf16"] = {
        "speedup": round(forward_fp32 / forward_bf16, 2),
        "matmul_speedup": round(mm32 / mm16, 2),
        "max_abs_logit_diff": round(float(diff.abs().max()), 4),
        "rms_error_ratio": round(float(diff.square().mean().sqrt() / logits_fp32.square().mean().sqrt()), 4),
        "argmax_agreement": round(float((logits_bf16.argmax(-1) == logits_fp32.argmax(-1)).float().mean()), 4),
    }
    return out


# ---- the parent -------------------------------------------------------------------------------------


def run_child(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdict(models_out: dict) -> dict:
    out = {}
    for arch, m in models_out.items():
        checks = {
            "bf16_speedup": (m["bf16"]["speedup"], ">=", TARGETS["bf16_speedup"]),
            "fp32_matmul_share": (m["rates"]["fp32"]["matmul_share"], ">=", TARGETS["matmul_share"]),
            "rss_over_weights": (m["rss_over_weights"], "<=", TARGETS["rss_over_weights"]),
            "capture_over_forward": (m["capture"]["over_forward"], "<=", TARGETS["capture_over_forward"]),
        }
        out[arch] = {
            name: {"value": v, "target": f"{op} {t}", "met": v >= t if op == ">=" else v <= t}
            for name, (v, op, t) in checks.items()
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="hidden 256, 4 layers, 128 tokens: a quick check")
    parser.add_argument("--tokens", type=int, default=None, help="sequence length (default 256; --small 128)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="deltanet,gated_deltanet")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        kind, arch, folder, *rest = args.child
        configs = SMALL if args.small else CONFIGS
        if kind == "build":
            result = child_build(arch, configs[arch], folder)
        else:
            result = child_measure(arch, folder, int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return

    T = args.tokens or (128 if args.small else 256)
    flags = ["--threads", str(args.threads)] + (["--small"] if args.small else [])
    result = {
        "mode": "small" if args.small else "1.3B",
        "tokens": T,
        "batch": 1,
        "threads": args.threads,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "models": {},
    }
    for arch in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix=f"pretrained-{arch}-") as folder:
            built = run_child(*flags, "--child", "build", arch, folder)
            measured = run_child(*flags, "--child", "measure", arch, folder, str(T), str(built["weight_bytes"]))
        config = (SMALL if args.small else CONFIGS)[arch]
        result["models"][arch] = {"config": config, **built, **measured}
        print(f"{arch}: done", file=sys.stderr)
    result["targets"] = verdict(result["models"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
