"""OLMo-Hybrid from transformers (model_type "olmo_hybrid"): Gated DeltaNet layers
with beta in [0, 2] between softmax-attention layers. The model is
transformers' own with our hooked recurrence swapped in (models/production/olmo_hybrid.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import ACT_NAMES, HOOKS, INTERVENTIONS, PROBES, weights
from deltalens.models.registry import Family, register

register(
    Family(
        arch="olmo_hybrid",
        display="OLMo-Hybrid",
        article="an OLMo-Hybrid model",
        model="deltalens.models.production.olmo_hybrid:build_model",
        class_name="HookedOlmoHybrid",
        config="deltalens.models.production.olmo_hybrid:make_config",
        act_names=ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=HOOKS,
        probes=PROBES,
        interventions=INTERVENTIONS,
        model_types=("olmo_hybrid",),
        weights=weights,
        load="deltalens.models.production.olmo_hybrid:load_model",
    )
)
