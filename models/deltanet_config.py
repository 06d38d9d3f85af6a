"""DeltaNet's config without importing fla (whose import costs ~6 s on a CPU and is needed only for
its CUDA kernels and for fla-format objects).

`FLA_DEFAULTS` are the arguments and defaults of `fla.models.DeltaNetConfig`; fla stays the source
of truth: tests/test_fla_compat.py checks that they equal its signature. `DeltaNetSettings` holds
them as attributes, like fla's config does (unknown keys are kept too, as Hugging Face keeps them),
and writes the same config.json fields. `to_fla_config` turns either kind into fla's own object.
"""
from __future__ import annotations

import warnings
from typing import Any

FLA_DEFAULTS: dict[str, Any] = {
    "attn_mode": "chunk", "hidden_size": 2048, "expand_k": 1.0, "expand_v": 1.0, "use_gate": False,
    "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4, "use_beta": True, "use_output_norm": True,
    "num_heads": 16, "qk_norm": "l2", "qk_activation": "silu", "max_position_embeddings": 2048, "hidden_ratio": 4,
    "intermediate_size": None, "hidden_act": "swish", "num_hidden_layers": 24, "norm_eps": 1e-06, "attn": None,
    "use_cache": True, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
    "initializer_range": 0.02, "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True,
    "fuse_linear_cross_entropy": False, "use_l2warp": False, "vocab_size": 32000, "attnres_block_size": None,
}
MODEL_TYPE = "delta_net"


class DeltaNetSettings:
    """The attributes HookedDeltaNet reads from a DeltaNetConfig, with fla's defaults."""

    model_type = MODEL_TYPE

    def __init__(self, **values: Any) -> None:
        for key, value in {**FLA_DEFAULTS, **values}.items():
            setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """The config.json fields (fla's arguments, extensions, and the model type)."""
        return {**vars(self), "model_type": MODEL_TYPE}

    def to_diff_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k not in FLA_DEFAULTS or FLA_DEFAULTS[k] != v}
        return {**out, "model_type": MODEL_TYPE}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeltaNetSettings) and vars(self) == vars(other)

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={v!r}" for k, v in self.to_diff_dict().items() if k != "model_type")
        return f"DeltaNetSettings({changed})"


def to_fla_config(config):
    """fla's `DeltaNetConfig` with the same values (imports fla, with its import warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.models import DeltaNetConfig
    if isinstance(config, DeltaNetConfig):
        return config
    return DeltaNetConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
