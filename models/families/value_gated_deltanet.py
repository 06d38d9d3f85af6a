"""The value-gated DeltaNet: DeltaNet with a gate on its state's value side, S_t = (I - beta_t k_t k_t^T) S_{t-1}
Diag(gamma_t) + beta_t k_t v_t^T (deltalens's own, for the PFSA-SR drain question); the model is
models/lm/value_gated_deltanet.py's HookedValueGatedDeltaNet."""

from __future__ import annotations

from typing import Any

from deltalens.models.families import delta_rule
from deltalens.models.io.footprint import number
from deltalens.models.registry import Family, register


def _weights(config: dict[str, Any]) -> float:
    """Embedding, head, and per layer the mixer's projections (the gate's vg_proj counted) and the MLP."""
    vocab, hidden = number(config, "vocab_size", 64), number(config, "hidden_size", 64)
    layers = number(config, "num_hidden_layers", 2)
    key, value = hidden * number(config, "expand_k", 1), hidden * number(config, "expand_v", 1)
    mixer = delta_rule.projection_weights(config, hidden, key, value, factors=1) + hidden * value
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * mixer


register(
    Family(
        arch="value_gated_deltanet",
        display="value-gated DeltaNet",
        article="a value-gated DeltaNet",
        model="deltalens.models.lm.value_gated_deltanet:HookedValueGatedDeltaNet",
        class_name="HookedValueGatedDeltaNet",
        config="deltalens.models.lm.value_gated_deltanet:value_gated_config_from_dict",
        act_names=(*delta_rule.ACT_NAMES[:7], "vgate", *delta_rule.ACT_NAMES[7:]),
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS + ", vgate",
        probes=delta_rule.PROBES,
        interventions=delta_rule.INTERVENTIONS,
        weights=_weights,
        capabilities=frozenset({"residual", "lens", "delta", "keys", "householder", "state", "heads"}),
    )
)
