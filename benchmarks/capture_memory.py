"""What a capture of one layer's states at a few positions adds to peak memory, and a capture to disk.

A layer of the 1.3B DeltaNet config (16 heads, d_k = d_v = 128) holds 1 MiB of state per token, so one
layer's states at every position of 4 traces x 256 tokens are 1 GiB. A capture that keeps S_t only at
the reveal positions (here every 16th token, 64 MiB) should cost about what it keeps. Measured in one run,
each as the rise of this process's peak RSS (VmHWM, reset before each step through /proc/self/clear_refs)
over the RSS before it:

  forward          a plain forward (the baseline: activations and logits)
  tapped           capture(names="state", layers=[1], positions=...): the layer writes only the kept rows
  all_positions    the same capture with the tap turned off: every position's S_t built, rows kept (before)
  to_disk          the tapped capture written to a folder (capture(..., to=)), then read back lazily

and each as a ratio to one layer's all-position states (`over_layer_states`; target for tapped: the kept
rows plus <= 10%). The model is the 1.3B config's width with 2 layers (the state's size depends only on
the layer). `machine` gives this run's fp32 and bf16 matmul GFLOP/s at the model's shapes.

    python3 benchmarks/capture_memory.py
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from timing import machine_limits

from deltalens import models
from deltalens.interp import capture as capture_module
from deltalens.interp.capture import capture
from deltalens.interp.capture_disk import folder_bytes, open_capture
from deltalens.models.lm.chunked import _return_freed_memory


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_rise(fn) -> tuple[int, float, object]:
    """(peak RSS during fn - RSS before it, seconds, fn's result)."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    start = time.perf_counter()
    result = fn()
    return _status("VmHWM") - before, time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--every", type=int, default=16, help="keep S_t at every n-th position")
    args = parser.parse_args()
    B, T = args.traces, args.tokens
    _return_freed_memory()  # big blocks mmapped and returned when freed: each step's RSS rise is its own
    machine = machine_limits({"projection": (B * T, 2048, 2048)})
    torch.manual_seed(0)
    model = models.build(
        "deltanet", vocab_size=32000, hidden_size=2048, num_hidden_layers=2, num_heads=16, expand_k=1, expand_v=1
    ).eval()
    tokens = torch.randint(1, 32000, (B, T))
    batch = {"tokens": tokens, "lengths": torch.full((B,), T)}
    positions = torch.zeros(B, T, dtype=torch.bool)
    positions[:, args.every - 1 :: args.every] = True
    H, K, V = model.cfg.n_heads, model.cfg.d_k, model.cfg.d_v
    layer_states = B * T * H * K * V * 4
    kept_states = int(positions.sum()) * H * K * V * 4

    def forward():
        with torch.no_grad():
            return model(tokens)

    def tapped():
        return capture(model, batch, names="state", layers=[1], positions=positions, batch_size=B)

    def all_positions():
        original = capture_module._state_mixers
        capture_module._state_mixers = lambda model, names: {}
        try:
            return tapped()
        finally:
            capture_module._state_mixers = original

    forward()  # warm-up: kernels built, weights touched
    tapped()
    steps = {}
    for label, fn in (("forward", forward), ("tapped", tapped), ("all_positions", all_positions)):
        rise, seconds, result = _peak_rise(fn)
        steps[label] = {"peak_rss_rise_mb": round(rise / 2**20, 1), "seconds": round(seconds, 2)}
        del result
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "capture"
        rise, seconds, result = _peak_rise(
            lambda: capture(model, batch, names="state", layers=[1], positions=positions, batch_size=1, to=target)
        )
        steps["to_disk"] = {"peak_rss_rise_mb": round(rise / 2**20, 1), "seconds": round(seconds, 2)}
        steps["to_disk"]["folder_mb"] = round(folder_bytes(target) / 2**20, 1)
        reread = open_capture(target)["blocks.1.attn.hook_state"]
        in_memory = tapped()["blocks.1.attn.hook_state"]  # one slice of 4 traces, not 4 of 1: rounding differs
        steps["to_disk"]["round_trip_max_abs_diff"] = float((reread - in_memory).abs().max())
        del result, reread, in_memory
    for step in steps.values():
        step["over_layer_states"] = round(step["peak_rss_rise_mb"] * 2**20 / layer_states, 3)
    report = {
        "benchmark": "capture_memory",
        "machine": machine,
        "traces": B,
        "tokens": T,
        "kept_every": args.every,
        "layer_states_mb": round(layer_states / 2**20, 1),
        "kept_states_mb": round(kept_states / 2**20, 1),
        "kept_over_layer_states": round(kept_states / layer_states, 3),
        "steps": steps,
        "tapped_extra_over_layer_states": round(
            (steps["tapped"]["peak_rss_rise_mb"] * 2**20 - kept_states) / layer_states, 3
        ),
        "target": "tapped adds the kept rows + <= 10% of one layer's all-position states",
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
