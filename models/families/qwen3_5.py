"""Qwen3.5 from transformers (model_type "qwen3_5_text"): three Gated DeltaNet
layers to one gated softmax-attention layer, beta in [0, 1]. The model is
transformers' own with our hooked recurrence swapped in (models/production/qwen3_5.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import register_production

register_production("qwen3_5", "Qwen3.5", "a Qwen3.5 model", "HookedQwen3_5", ("qwen3_5_text", "qwen3_5"))
