"""The configs of fla's delta-rule family without importing fla (whose import costs ~6 s on a CPU and
is needed only for its CUDA kernels and for fla-format objects).

One dataclass per architecture holds the arguments and defaults of fla's config class
(`fla.models.DeltaNetConfig`, `GatedDeltaNetConfig`, `GatedDeltaProductConfig`, `KDAConfig`) as typed fields, so
`config.num_heads` is an `int` to an IDE. Like fla's (Hugging Face) configs they accept and keep
unknown keys as attributes (deltalens's `state_norm_every`, a config.json's "deltalens" section), and
write the same config.json fields. The known fields are checked once, at construction
(models/io/config_checks.py). fla stays the source of truth: tests/models/test_fla_compat.py checks
every default table against fla's signature. `to_fla_config` turns one into fla's own object. A new
fla-format family declares its class with `@settings_class` and names it in its record
(models/families/, the registry's `settings`).

    arch            settings class               fla config / model class                  model_type
    deltanet        DeltaNetSettings             DeltaNetConfig / DeltaNetForCausalLM       delta_net
    gated_deltanet  GatedDeltaNetSettings        GatedDeltaNetConfig / ...ForCausalLM        gated_deltanet
    deltaproduct    GatedDeltaProductSettings    GatedDeltaProductConfig / ...ForCausalLM    gated_deltaproduct
    kda             KDASettings                  KDAConfig / KDAForCausalLM                 kda
    comba           CombaSettings                CombaConfig / CombaForCausalLM             comba
    rwkv7           RWKV7Settings                RWKV7Config / RWKV7ForCausalLM             rwkv7
"""

import warnings
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from deltalens.models.io.config_checks import check_fields
from deltalens.models.layers.attention_spec import parse_attention


@dataclass(init=False, eq=False, repr=False)
class FlaSettings:
    """The fields every config of the family shares (the LM around the mixer), with fla's defaults.

    `FlaSettings(**values)`: fla's defaults, then `values`; keys that are not fields are kept as
    attributes too (as Hugging Face keeps them), after the fields, in the order given.
    """

    defaults: ClassVar[dict[str, Any]] = {}  # field -> fla's default; filled below for each subclass
    model_type: ClassVar[str] = ""
    fla_config: ClassVar[str] = ""  # class names in fla.models
    fla_model: ClassVar[str] = ""

    attn_mode: str = "chunk"
    hidden_size: int = 2048  # d_model
    max_position_embeddings: int = 2048
    hidden_ratio: float | None = 4  # MLP width / d_model (before fla's rounding to 256)
    intermediate_size: int | None = None
    hidden_act: str = "swish"
    norm_eps: float = 1e-06
    attn: dict[str, Any] | list[dict[str, Any]] | None = None  # fla's hybrid attention layers
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    fuse_norm: bool = True
    fuse_swiglu: bool = True
    fuse_cross_entropy: bool = True
    fuse_linear_cross_entropy: bool = False
    use_l2warp: bool = False
    vocab_size: int = 32000
    attnres_block_size: int | None = None

    def __init__(self, **values: Any) -> None:
        for known in fields(self):
            setattr(self, known.name, known.default)
        for key, value in values.items():
            setattr(self, key, value)
        from deltalens.models.registry import family_of_model_type  # which reads this module's classes

        named = family_of_model_type(self.model_type)
        check_fields(self, named.arch if named is not None else type(self).__name__)
        # hybrids: fla's defaults filled in fla's way, so the config.json written equals fla's
        self.attn = parse_attention(self.attn, vars(self)["num_hidden_layers"])  # every family's settings have it

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


S = TypeVar("S", bound=type[FlaSettings])


def settings_class(cls: S) -> S:
    """Make `cls` (a FlaSettings subclass declaring fla's fields) a settings dataclass with its `defaults`."""
    dataclass(init=False, eq=False, repr=False)(cls)  # in place: dataclass returns the class it was given
    cls.defaults = {known.name: known.default for known in fields(cls)}
    return cls


@settings_class
class DeltaNetSettings(FlaSettings):
    """fla.models.DeltaNetConfig: the delta rule S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T."""

    model_type: ClassVar[str] = "delta_net"
    fla_config: ClassVar[str] = "DeltaNetConfig"
    fla_model: ClassVar[str] = "DeltaNetForCausalLM"

    expand_k: float = 1.0  # d_k per head = hidden_size * expand_k / num_heads
    expand_v: float = 1.0
    use_gate: bool = False  # output gate
    use_short_conv: bool = True
    allow_neg_eigval: bool = False  # beta in [0, 2] instead of [0, 1]
    conv_size: int = 4
    use_beta: bool = True
    use_output_norm: bool = True
    num_heads: int = 16
    qk_norm: str = "l2"
    qk_activation: str = "silu"
    num_hidden_layers: int = 24


@settings_class
class GatedDeltaNetSettings(FlaSettings):
    """fla.models.GatedDeltaNetConfig: the delta rule with a decay gate alpha_t = exp(g_t)."""

    model_type: ClassVar[str] = "gated_deltanet"
    fla_config: ClassVar[str] = "GatedDeltaNetConfig"
    fla_model: ClassVar[str] = "GatedDeltaNetForCausalLM"

    expand_v: float = 2.0
    use_gate: bool = True  # output gate
    use_short_conv: bool = True
    allow_neg_eigval: bool = False
    conv_size: int = 4
    head_dim: int = 256  # d_k per head
    num_heads: int = 6
    num_v_heads: int | None = None  # grouped value heads (None = num_heads)
    num_hidden_layers: int = 21
    output_gate_activation: str = "swish"


@settings_class
class GatedDeltaProductSettings(FlaSettings):
    """fla.models.GatedDeltaProductConfig: n_h = num_householder Householder factors per token."""

    model_type: ClassVar[str] = "gated_deltaproduct"
    fla_config: ClassVar[str] = "GatedDeltaProductConfig"
    fla_model: ClassVar[str] = "GatedDeltaProductForCausalLM"

    conv_size: int = 4
    head_dim: int = 256
    num_heads: int = 6
    expand_v: float = 2.0
    use_output_gate: bool = True
    use_short_conv: bool = True
    num_hidden_layers: int = 21
    use_forget_gate: bool = False
    allow_neg_eigval: bool = False
    num_householder: int = 1


@settings_class
class KDASettings(FlaSettings):
    """fla.models.KDAConfig: Kimi Delta Attention, a decay per key channel (models/layers/kda_mixer.py).
    KDAConfig has no fuse_linear_cross_entropy (its LM fuses by fuse_cross_entropy); the field is kept
    here as for every family, and fla keeps it as an ignored attribute."""

    model_type: ClassVar[str] = "kda"
    fla_config: ClassVar[str] = "KDAConfig"
    fla_model: ClassVar[str] = "KDAForCausalLM"

    expand_v: float = 1.0
    use_short_conv: bool = True
    allow_neg_eigval: bool = False
    safe_gate: bool = False  # fla's kernel hint for gates in [lower_bound, 0); needs lower_bound
    lower_bound: float | None = None  # set: g = lower_bound * sigmoid(exp(A_log) (f + dt_bias)), not softplus
    conv_size: int = 4
    head_dim: int = 128
    num_heads: int = 16
    num_v_heads: int | None = None
    num_hidden_layers: int = 24


FLA_DEFAULTS: dict[str, Any] = DeltaNetSettings.defaults  # fla.models.DeltaNetConfig
GATED_DELTANET_DEFAULTS: dict[str, Any] = GatedDeltaNetSettings.defaults  # fla.models.GatedDeltaNetConfig
GATED_DELTAPRODUCT_DEFAULTS: dict[str, Any] = GatedDeltaProductSettings.defaults  # fla.models.GatedDeltaProductConfig

# deltalens's own config fields of DeltaNet (its family's `extension_keys`). fla's configs keep unknown
# keyword arguments as attributes and write them to config.json, so these ride along in the same config
# object; fla itself ignores them (its DeltaNetForCausalLM runs the plain delta rule on the same weights).
DELTANET_EXTENSION_KEYS = ("state_norm_every",)


def config_keys(arch: str) -> list[str]:
    """The keys `models.build(arch, ...)` takes: fla's arguments, then deltalens's extensions."""
    from deltalens.models.registry import family  # which reads this module's classes

    return family(arch).config_keys() or []


def fla_model_config(config, arch: str = "deltanet") -> dict[str, Any]:
    """The JSON-able fla config arguments (and deltalens extensions) of an fla config (object or dict)."""
    as_dict = config if isinstance(config, dict) else config.to_dict()
    return {key: as_dict[key] for key in config_keys(arch) if key in as_dict}


def deltanet_model_config(config) -> dict[str, Any]:
    """`fla_model_config` of a DeltaNet config."""
    return fla_model_config(config, "deltanet")


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


@settings_class
class CombaSettings(FlaSettings):
    """fla.models.CombaConfig: a scalar decay plus a low-rank correction (models/layers/comba_mixer.py). fla's
    CombaBlock passes neither use_output_correction, use_inner_decay nor correction_factor to its layer, so its
    model always has both (D starts at 1); the fields are kept as fla keeps them, and the layer here does the same."""

    model_type: ClassVar[str] = "comba"
    fla_config: ClassVar[str] = "CombaConfig"
    fla_model: ClassVar[str] = "CombaForCausalLM"

    conv_size: int = 4
    head_dim: int = 256
    num_heads: int = 6
    num_v_heads: int | None = None
    expand_v: float = 2.0
    use_output_gate: bool = True
    use_short_conv: bool = True
    use_output_correction: bool = True
    use_inner_decay: bool = True
    correction_factor: float = 1.0
    num_hidden_layers: int = 21


@settings_class
class RWKV7Settings(FlaSettings):
    """fla.models.RWKV7Config: RWKV-7's generalised delta rule, its own block (token shift, LoRA-made decay,
    in-context learning rate and value residual, LayerNorms, a squared-ReLU channel mix; models/lm/rwkv7.py).
    head_dim / num_heads and value_dim are completed as fla's config completes them (value_dim one width per
    layer), so the config.json written equals fla's. fuse_swiglu and attnres_block_size are the family's
    shared fields that RWKV7Config does not have; fla keeps them as ignored attributes."""

    model_type: ClassVar[str] = "rwkv7"
    fla_config: ClassVar[str] = "RWKV7Config"
    fla_model: ClassVar[str] = "RWKV7ForCausalLM"

    hidden_act: str = "sqrelu"  # the channel mix's relu(x)^2
    norm_eps: float = 1e-05
    use_l2warp: bool = True
    num_hidden_layers: int = 24
    head_dim: int | None = 64  # d_k = d_v / (value_dim / hidden_size) per head; num_heads = hidden_size / head_dim
    num_heads: int | None = None
    decay_low_rank_dim: int | None = 64  # the LoRAs' widths (None: fla's layer picks one from hidden_size)
    gate_low_rank_dim: int | None = 128
    a_low_rank_dim: int | None = 64
    v_low_rank_dim: int | None = 16
    norm_first: bool = True  # layer 0 LayerNorms the embedding first (pre_norm)
    norm_bias: bool = True  # the LayerNorms have a bias
    value_dim: int | list | None = None  # the value width of each layer (None: hidden_size)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        if self.head_dim is None and self.num_heads is not None:
            self.head_dim = int(self.hidden_size // self.num_heads)
        elif self.head_dim is not None and self.num_heads is None:
            self.num_heads = int(self.hidden_size // self.head_dim)
        if self.value_dim is None or isinstance(self.value_dim, int):
            self.value_dim = [self.value_dim or self.hidden_size] * self.num_hidden_layers
