"""Qwen3.5-MoE from transformers (model_type "qwen3_5_moe_text"; Qwen3.5-35B-A3B and larger, Qwen3.6 MoE):
Qwen3.5's layers with mixture-of-experts MLPs. The model is transformers' own with our hooked recurrence
swapped in (models/production/qwen3_5_moe.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import register_production

register_production(
    "qwen3_5_moe", "Qwen3.5-MoE", "a Qwen3.5-MoE model", "HookedQwen3_5Moe", ("qwen3_5_moe_text", "qwen3_5_moe")
)
