"""What the delta-rule families share in their records: hook names, the family table's text, and the
weights of the mixer's projections for the memory bound."""

from __future__ import annotations

from typing import Any

from deltalens.models.io.footprint import number

# act_name's short names, in forward order; the gated models add "gate" after "beta"
ACT_NAMES = (
    "embed", "resid_pre", "q", "k", "v", "beta_logit", "beta", "state", "z",
    "attn_out", "resid_mid", "mlp_out", "resid_post", "scale", "normalized",
)  # fmt: skip
GATED_ACT_NAMES = (*ACT_NAMES[:7], "gate", *ACT_NAMES[7:])
HOOKS = "q, k, v, beta_logit, beta, state, z"
PROBES = "eigenvalues, state rank and subspaces, linear probes, belief decay"
INTERVENTIONS = "beta range, head ablation, state patching"
# what an fla delta-rule family's models can have (models/capabilities.py); a hybrid (fla's `attn`) adds attention
CAPABILITIES = frozenset(
    {"delta", "keys", "householder", "one_pattern", "state", "heads", "attention", "residual", "lens"}
)


def projection_weights(config: dict[str, Any], hidden: float, key: float, value: float, factors: float) -> float:
    """q and o, plus k and v once per Householder factor: hidden x (key + factors * key + factors * value + value)."""
    del config
    return hidden * (key * (1 + factors) + value * (factors + 1))


def grouped_value_weights(config: dict[str, Any], hidden: float) -> float:
    """One mixer's projections with grouped value heads (Gated DeltaNet, Comba): num_heads x head_dim keys,
    num_v_heads x head_dim x expand_v values, one factor."""
    heads, head_dim = number(config, "num_heads", 1), number(config, "head_dim", 0)
    value_heads = number(config, "num_v_heads", heads)
    value = value_heads * head_dim * number(config, "expand_v", 1)
    return projection_weights(config, hidden, heads * head_dim, value, factors=1)
