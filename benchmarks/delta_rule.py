"""Delta-rule speed: our chunked torch kernel vs fla's naive recurrence; state capture; a long forward.

Prints ONE JSON object:
  fwd_bwd_s.chunked / fwd_bwd_s.fla_naive   forward+backward at B=16, H=4, T=1024, K=V=32 (CPU,
                                            best of a few runs; the naive path runs fewer times)
  speedup_vs_naive                          fla_naive / chunked (target >= 20, at least 10)
  max_abs_err                               chunked vs naive: outputs, final state, gradients
  capture.ratio                             forward that materialises every S_t / plain forward
                                            (both no-grad; target <= 3)
  capture.model                             the same inside a 2-layer d=128 model: run_with_cache on
                                            hook_state vs a plain forward
  long_forward                              8-layer d=256 HookedDeltaNet, batch 1, T=4096, no
                                            capture, torch.no_grad: seconds and peak RSS (VmHWM,
                                            reset before the forward) in a fresh subprocess
  cuda                                      (only with a GPU) fla's chunk kernel and ours on GPU

Run: python3 benchmarks/delta_rule.py [--threads N]   (about a minute on a 2-core CPU). Without
--threads it uses torch's default thread count, or one thread when the load average shows other
processes on the cores (two spinning OpenMP threads then slow fla's naive loop ~20x); the report
records the load average and the choice.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from deltalens.models.ops.delta_rule import chunk_delta_rule, chunk_delta_rule_with_states

ROOT = Path(__file__).resolve().parents[1]
warnings.filterwarnings("ignore")

B, H, T, K, V = 16, 4, 1024, 32, 32


def timed(fn, repeats: int, warmup: int = 1) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"best": round(times[0], 4), "median": round(times[len(times) // 2], 4), "runs": repeats}


def make_inputs(device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, T, H, K, generator=g)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2.0
    return [x.to(device, dtype).requires_grad_() for x in (q, k, v, beta)]


def bench_cpu() -> dict:
    from fla.ops.delta_rule.naive import delta_rule_recurrence as fla_naive

    q, k, v, beta = make_inputs()
    do = torch.randn(B, T, H, V, generator=torch.Generator().manual_seed(1))

    def ours_fwd_bwd():
        o, S = chunk_delta_rule(q, k, v, beta, output_final_state=True)
        (o * do).sum().backward()
        return o, S

    def naive_fwd_bwd():
        o, S = fla_naive(*(x.transpose(1, 2) for x in (q, k, v, beta)), output_final_state=True)
        o = o.transpose(1, 2)
        (o * do).sum().backward()
        return o, S

    def grads_of(fn):
        for x in (q, k, v, beta):
            x.grad = None
        o, S = fn()
        return o.detach(), S.detach(), [x.grad.clone() for x in (q, k, v, beta)]

    o1, S1, g1 = grads_of(ours_fwd_bwd)
    start = time.perf_counter()
    o2, S2, g2 = grads_of(naive_fwd_bwd)  # fla's naive loop takes about a minute: timed once, here
    naive = {"best": round(time.perf_counter() - start, 4), "runs": 1}
    errors = {
        "o": (o1 - o2).abs().max().item(),
        "final_state": (S1 - S2).abs().max().item(),
        "grads": max((a - b).abs().max().item() for a, b in zip(g1, g2)),
        # gradients sum over up to 1024 steps and reach O(100): their relative error is the fair one
        "grads_relative": max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(g1, g2)),
    }
    chunked = timed(ours_fwd_bwd, repeats=3)

    with torch.no_grad():
        plain = timed(lambda: chunk_delta_rule(q, k, v, beta), repeats=3)
        capture = timed(lambda: chunk_delta_rule_with_states(q, k, v, beta), repeats=3)

    return {
        "fwd_bwd_s": {"chunked": chunked, "fla_naive": naive},
        "speedup_vs_naive": round(naive["best"] / chunked["best"], 1),
        "max_abs_err": {name: float(f"{e:.3g}") for name, e in errors.items()},
        "capture": {
            "plain_fwd_s": plain,
            "fwd_with_all_states_s": capture,
            "ratio": round(capture["best"] / plain["best"], 2),
            "states_MiB": round(B * T * H * K * V * 4 / 2**20),
            "model": capture_in_model(),
        },
    }


def capture_in_model() -> dict:
    """Same shape inside a model: 2-layer d=128 HookedDeltaNet (4 heads of 32), B=16, T=1024."""
    from fla.models import DeltaNetConfig

    from deltalens.models.lm.deltanet import HookedDeltaNet

    cfg = DeltaNetConfig(hidden_size=128, num_heads=H, num_hidden_layers=2, vocab_size=64, allow_neg_eigval=True)
    torch.manual_seed(0)
    model = HookedDeltaNet(cfg).eval()
    tokens = torch.randint(0, 64, (B, T))
    with torch.no_grad():
        plain = timed(lambda: model(tokens), repeats=3)
        cached = timed(lambda: model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_state")), repeats=3)
    return {
        "plain_fwd_s": plain,
        "run_with_cache_hook_state_s": cached,
        "ratio": round(cached["best"] / plain["best"], 2),
    }


def long_forward() -> dict:
    """Runs in its own process (see main): an 8-layer d=256 model on 4096 tokens."""
    from fla.models import DeltaNetConfig

    from deltalens.models.lm.deltanet import HookedDeltaNet

    cfg = DeltaNetConfig(hidden_size=256, num_heads=4, num_hidden_layers=8, vocab_size=64, allow_neg_eigval=True)
    torch.manual_seed(0)
    model = HookedDeltaNet(cfg).eval()
    tokens = torch.randint(0, 64, (1, 4096))
    rss_before = _rss_kib("VmRSS")
    _reset_peak_rss()
    with torch.no_grad():
        start = time.perf_counter()
        logits = model(tokens)
        first = time.perf_counter() - start
        again = timed(lambda: model(tokens), repeats=1, warmup=0)
    return {
        "config": {"layers": 8, "d_model": 256, "heads": 4, "d_head": 64, "T": 4096, "batch": 1},
        "seconds": {"first": round(first, 4), "second": again["best"]},
        "finite": bool(torch.isfinite(logits).all()),
        "peak_rss_MiB": round(_rss_kib("VmHWM") / 1024),
        "rss_before_forward_MiB": round(rss_before / 1024),
    }


def _rss_kib(field: str) -> int:
    """VmRSS / VmHWM of this process from /proc (ru_maxrss would include the parent's peak)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets VmHWM, so the peak is the forward's alone (plus imports)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def bench_cuda() -> dict:
    from deltalens.models.ops.delta_rule import fla_kernels_available

    if not fla_kernels_available():
        return {"available": False}
    out = {"available": True, "device": torch.cuda.get_device_name()}
    q, k, v, beta = make_inputs("cuda", torch.bfloat16)
    do = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16)

    def run(use_fla):
        def fn():
            o, _ = chunk_delta_rule(q, k, v, beta, use_fla=use_fla)
            (o * do).sum().backward()
            torch.cuda.synchronize()

        return fn

    out["fwd_bwd_s"] = {
        "fla_chunk_bf16": timed(run(True), repeats=20, warmup=3),
        "torch_chunked_bf16_in": timed(run(False), repeats=20, warmup=3),
    }
    return out


def main() -> None:
    load = os.getloadavg()[0]
    if "--threads" in sys.argv:
        torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        threads_why = "--threads"
    elif load >= 1.0:
        # Other processes hold a core: two OpenMP threads would then spin-wait on each other and
        # slow every timing several-fold (fla's naive loop ~20x); one thread keeps them comparable.
        torch.set_num_threads(1)
        threads_why = f"load average {load:.2f} >= 1: one thread"
    else:
        threads_why = "torch default"
    if "--long-forward" in sys.argv:
        print(json.dumps(long_forward()))
        return
    start = time.perf_counter()
    report = {
        "benchmark": "delta_rule",
        "load_avg_1m_at_start": round(load, 2),
        "threads_choice": threads_why,
        "shape": {"B": B, "H": H, "T": T, "K": K, "V": V, "beta": "U[0, 2]", "keys": "unit"},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    report.update(bench_cpu())
    report["targets_met"] = {
        "speedup>=20": report["speedup_vs_naive"] >= 20,
        "speedup>=10": report["speedup_vs_naive"] >= 10,
        "capture_ratio<=3": report["capture"]["ratio"] <= 3,
    }
    child_args = [sys.executable, __file__, "--long-forward", "--threads", str(torch.get_num_threads())]
    child = subprocess.run(
        child_args, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    if child.returncode == 0:
        report["long_forward"] = json.loads(child.stdout.strip().splitlines()[-1])
    else:
        report["long_forward"] = {"error": child.stderr.strip().splitlines()[-1:]}
    if torch.cuda.is_available():
        report["cuda"] = bench_cuda()
    report["total_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
