"""The GPU benchmark of issue 56: one JSON object, every figure beside its peer, measured in one run on one GPU.

    python3 benchmarks/gpu.py --json [--budget 240] [--out FILE]   # on a CUDA GPU
    python3 benchmarks/gpu.py --dry-run --json                     # the plan only (automatic without CUDA)
    python3 benchmarks/gpu.py --cpu-smoke --json                   # every part at toy sizes on a CPU, fla's Triton
                                                                   # modules swapped for tests/fla_on_cpu.py's torch
                                                                   # stand-ins: checks the code, not the speed

Parts, each under its share of --budget (a part that fails, or is past its share, says so; the others run):

  machine   bf16 and fp32 matmul TFLOP/s (torch.mm), device-to-device copy GB/s; versions; which backend fla's
            chunk entry points dispatch to (models/ops/fla_kernels.fla_backend) and FLA_DISABLE_BACKEND_DISPATCH
  deltanet  fla's DeltaNetForCausalLM and deltalens opening the same saved folder (dl.load), both bf16:
            logits parity; forward and forward+backward tokens/s; deltalens's capture of beta at every layer plus
            one layer's S_t at the reveal positions (every 64th token; a StateTap: the fla_rows path), its time
            over the plain forward, and dl.capture(positions=) end to end (rows copied to the CPU)
  qwen3_5   transformers' Qwen3.5 and deltalens on the same saved folder, both bf16: parity, forward tokens/s,
            capture; which of transformers' kernels fell back to torch (its hub_kernels warnings)
  recipe    the shipped recipe checkpoints/s3-deltanet-neg-statement/train.toml trained here for its share:
            steps/s and the projected wall time of all its steps, beside the CPU time on its card

Targets (issue 56): deltanet forward and forward+backward >= 0.9x fla's own tokens/s; capture <= 1.2x the plain
forward; qwen3_5 deltalens forward >= transformers'.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # timing.py, also when this file is imported from elsewhere
from timing import Budget, print_report, timed  # noqa: E402

RECIPE = ROOT / "checkpoints" / "s3-deltanet-neg-statement" / "train.toml"
SIZES = {  # the GPU shapes of issue 56; the smoke's toy ones
    "gpu": dict(
        batch=8, tokens=2048, matmul=8192, copy_mib=1024,
        deltanet=dict(hidden_size=1024, num_hidden_layers=8, num_heads=8, vocab_size=32000, allow_neg_eigval=True),
        qwen3_5=dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=8,
                     num_key_value_heads=2, head_dim=128, linear_key_head_dim=128, linear_value_head_dim=128,
                     linear_num_key_heads=8, linear_num_value_heads=8, vocab_size=32000),
    ),
    "smoke": dict(
        batch=2, tokens=128, matmul=256, copy_mib=8,
        deltanet=dict(hidden_size=32, num_hidden_layers=2, num_heads=2, vocab_size=64, allow_neg_eigval=True,
                      fuse_cross_entropy=False),
        qwen3_5=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=8,
                     linear_num_key_heads=2, linear_num_value_heads=4, vocab_size=64),
    ),
}  # fmt: skip
REVEAL_EVERY = 64  # reveal positions: every 64th token (32 per sequence of 2048)
SHARES = {"machine": 0.1, "deltanet": 0.4, "qwen3_5": 0.3, "recipe": 0.2}
TARGETS = {
    "deltanet": "forward and forward+backward >= 0.9x fla's DeltaNetForCausalLM; capture <= 1.2x the plain forward",
    "qwen3_5": "deltalens forward >= transformers' forward on the same GPU",
}


def plan(sizes: dict) -> dict:
    """What each part runs, at these sizes (the --dry-run answer)."""
    B, T = sizes["batch"], sizes["tokens"]
    return {
        "machine": f"torch.mm {sizes['matmul']}^3 in bf16 and fp32 (TFLOP/s); copy of {sizes['copy_mib']} MiB (GB/s); "
        "versions; fla's backend for delta_rule / gated_delta_rule",
        "deltanet": f"fla DeltaNetForCausalLM {sizes['deltanet']} saved, reopened by dl.load; B {B}, T {T}, bf16: "
        "logits parity, forward / forward+backward tokens/s for both, deltalens capture of beta (every layer) + "
        f"S_t of the middle layer at every {REVEAL_EVERY}th token, over the plain forward; dl.capture end to end",
        "qwen3_5": f"transformers Qwen3_5ForCausalLM {sizes['qwen3_5']} (3 Gated DeltaNet : 1 attention layers), "
        f"saved, reopened by dl.load; B {B}, T {T}, bf16: parity, forward tokens/s, capture; transformers' fallbacks",
        "recipe": f"{RECIPE.relative_to(ROOT)} trained for its share of the budget: steps/s, projected wall time",
    }


# ---- timing -----------------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def seconds_per_call(fn, device: str, limit_s: float, max_calls: int = 10) -> float:
    """Best wall time of fn() after one warm-up (Triton compiles there), calls until limit_s or max_calls."""
    _sync(device)
    started = time.perf_counter()
    fn()
    _sync(device)
    best, calls = float("inf"), 0
    while calls < 2 or (time.perf_counter() - started < limit_s and calls < max_calls):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best, calls = min(best, time.perf_counter() - t0), calls + 1
    return best


def err(ref, got) -> dict:
    ref, got = ref.detach().float().cpu(), got.detach().float().cpu()
    rms = float((ref - got).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-12))
    return {"rms_ratio": round(rms, 5), "max_abs": round(float((ref - got).abs().max()), 5)}


def _paths(model) -> list[str]:
    return sorted({m.last_kernel.path for m in model.modules() if getattr(m, "last_kernel", None) is not None})


# ---- the parts --------------------------------------------------------------------------------------------


def machine(sizes: dict, device: str, limit_s: float) -> dict:
    import torch

    from deltalens.models.ops.fla_kernels import FLA_OPERATIONS, fla_backend

    n, out = sizes["matmul"], {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        seconds = seconds_per_call(lambda a=a, b=b: a @ b, device, limit_s / 4)
        out[f"matmul_{name}_tflops"] = round(2 * n**3 / seconds / 1e12, 4)
    src = torch.empty(sizes["copy_mib"] * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    copy_s = seconds_per_call(lambda: dst.copy_(src), device, limit_s / 4)
    out["copy_gb_s"] = round(2 * src.numel() * 4 / copy_s / 1e9, 1)  # read + write
    out["fla_backend"] = {operation: fla_backend(operation) for operation in FLA_OPERATIONS}
    out["FLA_DISABLE_BACKEND_DISPATCH"] = os.environ.get("FLA_DISABLE_BACKEND_DISPATCH")
    return out


def _reveal_rows(B: int, T: int):
    import torch

    keep = torch.zeros(B, T, dtype=torch.bool)
    keep[:, REVEAL_EVERY - 1 :: REVEAL_EVERY] = True
    return keep


def ours_capture(model, tokens, keep, layer: int):
    """One forward keeping hook_beta of every layer and layer `layer`'s S_t at the kept rows (a StateTap, as
    interp/capture.py sets it), on the device. Returns (logits, {name: tensor})."""
    from deltalens.models.layers.hooked_recurrence import StateTap

    kept = {}

    def save(x, hook):
        kept[hook.name] = x.detach()

    mixer = model.blocks[layer].attn
    rows = tuple(x.to(tokens.device) for x in keep.nonzero(as_tuple=True))
    mixer.state_tap = StateTap(rows, lambda states: kept.__setitem__(f"blocks.{layer}.attn.hook_state", states))
    names = [n for n in model.hook_dict if n.endswith("attn.hook_beta")]
    try:
        with model.hooks(fwd_hooks=[(n, save) for n in names]):
            logits = model(tokens)
    finally:
        mixer.state_tap = None
    return logits, kept


def _rates(fns: dict, tokens: int, device: str, limit_s: float) -> dict:
    return {name: round(tokens / seconds_per_call(fn, device, limit_s / len(fns))) for name, fn in fns.items()}


def deltanet(sizes: dict, device: str, limit_s: float) -> dict:
    import torch
    from fla.models import DeltaNetConfig, DeltaNetForCausalLM

    import deltalens as dl

    B, T = sizes["batch"], sizes["tokens"]
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        DeltaNetForCausalLM(DeltaNetConfig(**sizes["deltanet"])).save_pretrained(folder)
        theirs = DeltaNetForCausalLM.from_pretrained(folder).to(device, torch.bfloat16)
        ours = dl.load(folder, device=device, dtype="bf16")
    tokens = torch.randint(1, sizes["deltanet"]["vocab_size"], (B, T), device=device)
    keep, layer = _reveal_rows(B, T), ours.cfg.n_layers // 2
    out: dict = {"shape": {"batch": B, "tokens": T, **sizes["deltanet"]}, "dtype": "bf16"}
    with torch.no_grad():
        ref, got = theirs(input_ids=tokens[:2]).logits, ours(tokens[:2])
        out["parity"] = err(ref, got)
        out["paths_plain"] = _paths(ours)
        _, kept = ours_capture(ours, tokens, keep, layer)
        out["paths_capture"] = _paths(ours)
        out["capture_kept"] = {name: list(x.shape) for name, x in kept.items() if "hook_state" in name}

        out["forward_tokens_per_s"] = _rates(
            {"fla": lambda: theirs(input_ids=tokens), "deltalens": lambda: ours(tokens),
             "deltalens_capture": lambda: ours_capture(ours, tokens, keep, layer)},
            B * T, device, limit_s * 0.4,
        )  # fmt: skip
        dl_capture = seconds_per_call(
            lambda: dl.capture(ours, tokens.cpu(), names=("beta", f"blocks.{layer}.attn.hook_state"), positions=keep),
            device, limit_s * 0.1, max_calls=3,
        )  # fmt: skip
        out["dl_capture_tokens_per_s"] = round(B * T / dl_capture)
    theirs.train(), ours.train()
    out["fwd_bwd_tokens_per_s"] = _rates(
        {"fla": lambda: theirs(input_ids=tokens, labels=tokens).loss.backward(),
         "deltalens": lambda: ours(tokens, return_type="loss").backward()},
        B * T, device, limit_s * 0.4,
    )  # fmt: skip
    f, b = out["forward_tokens_per_s"], out["fwd_bwd_tokens_per_s"]
    out["ratios"] = {
        "forward_deltalens_over_fla": round(f["deltalens"] / f["fla"], 3),
        "fwd_bwd_deltalens_over_fla": round(b["deltalens"] / b["fla"], 3),
        "capture_time_over_plain_forward": round(f["deltalens"] / f["deltalens_capture"], 3),
    }
    out["target"] = TARGETS["deltanet"]
    return out


@contextlib.contextmanager
def _fallbacks(seen: list):
    """Collect transformers' "falling back to its reference PyTorch implementation" warnings."""

    class Catch(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if "falling back" in text:
                seen.append(text.split("`")[1] if "`" in text else text[:80])

    logger, handler = logging.getLogger("transformers.integrations.hub_kernels"), Catch()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def qwen3_5(sizes: dict, device: str, limit_s: float) -> dict:
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    import deltalens as dl
    from deltalens.models.production.family import LAYERS_3_1

    B, T = sizes["batch"], sizes["tokens"]
    layers = LAYERS_3_1 * (sizes["qwen3_5"]["num_hidden_layers"] // 4)
    config = Qwen3_5TextConfig(**sizes["qwen3_5"], layer_types=layers, bos_token_id=1, pad_token_id=0,
                               eos_token_id=None, tie_word_embeddings=False)  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        Qwen3_5ForCausalLM(config).save_pretrained(folder)
        theirs = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
        ours = dl.load(folder, device=device, dtype="bf16")
    tokens = torch.randint(1, sizes["qwen3_5"]["vocab_size"], (B, T), device=device)
    keep, layer = _reveal_rows(B, T), layers.index("linear_attention")
    out: dict = {"shape": {"batch": B, "tokens": T, **sizes["qwen3_5"], "layer_types": layers}, "dtype": "bf16"}
    fallbacks: list = []
    with torch.no_grad(), _fallbacks(fallbacks):
        out["parity"] = err(theirs(input_ids=tokens[:2], use_cache=False).logits, ours(tokens[:2]))
        out["paths_plain"] = _paths(ours)
        ours_capture(ours, tokens, keep, layer)
        out["paths_capture"] = _paths(ours)
        out["forward_tokens_per_s"] = _rates(
            {"transformers": lambda: theirs(input_ids=tokens, use_cache=False),
             "deltalens": lambda: ours(tokens),
             "deltalens_capture": lambda: ours_capture(ours, tokens, keep, layer)},
            B * T, device, limit_s * 0.8,
        )  # fmt: skip
    out["transformers_fallbacks_to_torch"] = sorted(set(fallbacks))
    f = out["forward_tokens_per_s"]
    out["ratios"] = {
        "forward_deltalens_over_transformers": round(f["deltalens"] / f["transformers"], 3),
        "capture_time_over_plain_forward": round(f["deltalens"] / f["deltalens_capture"], 3),
    }
    out["target"] = TARGETS["qwen3_5"]
    return out


class _Stop(Exception):
    pass


def recipe(sizes: dict, device: str, limit_s: float) -> dict:
    from deltalens.training.config import load_config
    from deltalens.training.loop import train

    config = load_config(RECIPE)
    card = json.loads((RECIPE.parent / "config.json").read_text())["deltalens"]["training"]
    done, started = [0], time.perf_counter()

    def on_step(step, loss):
        done[0] = step
        if time.perf_counter() - started > limit_s:
            raise _Stop

    with tempfile.TemporaryDirectory() as run_dir:
        try:
            result = train(config, Path(run_dir) / "run", progress=False, on_step=on_step)
            finished, done[0] = True, result.step
        except _Stop:
            finished = False
    wall = time.perf_counter() - started
    steps = config.run.steps
    return {
        "recipe": str(RECIPE.relative_to(ROOT)),
        "steps": steps,
        "steps_done": done[0],
        "finished": finished,
        "wall_s_including_evals": round(wall, 1),
        "projected_wall_s": round(wall * steps / max(done[0], 1), 1),
        "card_cpu_train_wall_s": card.get("wall_time_s"),
        "card_machine": card.get("retrained_on"),
    }


# ---- main -------------------------------------------------------------------------------------------------


def facts() -> dict:
    import torch

    out = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if out["cuda"]:
        out["device"] = torch.cuda.get_device_name(0)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    for name, dist in (("triton", "triton"), ("fla", "flash-linear-attention"), ("transformers", "transformers"),
                       ("transformer_lens", "transformer-lens")):  # fmt: skip
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # an absent package is a fact, not a failure
            out[name] = "not installed"
    return out


def run(budget: float, smoke: bool) -> dict:
    sizes, device = SIZES["smoke" if smoke else "gpu"], "cpu" if smoke else "cuda"
    report: dict = {"dry_run": False, "cpu_smoke": smoke, "facts": facts(), "budget_s": budget}
    stack = contextlib.ExitStack()
    if smoke:  # fla's Triton modules and kernels as torch stand-ins (its model cannot run on a CPU otherwise)
        sys.path.insert(0, str(ROOT / "tests"))
        import fla.layers.delta_net as fla_layer
        import fla.ops.delta_rule as fla_ops
        from fla_on_cpu import fla_kernels_on_cpu, fla_modules_on_cpu

        stack.enter_context(fla_modules_on_cpu())
        stack.enter_context(fla_kernels_on_cpu())
        for name in ("chunk_delta_rule", "fused_recurrent_delta_rule"):  # fla's layer holds its own references
            stand_in = lambda *a, name=name, **k: getattr(fla_ops, name)(*a, **k)  # noqa: E731
            stack.enter_context(mock.patch.object(fla_layer, name, stand_in))
    clock = Budget(budget)
    with stack:
        for name, part in (("machine", machine), ("deltanet", deltanet), ("qwen3_5", qwen3_5), ("recipe", recipe)):
            left = clock.left()
            if left < 5:
                report[name] = {"skipped": "time budget"}
                continue
            report[name] = timed(part, sizes, device, min(SHARES[name] * budget, left))
    report["wall_s"] = round(clock.spent(), 1)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on one line (default: indented)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    parser.add_argument("--cpu-smoke", action="store_true", help="every part at toy sizes on a CPU (code check)")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for all parts (default 240)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    if args.cpu_smoke:
        report = run(args.budget, smoke=True)
    elif args.dry_run or not torch.cuda.is_available():
        reason = "--dry-run" if args.dry_run else "no CUDA device here (torch.cuda.is_available() is False)"
        report = {"dry_run": True, "reason": reason, "facts": facts(), "budget_s": args.budget,
                  "shares": SHARES, "would_run": plan(SIZES["gpu"]), "targets": TARGETS,
                  "command": "python3 benchmarks/gpu.py --json"}  # fmt: skip
    else:
        report = run(args.budget, smoke=False)
    return print_report(report, args.json, args.out)


if __name__ == "__main__":
    sys.exit(main())
