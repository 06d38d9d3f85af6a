"""Tiny random transformers models of the production families in a Hugging Face cache, so the "Open a
production model" commands (and tests/models/test_production.py) run offline.

    python3 scripts/production_standin.py [--hf-home DIR]
    HF_HOME=DIR HF_HUB_OFFLINE=1 deltalens census deltalens-standin/olmo-hybrid-tiny --text FILE

    put_standin(kind, cache) -> (hub id, snapshot)
    kind: "qwen3_5_text" | "olmo_hybrid" | "qwen3_next" | "qwen3_5" | "kimi_linear"

Each is transformers' own model built from its own config class (4 layers mixing Gated DeltaNet, or Kimi
Delta Attention, and softmax attention as the family does), its norms and gates jittered so that no weight is trivial,
saved with save_pretrained next to the shipped BPE stand-in's tokenizer, and copied into `cache` as
deltalens-standin/<kind>-tiny.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from deltalens.models.io.hub import put_in_cache

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "checkpoints" / "s3-deltanet-bpe"
LAYERS = {  # the text models; "qwen3_5" (multimodal) wraps the qwen3_5_text tower
    "qwen3_5_text": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "olmo_hybrid": ["linear_attention", "full_attention", "linear_attention", "linear_attention"],
    "qwen3_next": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "kimi_linear": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
}


def tiny_kimi_config(vocab_size: int = 320):
    """KDA (4 heads of 16) and one MLA layer (4 heads, rank-16 latent); a dense MLP on layer 0 and MoE after it
    (4 experts, 2 per token, one shared), as the release's first_k_dense_replace = 1."""
    from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig

    return KimiLinearConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        linear_head_dim=16, linear_num_heads=4, linear_conv_kernel_dim=4, layer_types=LAYERS["kimi_linear"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], bos_token_id=1, pad_token_id=0, eos_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip


def tiny_config(kind: str, vocab_size: int = 320):
    if kind == "kimi_linear":
        return tiny_kimi_config(vocab_size)
    common = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=4, layer_types=LAYERS[kind], bos_token_id=1, pad_token_id=0, eos_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip
    if kind == "qwen3_5_text":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

        return Qwen3_5TextConfig(head_dim=16, **common)
    if kind == "qwen3_next":  # mixture-of-experts MLPs on every layer: 4 experts, 2 per token, a shared one
        from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig

        moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
        return Qwen3NextConfig(head_dim=16, **moe, **common)
    from transformers.models.olmo_hybrid.configuration_olmo_hybrid import OlmoHybridConfig

    return OlmoHybridConfig(**common)


def tiny_model(kind: str, seed: int = 0):
    """transformers' own model of `kind`, random, in eval mode (eager attention); "qwen3_5" is the
    multimodal model (a one-block vision tower beside the text tower)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    if kind == "qwen3_5":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForConditionalGeneration

        vision = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64)
        text = tiny_config("qwen3_5_text").to_dict()
        config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=300, video_token_id=301,
                               vision_start_token_id=302, vision_end_token_id=303)  # fmt: skip
        config._attn_implementation = "eager"
        model = Qwen3_5ForConditionalGeneration(config).eval()
    else:
        config = tiny_config(kind)
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # jitter the norms and the beta projections: ones and tiny logits hide mistakes
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            if name.split(".")[-2:-1] in (["in_proj_b"], ["b_proj"], ["in_proj_ba"]):  # not KDA's f_b_proj, g_b_proj
                p.mul_(30.0)  # beta spread over its whole range (beyond 1 for OLMo-Hybrid)
    return model


def put_standin(kind: str, cache: Path, seed: int = 0) -> tuple[str, Path]:
    repo = f"deltalens-standin/{kind.replace('_', '-')}-tiny"
    with tempfile.TemporaryDirectory() as staging:
        folder = Path(staging) / "model"
        tiny_model(kind, seed).save_pretrained(folder)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy2(TOKENIZER / name, folder / name)
        return repo, put_in_cache(folder, repo, cache=cache)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    parser.add_argument("--hf-home", default=default, help=f"the HF_HOME to write into (default {default})")
    args = parser.parse_args(argv)
    for kind in (*LAYERS, "qwen3_5"):
        repo, snapshot = put_standin(kind, Path(args.hf_home) / "hub")
        print(f"{repo} -> {snapshot}")
    print(f"HF_HOME={args.hf_home} HF_HUB_OFFLINE=1 deltalens census deltalens-standin/olmo-hybrid-tiny")
    return 0


if __name__ == "__main__":
    sys.exit(main())
