"""OLMo-Hybrid from transformers (model_type "olmo_hybrid"): Gated DeltaNet layers
with beta in [0, 2] between softmax-attention layers. The model is
transformers' own with our hooked recurrence swapped in (models/production/olmo_hybrid.py)."""

from __future__ import annotations

from deltalens.models.families.production_shared import register_production

register_production("olmo_hybrid", "OLMo-Hybrid", "an OLMo-Hybrid model", "HookedOlmoHybrid", ("olmo_hybrid",))
