"""DeltaNet: fla's DeltaNetForCausalLM, S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T, beta in
[0, 1] or (allow_neg_eigval) [0, 2]; the model is models/lm/deltanet.py's HookedDeltaNet."""

from __future__ import annotations

from functools import partial
from typing import Any

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import DELTANET_EXTENSION_KEYS, DeltaNetSettings
from deltalens.models.io.footprint import fla_lm_weights, number
from deltalens.models.registry import Family, register


def _mixer_weights(config: dict[str, Any], hidden: float) -> float:
    key, value = hidden * number(config, "expand_k", 1), hidden * number(config, "expand_v", 1)
    return delta_rule.projection_weights(config, hidden, key, value, factors=1)


register(
    Family(
        arch="deltanet",
        display="DeltaNet",
        article="a DeltaNet",
        model="deltalens.models.lm.deltanet:HookedDeltaNet",
        class_name="HookedDeltaNet",
        act_names=delta_rule.ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=delta_rule.HOOKS,
        probes=delta_rule.PROBES,
        interventions=delta_rule.INTERVENTIONS,
        model_types=(DeltaNetSettings.model_type,),
        settings=DeltaNetSettings,
        extension_keys=DELTANET_EXTENSION_KEYS,  # renormalised delta rule (models/layers/deltanet_mixer.py)
        weights=partial(fla_lm_weights, defaults=DeltaNetSettings.defaults, mixer=_mixer_weights),
        capabilities=delta_rule.CAPABILITIES,
    )
)
