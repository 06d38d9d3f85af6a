"""GLM-5 Next from transformers (model_type "glm5_next": GLM-5.3-Flash): Kimi-style KDA layers between latent
attention layers with a sparse-attention indexer, mixture-of-experts MLPs, and hyper-connections (the residual
stream is several streams). The model is transformers' own multimodal class, its only language model for the
type, with our hooked recurrence swapped in (models/production/glm5_next.py). Its text tower's type,
"glm5_next_text", is not read: transformers has no language model for it (a headless Glm5NextTextModel only)."""

from __future__ import annotations

from typing import Any

from deltalens.models.families.production_shared import CAPABILITIES, register_production, weights
from deltalens.models.io.footprint import number

DENSE_FIRST = 3  # transformers' GLM-5 Next: the first three layers dense where config.json lists no mlp_layer_types


def glm5_next_weights(config: dict[str, Any]) -> float:
    """The shared bound (every routed expert counted) with transformers' GLM-5 Next rule for which layers are
    dense: its mlp_layer_types where listed, else the first three; it reads no first_k_dense_replace."""
    nested = isinstance(config.get("text_config"), dict)
    text = dict(config["text_config"] if nested else config)
    if not isinstance(text.get("mlp_layer_types"), list):
        layers = int(number(text, "num_hidden_layers", 0))
        text.update(mlp_layer_types=None, first_k_dense_replace=min(DENSE_FIRST, layers), decoder_sparse_step=1,
                    mlp_only_layers=None)  # fmt: skip
    return weights({**config, "text_config": text} if nested else text)


# one residual stream the layers add to, and mixers read from it: neither holds with several streams
register_production(
    "glm5_next",
    "GLM-5 Next",
    "a GLM-5 Next model",
    "HookedGlm5Next",
    ("glm5_next",),
    capabilities=CAPABILITIES - {"residual", "lens"},
    bound=glm5_next_weights,
)
