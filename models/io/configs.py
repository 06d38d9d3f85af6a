"""The configs of fla's delta-rule family without importing fla (whose import costs ~6 s on a CPU and
is needed only for its CUDA kernels and for fla-format objects).

One `FlaSettings` subclass per architecture holds the arguments and defaults of fla's config class
(`fla.models.DeltaNetConfig`, `GatedDeltaNetConfig`, `GatedDeltaProductConfig`) as attributes, like
fla's config does (unknown keys are kept too, as Hugging Face keeps them), and writes the same
config.json fields. fla stays the source of truth: tests/test_fla_compat.py checks every default
table against fla's signature. `to_fla_config` turns one into fla's own object.

    arch            settings class               fla config / model class                  model_type
    deltanet        DeltaNetSettings             DeltaNetConfig / DeltaNetForCausalLM       delta_net
    gated_deltanet  GatedDeltaNetSettings        GatedDeltaNetConfig / ...ForCausalLM        gated_deltanet
    deltaproduct    GatedDeltaProductSettings    GatedDeltaProductConfig / ...ForCausalLM    gated_deltaproduct
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

# Fields every config of the family shares (the LM around the mixer).
_COMMON: dict[str, Any] = {
    "attn_mode": "chunk",
    "hidden_size": 2048,
    "max_position_embeddings": 2048,
    "hidden_ratio": 4,
    "intermediate_size": None,
    "hidden_act": "swish",
    "norm_eps": 1e-06,
    "attn": None,
    "use_cache": True,
    "pad_token_id": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "fuse_norm": True,
    "fuse_swiglu": True,
    "fuse_cross_entropy": True,
    "fuse_linear_cross_entropy": False,
    "use_l2warp": False,
    "vocab_size": 32000,
    "attnres_block_size": None,
}

FLA_DEFAULTS: dict[str, Any] = {  # fla.models.DeltaNetConfig
    **_COMMON,
    "expand_k": 1.0,
    "expand_v": 1.0,
    "use_gate": False,
    "use_short_conv": True,
    "allow_neg_eigval": False,
    "conv_size": 4,
    "use_beta": True,
    "use_output_norm": True,
    "num_heads": 16,
    "qk_norm": "l2",
    "qk_activation": "silu",
    "num_hidden_layers": 24,
}
GATED_DELTANET_DEFAULTS: dict[str, Any] = {  # fla.models.GatedDeltaNetConfig
    **_COMMON,
    "expand_v": 2.0,
    "use_gate": True,
    "use_short_conv": True,
    "allow_neg_eigval": False,
    "conv_size": 4,
    "head_dim": 256,
    "num_heads": 6,
    "num_v_heads": None,
    "num_hidden_layers": 21,
    "output_gate_activation": "swish",
}
GATED_DELTAPRODUCT_DEFAULTS: dict[str, Any] = {  # fla.models.GatedDeltaProductConfig
    **_COMMON,
    "conv_size": 4,
    "head_dim": 256,
    "num_heads": 6,
    "expand_v": 2.0,
    "use_output_gate": True,
    "use_short_conv": True,
    "num_hidden_layers": 21,
    "use_forget_gate": False,
    "allow_neg_eigval": False,
    "num_householder": 1,
}


class FlaSettings:
    """The attributes a Hooked model reads from an fla config, with fla's defaults."""

    defaults: ClassVar[dict[str, Any]] = {}
    model_type: ClassVar[str] = ""
    fla_config: ClassVar[str] = ""  # class names in fla.models
    fla_model: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        for key, value in {**self.defaults, **values}.items():
            setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """The config.json fields (fla's arguments, extensions, and the model type)."""
        return {**vars(self), "model_type": self.model_type}

    def to_diff_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k not in self.defaults or self.defaults[k] != v}
        return {**out, "model_type": self.model_type}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={v!r}" for k, v in self.to_diff_dict().items() if k != "model_type")
        return f"{type(self).__name__}({changed})"


class DeltaNetSettings(FlaSettings):
    defaults = FLA_DEFAULTS
    model_type = "delta_net"
    fla_config, fla_model = "DeltaNetConfig", "DeltaNetForCausalLM"


class GatedDeltaNetSettings(FlaSettings):
    defaults = GATED_DELTANET_DEFAULTS
    model_type = "gated_deltanet"
    fla_config, fla_model = "GatedDeltaNetConfig", "GatedDeltaNetForCausalLM"


class GatedDeltaProductSettings(FlaSettings):
    defaults = GATED_DELTAPRODUCT_DEFAULTS
    model_type = "gated_deltaproduct"
    fla_config, fla_model = "GatedDeltaProductConfig", "GatedDeltaProductForCausalLM"


# deltalens architecture name -> its settings class
SETTINGS: dict[str, type[FlaSettings]] = {
    "deltanet": DeltaNetSettings,
    "gated_deltanet": GatedDeltaNetSettings,
    "deltaproduct": GatedDeltaProductSettings,
}
ARCH_OF_MODEL_TYPE = {cls.model_type: arch for arch, cls in SETTINGS.items()}


def fla_class(name: str):
    """A class of fla.models by name (imports fla, with its import warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import fla.models
    return getattr(fla.models, name)


def to_fla_config(config):
    """fla's config object (DeltaNetConfig, ...) with the same values as `config`."""
    if not isinstance(config, FlaSettings):
        return config  # already fla's (or a transformers config)
    cls = fla_class(config.fla_config)
    return cls(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
