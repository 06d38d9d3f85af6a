"""Production delta-rule LMs from transformers, opened with our hooks: Qwen3.5 (`qwen3_5_text`, and the
text tower of `qwen3_5`), Qwen3-Next (`qwen3_next`), OLMo-Hybrid (`olmo_hybrid`, beta in [0, 2]) and Kimi
Linear (`kimi_linear`, Kimi Delta Attention: a decay per key channel).

One module per family (qwen3_5.py, olmo_hybrid.py, ...) holds its hooked delta-rule layer, its model class
and its `FAMILY` record (family.py); models/families/<family>.py registers it with the registry, so
models.load, dl.load (folders and Hub ids) and the CLI open it as any other family. What they share:
hooked_gdn.py (the Gated DeltaNet layer with our recurrence), hooked_kda.py (the same for KDA),
attention.py (attention hooks) and lm.py (the hooked model around transformers' own).
"""

from __future__ import annotations

import importlib
from typing import Any


def production_family(arch: str) -> Any:
    """The ProductionFamily of a registered production arch (imports its module: transformers)."""
    return importlib.import_module(f"{__name__}.{arch}").FAMILY


def standin_kinds() -> dict[str, str]:
    """Every model type an offline stand-in is made of (tests/production_standin.py) -> its arch: each
    production family's text model type, and its multimodal one where the family has a tiny multimodal model."""
    from deltalens.models import families  # noqa: F401  (registers the built-in families)
    from deltalens.models.families.production_shared import PRODUCTION

    kinds = {}
    for arch in PRODUCTION:
        family = production_family(arch)
        kinds[family.model_types[0]] = arch
        if family.tiny_multimodal is not None:
            kinds[family.model_types[1]] = arch
    return kinds
