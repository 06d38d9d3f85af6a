"""What the transformers production families (Qwen3.5, Qwen3-Next, OLMo-Hybrid, Kimi Linear, GLM-5 Next) share in
their records: the hooks they have and a lower bound on their weights from config.json alone (no torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deltalens.models.io.footprint import number

# hooks of the delta-rule layers, then of the attention layers (models/production/lm.py lists them all)
ACT_NAMES = (
    "embed", "resid_pre", "q", "k", "v", "beta_logit", "beta", "gate", "state", "z", "attn_scores", "pattern",
    "attn_out", "mlp_out", "resid_post", "normalized",
)  # fmt: skip
HOOKS = (
    "q, k, v, beta_logit, beta, gate, state, z on delta-rule layers; "
    "rot_q, rot_k, v, attn_scores, pattern, z on attention layers"
)
PROBES = "eigenvalues, state rank and subspaces, linear probes, transition census"
INTERVENTIONS = "beta range, head ablation, state patching, gate clamp"


def weights(config: dict[str, Any]) -> float:
    """Embeddings (twice unless tied) and each layer's MLP, the text tower's fields where there is one. A
    mixture-of-experts layer counts all its routed experts (an 80B MoE model is 80B in memory, not the
    size of one expert per layer); which layers are MoE follows transformers' rules (`_moe_layers`)."""
    tower = config.get("text_config")
    text: dict[str, Any] = tower if isinstance(tower, dict) else config
    hidden, vocab = number(text, "hidden_size", 0), number(text, "vocab_size", 0)
    layers = number(text, "num_hidden_layers", 0)  # number() refuses JSON's Infinity / NaN in one sentence
    dense = 3 * hidden * number(text, "intermediate_size", 0)
    experts = next((number(text, key, 0) for key in _EXPERTS if text.get(key) is not None), 0)
    moe_layers = _moe_layers(text, layers) if experts > 0 else 0
    moe = experts * 3 * hidden * number(text, "moe_intermediate_size", 0)
    mlps = moe_layers * moe + (layers - moe_layers) * dense
    return vocab * hidden * (1 if text.get("tie_word_embeddings") else 2) + mlps


_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")  # the routed experts' count, as configs name it


def _moe_layers(text: dict[str, Any], layers: float) -> float:
    """How many of `layers` carry experts: `mlp_layer_types`' "sparse" entries where listed (Kimi Linear as saved
    by transformers), else the layers from `first_k_dense_replace` (Kimi Linear's release) on, every
    `decoder_sparse_step`-th, less `mlp_only_layers` (Qwen3-Next); counted without a loop over the layers."""
    kinds = text.get("mlp_layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        return float(sum(kind == "sparse" for kind in kinds))
    first, step = number(text, "first_k_dense_replace", 0), number(text, "decoder_sparse_step", 1)
    first, step = max(int(first), 0), max(int(step), 1)
    count = max(int(layers) // step - first // step, 0)  # layers i >= first with (i + 1) % step == 0
    only = text.get("mlp_only_layers")
    listed = {i for i in only if isinstance(i, int) and first <= i < layers} if isinstance(only, list) else set()
    return float(max(count - sum((i + 1) % step == 0 for i in listed), 0))


PRODUCTION: list[str] = []  # the arch of every family registered here, in registration order


CAPABILITIES = frozenset(
    {"residual", "lens", "delta", "keys", "householder", "one_pattern", "gate", "decay", "state", "heads", "attention"}
)  # what a transformers hybrid has (models/capabilities.py)


def register_production(
    arch: str,
    display: str,
    article: str,
    class_name: str,
    model_types: tuple[str, ...],
    capabilities: frozenset[str] = CAPABILITIES,
    bound: Callable[[dict[str, Any]], float] = weights,
) -> None:
    """Register the transformers family whose model, config and loader live in models/production/<arch>.py (its
    FAMILY there reads this record's name, display name and model types). `capabilities`: where the family's
    models have fewer than a transformers hybrid's; `bound`: where its weights follow another rule than
    `weights`'."""
    from deltalens.models.registry import Family, register

    if arch not in PRODUCTION:
        PRODUCTION.append(arch)
    where = f"deltalens.models.production.{arch}"
    register(
        Family(
            arch=arch,
            display=display,
            article=article,
            model=f"{where}:{class_name}.from_config",
            class_name=class_name,
            config=f"{where}:{class_name}.make_config",
            act_names=ACT_NAMES,
            layers_field="num_hidden_layers",
            delta_rule=True,
            hooks=HOOKS,
            probes=PROBES,
            interventions=INTERVENTIONS,
            model_types=model_types,
            weights=bound,
            load=f"{where}:{class_name}.from_folder",
            capabilities=capabilities,
        )
    )
