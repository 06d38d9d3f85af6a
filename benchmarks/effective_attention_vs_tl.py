"""The exact effective attention (deltalens) against TransformerLens 4.3's heuristic on one random Qwen3.5
model: how well each rebuilds every Gated DeltaNet layer's recurrence output (relative error, fp32).

    python3 benchmarks/effective_attention_vs_tl.py
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the offline stand-in
from production_standin import TOKENIZER, tiny_model  # noqa: E402


def main() -> int:
    from transformer_lens.model_bridge import TransformerBridge

    import deltalens as dl
    from deltalens.models.production.qwen3_5 import HookedQwen3_5

    with tempfile.TemporaryDirectory() as staging:
        folder = Path(staging) / "qwen3_5"
        tiny_model("qwen3_5_text").save_pretrained(folder)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy2(TOKENIZER / name, folder / name)
        bridge = TransformerBridge.boot_transformers(str(folder), device="cpu", dtype=torch.float32)
        ours = HookedQwen3_5.from_folder(
            folder, HookedQwen3_5.make_config(json.loads((folder / "config.json").read_text()))
        )
    tokens = torch.randint(2, 300, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, theirs_cache = bridge.run_with_cache(tokens, use_cache=False)
        _, cache = ours.run_with_cache(tokens)
    for layer in ours.delta_layers:
        z, v = cache["z", layer].double(), cache["v", layer].double()  # (B, T, H, d_v)
        heuristic = bridge.blocks[layer].linear_attn.compute_effective_attention(theirs_cache, layer).double()
        exact = dl.effective_attention(ours, tokens, layer, cache=cache, dtype=torch.float64)
        same = (theirs_cache[f"blocks.{layer}.linear_attn.hook_recurrence_out"].reshape(z.shape) - z).abs().max()
        errors = {
            name: float((torch.einsum("bhqk,bkhd->bqhd", A, v) - z).norm() / z.norm())
            for name, A in (("deltalens", exact), ("transformer_lens", heuristic))
        }
        print(json.dumps({"layer": layer, **errors, "recurrence_out_vs_hook_z": float(same)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
