"""DeltaProduct: fla's GatedDeltaProductForCausalLM, n_h = num_householder Householder factors per token,
with or without the forget gate; the model is models/lm/deltaproduct.py's HookedDeltaProduct."""

from __future__ import annotations

from functools import partial
from typing import Any

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import GatedDeltaProductSettings
from deltalens.models.io.footprint import fla_lm_weights, number
from deltalens.models.registry import Family, register


def _mixer_weights(config: dict[str, Any], hidden: float) -> float:
    heads, head_dim = number(config, "num_heads", 1), number(config, "head_dim", 0)
    value = heads * head_dim * number(config, "expand_v", 1)
    factors = number(config, "num_householder", 1)
    return delta_rule.projection_weights(config, hidden, heads * head_dim, value, factors=factors)


register(
    Family(
        arch="deltaproduct",
        display="DeltaProduct",
        article="a DeltaProduct",
        model="deltalens.models.lm.deltaproduct:HookedDeltaProduct",
        class_name="HookedDeltaProduct",
        act_names=delta_rule.GATED_ACT_NAMES,  # gate: with use_forget_gate
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS + "; k, v and beta per factor; gate when gated",
        probes=delta_rule.PROBES + ", per-token product (eigenvalues, the permutation it applies)",
        interventions="beta range (per factor), head ablation, state patching, gate clamp when gated",
        model_types=(GatedDeltaProductSettings.model_type,),
        settings=GatedDeltaProductSettings,
        weights=partial(fla_lm_weights, defaults=GatedDeltaProductSettings.defaults, mixer=_mixer_weights),
        capabilities=delta_rule.CAPABILITIES | {"gate", "decay", "factors"},
    )
)
