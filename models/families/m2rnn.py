"""M²RNN: a non-linear recurrence on a matrix state, S_t = f_t S_{t-1} + (1 - f_t) tanh(S_{t-1} W + k_t v_t^T),
o_t = S_t^T q_t, in DeltaNet's block layout; the model is models/lm/m2rnn.py's HookedM2RNN."""

from __future__ import annotations

from typing import Any

from deltalens.models.io.footprint import number
from deltalens.models.registry import Family, register

# act_name's short names, in forward order (the forget gate f_t is hook_gate)
ACT_NAMES = (
    "embed", "resid_pre", "q", "k", "v", "gate", "state", "z",
    "attn_out", "resid_mid", "mlp_out", "resid_post", "scale", "normalized",
)  # fmt: skip


def weights(config: dict[str, Any]) -> float:
    """A lower bound: embed and unembed, then per layer the q, k, v and o projections (the MLP left out)."""
    d, vocab = number(config, "hidden_size", 64), number(config, "vocab_size", 64)
    key, value = d * number(config, "expand_k", 1), d * number(config, "expand_v", 1)
    return 2 * vocab * d + number(config, "num_hidden_layers", 2) * (2 * d * key + 2 * d * value)


register(
    Family(
        arch="m2rnn",
        display="M²RNN",
        article="an M²RNN",
        model="deltalens.models.lm.m2rnn:HookedM2RNN",
        class_name="HookedM2RNN",
        config="deltalens.models.lm.m2rnn:m2rnn_config_from_dict",
        act_names=ACT_NAMES,
        layers_field="num_hidden_layers",
        hooks="q, k, v, gate (forget gate f_t), state, z",
        probes="linear probes, state rank and subspaces",
        interventions="head ablation, state patching",
        weights=weights,
        capabilities=frozenset({"residual", "lens", "state", "heads", "gate"}),
    )
)
