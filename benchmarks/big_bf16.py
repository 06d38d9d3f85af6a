"""A 7B delta-rule model in bf16 on this machine: the Olmo-Hybrid-7B shape with random weights, saved as
sharded bf16 safetensors, opened with `dl.load` (dtype "auto", the default), a 128-token forward, and
beta of every delta-rule layer plus one layer's states at stand-in reveal positions captured to disk.

The config is transformers' `OlmoHybridConfig()` with its defaults, which transformers documents as
allenai/Olmo-Hybrid-7B's (@auto_docstring(checkpoint="allenai/Olmo-Hybrid-7B")): hidden 3840, 32 layers
(every 4th softmax attention), 30 heads, key/value head dims 96/192, MLP 11008, vocab 100352; 7.43e9
weights. Each step runs in a fresh process, so each process's peak RSS is its own:

  write     the folder: config.json, model-0000i-of-0000N.safetensors (<= 2 GiB each), the index
  measure   dl.load (the estimate it prints before the load is kept), a forward of --tokens tokens, and
            dl.capture(..., to=DIR) of beta at every delta-rule layer and the states of one layer at
            every 16th position; peak RSS (VmHWM) over the weights' bytes
  peaks     this run's fp32 and bf16 F.linear GFLOP/s at each of the model's projection shapes

The forward's tokens/s is set against the tokens/s the same linear layers would reach at those peaks
(each layer at its shape's rate; the LM head and the tiny a/b projections at the MLP's and q/k's rates).
The folder is deleted afterwards (--keep keeps it). `--small` runs the same steps on a tiny config.

    nice -n 10 python3 benchmarks/big_bf16.py            # writes benchmarks/results/big_bf16.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHARD_BYTES = 2 * 2**30
EVERY = 16  # stand-in reveal positions: every 16th token (a random-token input has no reveals)
SMALL = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4, vocab_size=4096)
SHAPES = {  # (tokens, in, out) of the 7B's projections
    "q_k": (3840, 2880),
    "v_g": (3840, 5760),
    "o_linear": (5760, 3840),
    "attention_qkvo": (3840, 3840),
    "mlp_gate_up": (3840, 11008),
    "mlp_down": (11008, 3840),
}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _config(small: bool):
    from transformers.models.olmo_hybrid.configuration_olmo_hybrid import OlmoHybridConfig

    if small:
        return OlmoHybridConfig(**SMALL, pad_token_id=0, eos_token_id=1)
    return OlmoHybridConfig()


def _random(name: str, shape: tuple[int, ...], generator):
    """A plausible random value for each kind of weight (the forward stays finite in bf16)."""
    import torch

    out = torch.empty(shape, dtype=torch.float32 if len(shape) < 2 else torch.bfloat16)
    if "norm" in name:
        return out.fill_(1.0).to(torch.bfloat16)
    if name.endswith("A_log"):
        return out.uniform_(1, 16, generator=generator).log_().to(torch.bfloat16)
    if name.endswith("dt_bias"):
        dt = out.uniform_(math.log(1e-3), math.log(1e-1), generator=generator).exp_()
        return (dt + torch.log(-torch.expm1(-dt))).to(torch.bfloat16)
    if "conv1d" in name:
        return out.uniform_(-0.5, 0.5, generator=generator).to(torch.bfloat16)
    return out.normal_(0.0, 0.02, generator=generator).to(torch.bfloat16)


def write(folder: Path, small: bool) -> dict:
    """The folder: config.json and sharded bf16 safetensors with an index, one shard in memory at a time."""
    import torch
    from safetensors.torch import save_file
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid as modeling

    config = _config(small)
    with torch.device("meta"):
        shapes = {name: tuple(p.shape) for name, p in modeling.OlmoHybridForCausalLM(config).state_dict().items()}
    groups, size = [[]], 0
    for name, shape in shapes.items():
        nbytes = 2 * math.prod(shape)
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    weight_map, start = {}, time.perf_counter()
    for i, names in enumerate(groups, 1):
        shard = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: _random(n, shapes[n], generator) for n in names}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, shard))
    total = sum(2 * math.prod(s) for s in shapes.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    raw = {**config.to_dict(), "dtype": "bfloat16", "architectures": ["OlmoHybridForCausalLM"]}
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    fields = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    more = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    return {
        "config": {k: raw[k] for k in (*fields, *more, "vocab_size", "linear_allow_neg_eigval")},
        "layer_types": {kind: raw["layer_types"].count(kind) for kind in sorted(set(raw["layer_types"]))},
        "weights": sum(math.prod(s) for s in shapes.values()),
        "file_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "shards": len(groups),
        "write_s": round(time.perf_counter() - start, 1),
        "writer_peak_rss_bytes": _status("VmHWM"),
    }


class _Tee(io.StringIO):
    def write(self, text: str) -> int:
        sys.__stderr__.write(text)
        return super().write(text)


def measure(folder: Path, T: int) -> dict:
    """dl.load, a forward of T tokens, the capture to disk: times, RSS, the printed estimate."""
    import torch
    import transformer_lens  # noqa: F401 (imported before timing, as a notebook would have)
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid  # noqa: F401

    import deltalens as dl
    from deltalens.interp.capture_disk import folder_bytes

    rss_before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
    printed = _Tee()
    start = time.perf_counter()
    with contextlib.redirect_stderr(printed):
        model = dl.load(str(folder))  # dtype "auto": the default
    load_s = time.perf_counter() - start
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
    weights_bytes = sum(t.numel() * t.element_size() for t in tensors)
    rss_loaded = _status("VmRSS")
    tokens = torch.randint(1, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        start = time.perf_counter()
        logits = model(tokens)
        forward_s = time.perf_counter() - start
    finite = bool(logits.float().isfinite().all())
    del logits
    layer = model.delta_layers[-1]
    names = [dl.act_name("beta", i) for i in model.delta_layers] + [dl.act_name("state", layer)]
    positions = torch.zeros(1, T, dtype=torch.bool)
    positions[:, EVERY - 1 :: EVERY] = True
    target = folder.parent / (folder.name + "-capture")
    start = time.perf_counter()
    cap = dl.capture(
        model, {"tokens": tokens, "lengths": torch.tensor([T])}, names=names, positions=positions, to=target
    )
    capture_s = time.perf_counter() - start
    state = cap[dl.act_name("state", layer)]
    beta = cap[dl.act_name("beta", model.delta_layers[0])]
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    peak = _status("VmHWM")
    return {
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "printed_before_load": [line for line in printed.getvalue().splitlines() if line.startswith("deltalens:")],
        "load_s": round(load_s, 2),
        "weights_bytes": weights_bytes,
        "rss_before_load_bytes": rss_before,
        "rss_after_load_bytes": rss_loaded,
        "peak_rss_bytes": peak,
        "peak_rss_over_weights": round(peak / weights_bytes, 3),
        "peak_rss_growth_over_weights": round((peak - rss_before) / weights_bytes, 3),  # less the imports
        "tokens": T,
        "forward_s": round(forward_s, 2),
        "forward_tokens_per_s": round(T / forward_s, 3),
        "logits_finite": finite,
        "capture": {
            "names": len(names),
            "state_layer": layer,
            "positions": int(positions.sum()),
            "seconds": round(capture_s, 2),
            "bytes_on_disk": folder_bytes(target),
            "state_shape": list(state.shape),
            "beta_shape": list(beta.shape),
            "beta_range": [round(float(beta.min()), 4), round(float(beta.max()), 4)],
            "finite": bool(state.isfinite().all() and beta.isfinite().all()),
        },
        "linears": linears,
    }


def peaks(small: bool) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from timing import machine_limits

    scale = SMALL["hidden_size"] / 3840 if small else 1.0
    shapes = {k: (128, max(int(i * scale), 8), max(int(o * scale), 8)) for k, (i, o) in SHAPES.items()}
    return machine_limits(shapes, seconds=0.3)


def at_peak(linears: list, machine: dict, T: int, dtype: str) -> float:
    """Tokens/s the model's linear layers would reach at this run's `dtype` F.linear peaks, each at its shape's."""
    rates = {(s["shape"][1], s["shape"][2]): s[dtype] for s in machine["matmul_gflops"].values()}
    by_label = {k: (s["shape"][1], s["shape"][2]) for k, s in machine["matmul_gflops"].items()}
    seconds = 0.0
    for fan_in, fan_out in linears:
        rate = rates.get((fan_in, fan_out)) or rates[by_label["mlp_gate_up" if fan_out > fan_in else "q_k"]]
        seconds += 2 * T * fan_in * fan_out / (rate * 1e9)
    return T / seconds


def _child(*args: str) -> tuple[dict, list[str]]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    said = [line for line in out.stderr.splitlines() if line.startswith("deltalens:")]
    if out.returncode:
        raise SystemExit(f"child {args[0]} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/deltalens-big-bf16/olmo-hybrid-7b")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--small", action="store_true", help="a tiny config: checks the steps in seconds")
    parser.add_argument("--keep", action="store_true", help="keep the folder and the capture")
    parser.add_argument(
        "--out", default=None, help="the JSON's file (default: benchmarks/results/big_bf16.json unless --small)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, rest = args.child[0], args.child[1:]
        result = {
            "write": lambda: write(Path(rest[0]), rest[1] == "small"),
            "measure": lambda: measure(Path(rest[0]), int(rest[1])),
            "peaks": lambda: peaks(rest[0] == "small"),
        }[step]()
        print(json.dumps(result))
        return
    folder = Path(args.dir + ("-small" if args.small else ""))
    size = "small" if args.small else "7b"
    try:
        written, _ = _child("write", str(folder), size)
        measured, said = _child("measure", str(folder), str(args.tokens))
        machine, _ = _child("peaks", size)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(folder.parent / (folder.name + "-capture"), ignore_errors=True)
    report = _report(written, measured, said, machine, args)
    text = json.dumps(report, indent=1)
    print(text)
    out = args.out or (None if args.small else str(Path(__file__).parent / "results" / "big_bf16.json"))
    if out:
        Path(out).write_text(text + "\n")


def _report(written: dict, measured: dict, said: list[str], machine: dict, args) -> dict:
    linears = measured.pop("linears")
    T = args.tokens
    peak = {dtype: at_peak(linears, machine, T, dtype) for dtype in ("bf16", "fp32")}
    rate = measured["forward_tokens_per_s"]
    return {
        "benchmark": "big_bf16",
        "command": "nice -n 10 python3 benchmarks/big_bf16.py" + (" --small" if args.small else ""),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "config_source": (
            "transformers OlmoHybridConfig() defaults (documented by transformers as allenai/Olmo-Hybrid-7B's)"
            if not args.small
            else f"tiny: {SMALL}"
        ),
        "written": written,
        "estimate_printed_before_load": said,
        "measured": measured,
        "machine": machine,
        "tokens_per_s_at_matmul_peak": {k: round(v, 3) for k, v in peak.items()},
        "forward_over_bf16_peak": round(rate / peak["bf16"], 3),
        "forward_over_fp32_peak": round(rate / peak["fp32"], 3),
        "targets": {
            "peak_rss_over_weights": {"target": 1.15, "met": measured["peak_rss_over_weights"] <= 1.15},
            "forward_over_matmul_peak": {
                "target": 0.5,
                "met_bf16": rate / peak["bf16"] >= 0.5,
                "met_fp32": rate / peak["fp32"] >= 0.5,
            },
        },
    }


if __name__ == "__main__":
    main()
