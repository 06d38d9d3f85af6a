"""RWKV-7: fla's RWKV7ForCausalLM (RWKV-7 "Goose", fla model_type "rwkv7"), the generalised delta rule
S_t = (Diag(w_t) - (kk_t * a_t) kk_t^T) S_{t-1} + k_t v_t^T with a per-channel decay w_t and an in-context learning
rate a_t per key channel; the model is models/lm/rwkv7.py's HookedRWKV7.

Its hooks are the delta-rule family's where RWKV-7 has the quantity: hook_q is the receptance r_t, hook_beta the
learning rate a_t (with hook_beta_logit its logit; (batch, pos, head, d_k), one per key channel), hook_gate the
decay exp(w_t) (per key channel, as KDA's), hook_state S_t; and its own: hook_kk the removal key, hook_o the
recurrence's read-out S_t^T r_t, hook_z what o_proj reads (the group norm, bonus and gate applied)."""

from __future__ import annotations

from typing import Any

from deltalens.models.families import delta_rule
from deltalens.models.io.configs import RWKV7Settings
from deltalens.models.io.footprint import number
from deltalens.models.registry import Family, register

# act_name's short names, in forward order
ACT_NAMES = (
    "embed", "resid_pre", "q", "gate", "beta_logit", "beta", "kk", "k", "v", "state", "o", "z",
    "attn_out", "resid_mid", "mlp_out", "resid_post", "scale", "normalized",
)  # fmt: skip


def _weights(config: dict[str, Any]) -> float:
    """Embeddings, and per layer r, k, v, o, the channel mix and the LoRAs' matrices (norms, token-shift blends
    and biases left out: a lower bound)."""
    config = {**RWKV7Settings.defaults, **{k: v for k, v in config.items() if v is not None}}
    hidden, vocab = number(config, "hidden_size", 0), number(config, "vocab_size", 0)
    layers = number(config, "num_hidden_layers", 0)
    widths = config.get("value_dim")
    value = number({"v": widths[0] if isinstance(widths, list) and widths else widths}, "v", hidden)
    ffn = number(config, "intermediate_size", 0) or hidden * number(config, "hidden_ratio", 4)
    ranks = sum(number(config, f"{name}_low_rank_dim", 32) for name in ("decay", "a"))
    loras = hidden * 2 * ranks + (hidden + value) * number(config, "gate_low_rank_dim", 32)
    per_layer = 2 * hidden * hidden + 2 * hidden * value + 2 * hidden * ffn + loras
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer


register(
    Family(
        arch="rwkv7",
        display="RWKV-7",
        article="an RWKV-7 model",
        model="deltalens.models.lm.rwkv7:HookedRWKV7",
        class_name="HookedRWKV7",
        act_names=ACT_NAMES,
        layers_field="num_hidden_layers",
        delta_rule=True,
        hooks="q (r), k, v, beta_logit, beta (the learning rate a, per key channel), gate (the decay, per key "
        "channel), kk (the removal key), state, o (S_t^T r_t), z",
        probes="state rank and subspaces, linear probes, the census's exact eigenvalues",
        interventions=delta_rule.INTERVENTIONS + ", gate clamp (per head, every channel)",
        model_types=(RWKV7Settings.model_type,),
        settings=RWKV7Settings,
        weights=_weights,
        # no hybrid (fla's RWKV7Block cannot hold attention) and not alpha (I - beta k k^T): no "householder"
        capabilities=(delta_rule.CAPABILITIES - {"householder", "attention"}) | {"gate", "decay"},
        transition="Diag(w) - (kk * a) kk^T (a per-channel decay w, a removal key kk_t, hook_kk, and a learning "
        "rate a per key channel)",
    )
)
