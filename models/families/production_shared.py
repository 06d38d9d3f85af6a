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


def register_production(arch: str, display: str, article: str, class_name: str, model_types: tuple[str, ...]) -> None:
    """Register the transformers family whose model, config and loader live in models/production/<arch>.py."""
    from deltalens.models.registry import Family, register

    where = f"deltalens.models.production.{arch}"
    register(
        Family(
            arch=arch,
            display=display,
            article=article,
            model=f"{where}:{class_name}.from_config",
            class_name=class_name,
            config=f"{where}:{class_name}.make_config",
            act_names=ACT_NAMES,
            layers_field="num_hidden_layers",
            delta_rule=True,
            hooks=HOOKS,
            probes=PROBES,
            interventions=INTERVENTIONS,
            model_types=model_types,
            weights=weights,
            load=f"{where}:{class_name}.from_folder",
        )
    )
