"""Hook names for the delta-rule family: TransformerLens-style names over fla's module tree.

HookedDeltaNet's modules (and HookedGatedDeltaNet's, HookedDeltaProduct's) sit where fla's
DeltaNetForCausalLM has them (model.embeddings,
model.layers.{l}.attn, model.norm, lm_head) so that state_dicts are interchangeable. Its hooks and
`mod_dict` keys use TransformerLens's vocabulary instead (blocks.{l}.attn.hook_q, ...).
`lens_name` maps a module path to that name; `deltanet_hook_names` lists the hooks of an n-layer
model in forward order; `act_name("beta", 0)` is TransformerLens's `get_act_name` for our names,
on every architecture (`ACT_NAMES`, from each family's record, says which short names each one has).

    hook_embed                      (batch, pos, d_model)      token embedding
    blocks.{l}.hook_resid_pre       (batch, pos, d_model)
    blocks.{l}.attn.hook_q          (batch, pos, head, d_k)    after conv, activation and L2 norm
    blocks.{l}.attn.hook_k          (batch, pos, head, d_k)    (scale K**-0.5 is applied later)
    blocks.{l}.attn.hook_v          (batch, pos, head, d_v)
    blocks.{l}.attn.hook_beta_logit (batch, pos, head)         b_proj(x); absent if use_beta=False
    blocks.{l}.attn.hook_beta       (batch, pos, head)         lo + (hi - lo) * sigmoid(logit)
    blocks.{l}.attn.hook_gate       (batch, pos, head)         decay alpha_t in (0, 1] (gated models;
                                    (batch, pos, head, d_k) where it is per key channel: Kimi Linear's KDA)
    blocks.{l}.attn.hook_vgate      (batch, pos, head, d_v)    value gate gamma_t in (0, 1) (value-gated DeltaNet)
    blocks.{l}.attn.hook_p          (batch, pos, head, d_k)    Comba's correction key p_t (after its L2 norm)
    blocks.{l}.attn.hook_kk         (batch, pos, head, d_k)    RWKV-7's removal key kk_t (unit); its hook_beta is
                                    the learning rate a_t, (batch, pos, head, d_k), one per key channel
    blocks.{l}.attn.hook_o          (batch, pos, head, d_v)    RWKV-7's read-out S_t^T r_t (its hook_z: what
                                    o_proj reads, the group norm, bonus and gate applied)
    blocks.{l}.attn.hook_state      (batch, pos, head, d_k, d_v)  S_t after token t (on demand)
    blocks.{l}.attn.hook_z          (batch, pos, head, d_v)    delta-rule output o_t, before o_norm
    blocks.{l}.hook_attn_out        (batch, pos, d_model)      mixer output after o_proj
    blocks.{l}.hook_resid_mid       (batch, pos, d_model)
    blocks.{l}.hook_mlp_out         (batch, pos, d_model)
    blocks.{l}.hook_resid_post      (batch, pos, d_model)
    ln_final.hook_scale             (batch, pos, 1)            the final RMSNorm's scale (read-only)
    ln_final.hook_normalized        (batch, pos, d_model)      final RMSNorm output

A hybrid's softmax-attention layers (fla's `attn` config; models/layers/softmax_attention.py) have
TransformerLens's attention hooks instead: blocks.{l}.attn.hook_q|hook_k|hook_v (batch, pos, head, d_head;
before rotary), hook_rot_q|hook_rot_k, hook_attn_scores and hook_pattern (batch, head, query_pos,
key_pos), hook_z (batch, pos, head, d_head); no beta, gate or state.

DeltaProduct adds a factor axis (n_h) where a token has one value per Householder factor:
hook_k (batch, pos, head, factor, d_k), hook_v (..., factor, d_v), hook_beta_logit and hook_beta
(batch, pos, head, factor).

>>> "beta" in dl.ACT_NAMES["deltanet"], "beta" in dl.ACT_NAMES["transformer"]   # the short names each has
(True, False)
"""

from __future__ import annotations

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices

__all__ = ["ATTN_HOOKS", "BLOCK_HOOKS", "act_name", "deltanet_hook_names", "lens_name"]

ATTN_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_beta_logit", "hook_beta", "hook_gate", "hook_state", "hook_z")
BLOCK_HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")

# Exact renames first, then prefix renames (fla module path -> TransformerLens name).
_EXACT = {
    "model.hook_embed": "hook_embed",
    "model.hook_normalized": "ln_final.hook_normalized",
    "model.hook_scale": "ln_final.hook_scale",
    "model.embeddings": "embed",
    "model.norm": "ln_final",
    "model.layers": "blocks",
    "lm_head": "unembed",
}
_PREFIX = (("model.layers.", "blocks."),)


def lens_name(module_path: str) -> str:
    """fla module path -> TransformerLens-style name ('model.layers.0.attn.hook_q' -> 'blocks.0.attn.hook_q')."""
    if module_path in _EXACT:
        return _EXACT[module_path]
    for old, new in _PREFIX:
        if module_path.startswith(old):
            return new + module_path[len(old) :]
    return module_path


def deltanet_hook_names(n_layers: int, use_beta: bool = True, gated: bool = False) -> list[str]:
    """Every hook name of an n-layer delta-rule model, in the order the forward pass fires them
    (DeltaNet: use_beta from its config; gated: Gated DeltaNet, or a DeltaProduct with a forget gate)."""
    names = ["hook_embed"]
    for layer in range(n_layers):
        attn = [h for h in ATTN_HOOKS if (use_beta or h != "hook_beta_logit") and (gated or h != "hook_gate")]
        names += [f"blocks.{layer}.hook_resid_pre"]
        names += [f"blocks.{layer}.attn.{h}" for h in attn]
        names += [f"blocks.{layer}.{h}" for h in BLOCK_HOOKS[1:]]
    names += ["ln_final.hook_scale", "ln_final.hook_normalized"]
    return names


# short name -> where it lives: "" (one per model), "block" (blocks.{l}.hook_x), "attn" (blocks.{l}.attn.hook_x)
_SITES = {
    "embed": "",
    "pos_embed": "",
    "normalized": "",
    "scale": "",
    "resid_pre": "block",
    "resid_mid": "block",
    "resid_post": "block",
    "attn_out": "block",
    "mlp_out": "block",
    "hidden": "block",
    "cell": "block",
    "q": "attn",
    "k": "attn",
    "v": "attn",
    "z": "attn",
    "beta_logit": "attn",
    "beta": "attn",
    "state": "attn",
    "gate": "attn",
    "vgate": "attn",
    "p": "attn",
    "kk": "attn",
    "o": "attn",
    "pattern": "attn",
    "attn_scores": "attn",
}
_GLOBAL = {
    "embed": "hook_embed",
    "pos_embed": "hook_pos_embed",
    "normalized": "ln_final.hook_normalized",
    "scale": "ln_final.hook_scale",
}


def __getattr__(name: str):
    """`ACT_NAMES`: architecture -> the short names it has a hook for (each family's `act_names` in
    models/registry.py; pos_embed: a Transformer with learned positions only), read when asked."""
    if name == "ACT_NAMES":
        from deltalens.models.registry import families

        return {record.arch: record.act_names for record in families()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@integer_indices("layer")
def act_name(name: str, layer: int | None = None) -> str:
    """A hook's full name from its short name: act_name("beta", 0) -> "blocks.0.attn.hook_beta".

    Short names are those of `ACT_NAMES` (with or without "hook_"); a full name passes through.

    >>> dl.act_name("beta", 0)
    'blocks.0.attn.hook_beta'
    """
    if "." in name or name in _GLOBAL.values():
        return name
    short = name.removeprefix("hook_")
    site = _SITES.get(short)
    if site is None:
        raise DeltalensError(f"unknown activation {name!r}; use a full hook name or one of {', '.join(_SITES)}.")
    if site == "":
        return _GLOBAL[short]
    if layer is None:
        raise DeltalensError(f"{short!r} has one hook per layer: give the layer, e.g. act_name({short!r}, 0).")
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise DeltalensError(f"act_name's layer is a layer index >= 0 (blocks.{{layer}}), got {layer!r}.")
    return f"blocks.{layer}.attn.hook_{short}" if site == "attn" else f"blocks.{layer}.hook_{short}"
