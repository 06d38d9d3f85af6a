"""Gated DeltaNet: fla's GatedDeltaNetForCausalLM, the delta rule with a decay gate alpha_t = exp(g_t)
and grouped value heads; the model is models/lm/gated_deltanet.py's HookedGatedDeltaNet."""

from __future__ import annotations

from functools import partial

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import GatedDeltaNetSettings
from deltalens.models.io.footprint import fla_lm_weights
from deltalens.models.registry import Family, register

register(
    Family(
        arch="gated_deltanet",
        display="Gated DeltaNet",
        article="a Gated DeltaNet",
        model="deltalens.models.lm.gated_deltanet:HookedGatedDeltaNet",
        class_name="HookedGatedDeltaNet",
        act_names=delta_rule.GATED_ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS + ", gate",
        probes=delta_rule.PROBES,
        interventions=delta_rule.INTERVENTIONS + ", gate clamp",
        model_types=(GatedDeltaNetSettings.model_type,),
        settings=GatedDeltaNetSettings,
        weights=partial(
            fla_lm_weights, defaults=GatedDeltaNetSettings.defaults, mixer=delta_rule.grouped_value_weights
        ),
        capabilities=delta_rule.CAPABILITIES | {"gate", "decay"},
    )
)
