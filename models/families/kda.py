"""KDA: fla's KDAForCausalLM (Kimi Delta Attention, a decay per key channel; fla model_type "kda"); the
model is models/lm/kda.py's HookedKDA. Kimi Linear (transformers' "kimi_linear", with MLA and MoE layers)
is another family with the same recurrence (models/families/kimi_linear.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import KDASettings
from deltalens.models.io.footprint import fla_lm_weights, number
from deltalens.models.registry import Family, register


def _mixer_weights(config: dict[str, Any], hidden: float) -> float:
    """q, k, v, o and the two low-rank gates' first projections (hidden x d_v each); the rest is smaller."""
    heads, head_dim = number(config, "num_heads", 1), number(config, "head_dim", 0)
    value_heads = number(config, "num_v_heads", heads)
    head_v = head_dim * number(config, "expand_v", 1)
    gates = 2 * hidden * head_v
    return delta_rule.projection_weights(config, hidden, heads * head_dim, value_heads * head_v, factors=1) + gates


register(
    Family(
        arch="kda",
        display="KDA",
        article="a KDA model",
        model="deltalens.models.lm.kda:HookedKDA",
        class_name="HookedKDA",
        act_names=delta_rule.GATED_ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS + ", gate (per key channel)",
        probes=delta_rule.PROBES,
        interventions=delta_rule.INTERVENTIONS + ", gate clamp (per head, every channel)",
        model_types=(KDASettings.model_type,),
        settings=KDASettings,
        weights=partial(fla_lm_weights, defaults=KDASettings.defaults, mixer=_mixer_weights),
        capabilities=delta_rule.CAPABILITIES | {"gate", "decay"},
    )
)
