"""Attribution patching against activation patching, and its cost on a 1.3B-parameter configuration.

Run:
    python3 benchmarks/attribution.py                 # the shipped checkpoints (a minute or two on a CPU)
    python3 benchmarks/attribution.py --large         # the 1.3B DeltaNet config, random weights (5.7 GB, slow)

Prints one JSON object. Shipped: per checkpoint and site (hook_z, hook_beta, hook_state), the Spearman
rank correlation between the activation-patching grid and the attribution-patching grid (per head, and
per head x position), whether the top head agrees, and each method's cost in forward-equivalents
(wall time / one plain forward of the corrupted batch). Large: the time to rank all 384 heads
(24 layers x 16 heads) at every position by attribution patching, in forward-equivalents (target <= 3; the
median of `--repeats` attributions, each over the mean of the plain forwards timed just before and after it,
beside the same ratio in this process's CPU seconds, which waits for a shared core do not inflate),
beside this machine's fp32 and bf16 matmul GFLOP/s at the model's shapes measured in the same run
(`machine`), and the forward's own GFLOP/s as a fraction of the fp32 matmul's (`forward_over_fp32_matmul`).
`--layers N` times a slice of the config (same widths, N layers) for a quicker look; `--corrupt-at P` changes
the corrupted batch's token at P (default tokens / 4): the prefix before it runs once (interp/attribution_runs.py),
so `--corrupt-at 0` times the attribution with nothing shared. The 1-minute load average before and after is
recorded (`load_average`): the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from scipy.stats import spearmanr

SHIPPED = ("s3-deltanet-neg-statement", "s5-deltanet-neg-statement", "s4-deltaproduct-n3-full")


def _forward_seconds(model, tokens, repeats: int = 3) -> float:
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            model(tokens)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def shipped(n_traces: int) -> dict:
    import deltalens as dl
    from deltalens.interp.attribution_patching import attribution_patching
    from deltalens.interp.patching import patch_heads
    from deltalens.interp.trace_pairs import reveal_metric, trace_pair

    report = {}
    for name in SHIPPED:
        model = dl.load(name)
        clean, corrupt = trace_pair(model, n_traces)
        metric = reveal_metric(clean, corrupt)
        forward = _forward_seconds(model, corrupt["tokens"])
        start = time.perf_counter()
        ap = attribution_patching(model, clean, corrupt, metric, sites=("z", "beta", "state"), time_forward=False)
        ap_seconds = time.perf_counter() - start
        entry = {
            "clean_metric": ap.clean,
            "corrupt_metric": ap.corrupt,
            "attribution_forward_equivalents": round(ap_seconds / forward, 2),
            "sites": {},
        }
        for site in ("z", "beta", "state"):
            start = time.perf_counter()
            grid = patch_heads(model, clean, corrupt, metric, site=site, per_position=True, progress=False)
            patch_seconds = time.perf_counter() - start
            per_head_patch = patch_heads(model, clean, corrupt, metric, site=site, progress=False)
            effect, estimate = per_head_patch.per_head().flatten(), ap.per_head(site).flatten()
            cells_effect, cells_estimate = (grid.values - grid.corrupt).flatten(), ap.grids[site].flatten()
            entry["sites"][site] = {
                "spearman_per_head": round(float(spearmanr(estimate, effect)[0]), 3),
                "spearman_per_head_position": round(float(spearmanr(cells_estimate, cells_effect)[0]), 3),
                "top_head_patching": list(per_head_patch.top()),
                "top_head_attribution": list(ap.top(site)),
                "top_agrees": per_head_patch.top() == ap.top(site),
                "patching_forwards_per_position_grid": grid.n_forwards,
                "patching_forward_equivalents_per_position_grid": round(patch_seconds / forward, 1),
                "patch_restored_top": round(float(per_head_patch.normalised()[per_head_patch.top()]), 4),
            }
        report[name] = entry
    return report


def _timed(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, fn's result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def large(
    tokens_len: int, sites: tuple[str, ...], layers: int = 24, corrupt_at: int | None = None, repeats: int = 3
) -> dict:
    from timing import linear_flops, machine_limits

    from deltalens import models
    from deltalens.interp.attribution_patching import attribution_patching

    machine = machine_limits({"projection": (tokens_len, 2048, 2048), "lm_head": (tokens_len, 2048, 32000)})
    torch.manual_seed(0)
    start = time.perf_counter()
    model = models.build(
        "deltanet", vocab_size=32000, hidden_size=2048, num_hidden_layers=layers, num_heads=16, expand_k=1, expand_v=1
    ).eval()
    build_seconds = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    clean = torch.randint(0, 32000, (1, tokens_len))
    corrupt = clean.clone()
    at = tokens_len // 4 if corrupt_at is None else corrupt_at
    corrupt[:, at] = (corrupt[:, at] + 1) % 32000

    def metric(logits):
        return logits[:, -1, 7] - logits[:, -1, 11]

    def forward():
        with torch.no_grad():
            return model(corrupt)

    def attribute():
        return attribution_patching(
            model, clean, corrupt, lambda logits: metric(logits).sum(), sites=sites, time_forward=False
        )

    # on a shared machine: forward, then `repeats` x (attribution, forward); each attribution is divided by the
    # mean of the forwards either side of it (wall and this process's CPU seconds), the median ratio reported
    load_before = os.getloadavg()[0]
    forward()  # warm-up
    forwards, attributions = [_timed(forward)], []
    for _ in range(repeats):
        attributions.append(_timed(attribute))
        forwards.append(_timed(forward))
    load_after = os.getloadavg()[0]
    wall = [a[0] / ((f0[0] + f1[0]) / 2) for a, f0, f1 in zip(attributions, forwards, forwards[1:])]
    cpu = [a[1] / ((f0[1] + f1[1]) / 2) for a, f0, f1 in zip(attributions, forwards, forwards[1:])]
    middle = sorted(range(repeats), key=lambda i: wall[i])[repeats // 2]
    seconds, ap = attributions[middle][0], attributions[middle][2]
    forward_s = (forwards[middle][0] + forwards[middle + 1][0]) / 2
    forward_gflops = linear_flops(model, tokens_len) / statistics.median(f[0] for f in forwards) / 1e9
    return {
        "machine": machine,
        "parameters": params,
        "heads": model.cfg.n_layers * model.cfg.n_heads,
        "tokens": tokens_len,
        "corrupted_position": at,
        "sites": list(sites),
        "build_seconds": round(build_seconds, 1),
        "forward_seconds": round(forward_s, 3),
        "forward_seconds_each": [round(f[0], 3) for f in forwards],
        "forward_linear_gflops": round(forward_gflops, 2),
        "forward_over_fp32_matmul": round(forward_gflops / machine["matmul_gflops"]["projection"]["fp32"], 3),
        "attribution_seconds": round(seconds, 3),
        "attribution_seconds_each": [round(a[0], 3) for a in attributions],
        "forward_equivalents": round(wall[middle], 2),
        "forward_equivalents_each": [round(r, 2) for r in wall],
        "cpu_forward_equivalents_each": [round(r, 2) for r in cpu],
        "breakdown_forward_equivalents": {k: round(v / forward_s, 2) for k, v in ap.timings.items()},
        "top_head": list(ap.top(sites[0])),
        "load_average": [round(load_before, 2), round(load_after, 2)],
        "target": "<= 3 forward-equivalents",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="time the 1.3B config instead of the shipped models")
    parser.add_argument("--tokens", type=int, default=128, help="sequence length of the large run")
    parser.add_argument("--sites", default="z,beta", help="sites of the large run (comma-separated)")
    parser.add_argument("--layers", type=int, default=24, help="layers of the large run (24: the 1.3B config)")
    parser.add_argument("--corrupt-at", type=int, default=None, help="corrupted position (default: tokens / 4)")
    parser.add_argument("--repeats", type=int, default=3, help="attributions of the large run (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--traces", type=int, default=16, help="traces per batch on the shipped models")
    args = parser.parse_args()
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    if args.large:
        report = large(args.tokens, tuple(args.sites.split(",")), args.layers, args.corrupt_at, args.repeats)
        print(json.dumps({"large": report}, indent=2))
    else:
        print(json.dumps({"shipped": shipped(args.traces)}, indent=2))


if __name__ == "__main__":
    main()
