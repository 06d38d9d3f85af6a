"""Tiny random transformers models of the production families in a Hugging Face cache, so the "Open a
production model" commands (and tests/models/test_production.py) run offline.

    python3 tests/production_standin.py [--hf-home DIR]
    HF_HOME=DIR HF_HUB_OFFLINE=1 deltalens census deltalens-standin/olmo-hybrid-tiny --text FILE

    put_standin(kind, cache) -> (hub id, snapshot)
    kind: a production family's model type ("qwen3_5_text", "olmo_hybrid", ..., "qwen3_5": the multimodal one)

Each is transformers' own model built from its family's tiny config (models/production/<arch>.py `tiny`: 4 layers
mixing its delta-rule and softmax-attention layers as the family does), its norms and gates jittered so that no
weight is trivial, saved with save_pretrained next to the shipped BPE stand-in's tokenizer, and copied into `cache` as
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


def kinds() -> dict[str, str]:
    """Every stand-in kind (a model type) -> its arch, from the registered production families."""
    from deltalens.models.production import standin_kinds

    return standin_kinds()


def tiny_config(kind: str, vocab_size: int = 320):
    """The tiny config of `kind`'s text model: its family's own (models/production/<arch>.py `tiny`)."""
    from deltalens.models.production import production_family

    return production_family(kinds()[kind]).tiny(vocab_size)


def tiny_model(kind: str, seed: int = 0):
    """transformers' own model of `kind`, random, in eval mode (eager attention); a multimodal kind ("qwen3_5")
    wraps the tiny text tower with its family's tiny_multimodal."""
    from deltalens.models.production import production_family

    torch.manual_seed(seed)
    family = production_family(kinds()[kind])
    config = tiny_config(kind)
    config._attn_implementation = "eager"
    if kind != family.model_types[0]:
        model = family.tiny_multimodal(config).eval()
    else:
        model = family.lm_class(config).eval()
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
    for kind in kinds():
        repo, snapshot = put_standin(kind, Path(args.hf_home) / "hub")
        print(f"{repo} -> {snapshot}")
    print(f"HF_HOME={args.hf_home} HF_HUB_OFFLINE=1 deltalens census deltalens-standin/olmo-hybrid-tiny")
    return 0


if __name__ == "__main__":
    sys.exit(main())
