"""Qwen3-Next from transformers (model_type "qwen3_next"): Gated DeltaNet and gated softmax-attention
layers with mixture-of-experts MLPs, beta in [0, 1]. The model is transformers' own with our hooked
recurrence swapped in (models/production/qwen3_next.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import register_production

register_production("qwen3_next", "Qwen3-Next", "a Qwen3-Next model", "HookedQwen3Next", ("qwen3_next",))
