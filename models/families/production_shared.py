"""What the transformers production families (Qwen3.5, OLMo-Hybrid) share in their records: the hooks
they have and a lower bound on their weights from config.json alone (no torch)."""

from __future__ import annotations

from typing import Any

from deltalens.models.io.footprint import number

# hooks of the delta-rule layers, then of the attention layers (models/production/lm.py lists them all)
ACT_NAMES = (
    "embed", "resid_pre", "q", "k", "v", "beta_logit", "beta", "gate", "state", "z", "attn_scores", "pattern",
    "attn_out", "mlp_out", "resid_post", "normalized",
)  # fmt: skip
HOOKS = (
    "q, k, v, beta_logit, beta, gate, state, z on delta-rule layers; "
    "rot_q, rot_k, v, attn_scores, pattern, z on attention layers"
)
PROBES = "eigenvalues, state rank and subspaces, linear probes, transition census"
INTERVENTIONS = "beta range, head ablation, state patching, gate clamp"


def weights(config: dict[str, Any]) -> float:
    """Embeddings (twice unless tied) and each layer's MLP (one expert's, for MoE), the text tower's fields where
    there is one."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    hidden, vocab = number(text, "hidden_size", 0), number(text, "vocab_size", 0)
    mlp = 3 * hidden * number(text, "intermediate_size", 0)
    if text.get("num_experts"):  # mixture-of-experts layers: the experts' width, not the dense one
        mlp = 3 * hidden * number(text, "moe_intermediate_size", 0)
    return vocab * hidden * (1 if text.get("tie_word_embeddings") else 2) + number(text, "num_hidden_layers", 0) * mlp
