"""Qwen3-Next from transformers (model_type "qwen3_next"): Gated DeltaNet and gated softmax-attention
layers with mixture-of-experts MLPs, beta in [0, 1]. The model is transformers' own with our hooked
recurrence swapped in (models/production/qwen3_next.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import ACT_NAMES, HOOKS, INTERVENTIONS, PROBES, weights
from deltalens.models.registry import Family, register

register(
    Family(
        arch="qwen3_next",
        display="Qwen3-Next",
        article="a Qwen3-Next model",
        model="deltalens.models.production.qwen3_next:build_model",
        class_name="HookedQwen3Next",
        config="deltalens.models.production.qwen3_next:make_config",
        act_names=ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks=HOOKS,
        probes=PROBES,
        interventions=INTERVENTIONS,
        model_types=("qwen3_next",),
        weights=weights,
        load="deltalens.models.production.qwen3_next:load_model",
    )
)
