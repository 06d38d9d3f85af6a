"""Kimi Linear from transformers (model_type "kimi_linear"): Kimi Delta Attention (per-channel decay) and
latent softmax-attention layers with mixture-of-experts MLPs, beta in [0, 1]. The model is transformers'
own with our hooked recurrence swapped in (models/production/kimi_linear.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import register_production

register_production("kimi_linear", "Kimi Linear", "a Kimi Linear model", "HookedKimiLinear", ("kimi_linear",))
