"""Comba: fla's CombaForCausalLM, a scalar decay plus a low-rank correction (S_t = (alpha_t I - beta_t k_t p_t^T)
S_{t-1} + beta_t k_t v_t^T, beta in [0, 1]); the model is models/lm/comba.py's HookedComba."""

from __future__ import annotations

from functools import partial

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import CombaSettings
from deltalens.models.io.footprint import fla_lm_weights
from deltalens.models.registry import Family, register

register(
    Family(
        arch="comba",
        display="Comba",
        article="a Comba model",
        model="deltalens.models.lm.comba:HookedComba",
        class_name="HookedComba",
        act_names=(*delta_rule.GATED_ACT_NAMES[:4], "p", *delta_rule.GATED_ACT_NAMES[4:]),
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS + ", gate, p (the correction key)",
        probes=delta_rule.PROBES,
        interventions=delta_rule.INTERVENTIONS + ", gate clamp",
        model_types=(CombaSettings.model_type,),
        settings=CombaSettings,
        weights=partial(fla_lm_weights, defaults=CombaSettings.defaults, mixer=delta_rule.grouped_value_weights),
        capabilities=(delta_rule.CAPABILITIES - {"householder"}) | {"gate", "decay"},  # alpha I - beta k p^T
        transition="alpha I - beta k p^T (a correction key p_t, hook_p)",
    )
)
