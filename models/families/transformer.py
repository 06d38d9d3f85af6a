"""The Transformer baseline: TransformerLens's own native Transformer (a TransformerBridge) built by
models/lm/transformer.py from its TransformerConfig."""

from __future__ import annotations

from typing import Any

from deltalens.models.io.footprint import number
from deltalens.models.registry import Family, register


def _weights(config: dict[str, Any]) -> float:
    """Embed and unembed, then per layer W_Q, W_K, W_V, W_O and the MLP's two matrices."""
    d, vocab = number(config, "d_model", 64), number(config, "d_vocab", 64)
    heads = number(config, "n_heads", 4)
    d_head = number(config, "d_head", d // max(heads, 1))
    d_mlp = number(config, "d_mlp", 4 * d)
    return 2 * vocab * d + number(config, "n_layers", 2) * (4 * d * heads * d_head + 2 * d * d_mlp)


register(
    Family(
        arch="transformer",
        display="Transformer",
        article="a Transformer",
        model="deltalens.models.lm.transformer:build_transformer",
        class_name="TransformerBridge",
        config="deltalens.models.lm.transformer:transformer_config_from_dict",
        act_names=(
            "embed",
            "resid_pre",
            "q",
            "k",
            "v",
            "attn_scores",
            "pattern",
            "z",
            "attn_out",
            "resid_mid",
            "mlp_out",
            "resid_post",
            "normalized",
        ),  # fmt: skip
        layers_field="n_layers",
        hooks="q, k, v, attn_scores, pattern, z",
        probes="linear probes",
        interventions="head ablation",
        vocab_field="d_vocab",
        weights=_weights,
        capabilities=frozenset({"residual", "heads", "attention"}),
    )
)
