"""Qwen3.5 from transformers (model_type "qwen3_5_text"): three Gated DeltaNet
layers to one gated softmax-attention layer, beta in [0, 1]. The model is
transformers' own with our hooked recurrence swapped in (models/production/qwen3_5.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import ACT_NAMES, HOOKS, INTERVENTIONS, PROBES, weights
from deltalens.models.registry import Family, register

register(
    Family(
        arch="qwen3_5",
        display="Qwen3.5",
        article="a Qwen3.5 model",
        model="deltalens.models.production.qwen3_5:build_model",
        class_name="HookedQwen3_5",
        config="deltalens.models.production.qwen3_5:make_config",
        act_names=ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=HOOKS,
        probes=PROBES,
        interventions=INTERVENTIONS,
        model_types=(
            "qwen3_5_text",
            "qwen3_5",
        ),
        weights=weights,
        load="deltalens.models.production.qwen3_5:load_model",
    )
)
