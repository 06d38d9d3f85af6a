"""Hook names for a capture: the shorthands ("beta", "resid", ...) a model answers to, expanded to its hooks.

expand_names(model, ["beta", "resid"])   # blocks.{l}.attn.hook_beta ..., hook_embed, blocks.{l}.hook_resid_post ...

A per-head shorthand expands to the layers that have that hook: on a hybrid, "beta" to its delta-rule layers
(models.architecture.delta_layers_of), "q", "k", "v", "z" to every layer that has them (a softmax-attention
layer has its own q, k, v, z), "state" and "gate" also to a DeltaNet / M²RNN hybrid's M²RNN layers. The tools
that need the delta rule read the capture's `delta_layers` only. One that no layer has is refused in one
sentence saying why.
"""

from __future__ import annotations

from collections.abc import Iterable

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import (
    architecture_of,
    article_of,
    delta_layers_of,
    is_delta_rule,
    require_delta_rule,
)
from deltalens.models.registry import family

ATTN_SHORTHANDS = ("beta", "beta_logit", "gate", "vgate", "state", "k", "q", "v", "z")
DELTA_RULE_ONLY = ("beta", "beta_logit", "gate", "vgate", "state")  # write strength, decays and the matrix state


def _headed(arch: str) -> tuple[str, ...]:
    """The per-head shorthands an architecture has hooks for (its family's act_names; every delta-rule
    model may have a gate, which expand_names asks the model about)."""
    names = family(arch).act_names
    return tuple(n for n in ATTN_SHORTHANDS if n in names or (is_delta_rule(arch) and n in DELTA_RULE_ONLY))


def residual_names(model) -> list[str]:
    """hook_embed, then each layer's output: what a residual-stream probe reads, in depth order."""
    arch = architecture_of(model)
    site = "hook_hidden" if arch == "lstm" else "hook_resid_post"
    return ["hook_embed"] + [f"blocks.{layer}.{site}" for layer in range(model.cfg.n_layers)]


def site_layers(model, name: str) -> list[int]:
    """The layers with blocks.{l}.attn.hook_{name} (a hybrid's attention layers have no beta or state)."""
    hooks = getattr(model, "hook_dict", None)
    if hooks is None:  # a model without a hook table: the delta-rule layers for the delta rule's hooks
        return delta_layers_of(model) if name in DELTA_RULE_ONLY else list(range(model.cfg.n_layers))
    return [layer for layer in range(model.cfg.n_layers) if f"blocks.{layer}.attn.hook_{name}" in hooks]


def expand_names(model, names: Iterable[str]) -> list[str]:
    """Shorthands ("beta", "resid", ...) -> hook names for this model; exact names pass through."""
    arch = architecture_of(model)
    out: list[str] = []
    for name in names:
        if name == "resid":
            out += residual_names(model)
        elif name in ATTN_SHORTHANDS:
            if name not in _headed(arch):
                if name in DELTA_RULE_ONLY:
                    require_delta_rule(model, f"{name} (hook_{name})")
                raise DeltalensError(
                    f"{article_of(arch)} has no attention heads, so there is no hook_{name}; capture 'resid' instead."
                )
            layers = site_layers(model, name)
            if not layers:
                raise DeltalensError(_absent(model, name))
            out += [f"blocks.{layer}.attn.hook_{name}" for layer in layers]
        else:
            known = name in (getattr(model, "hook_dict", None) or {})
            if not known and not is_delta_rule(arch) and any(name.endswith(f"hook_{x}") for x in DELTA_RULE_ONLY):
                require_delta_rule(model, name)
            out.append(name)
    return list(dict.fromkeys(out))  # keep order, drop repeats


def _absent(model, name: str) -> str:
    """Why no layer of `model` has hook_{name}, in one sentence."""
    arch = architecture_of(model)
    if name == "beta_logit":
        return f"{article_of(arch)} built with use_beta=False has a constant beta: there is no hook_beta_logit."
    if name == "gate":
        if site_layers(model, "vgate"):  # the value-gated DeltaNet: its gate acts on the value side
            return (
                f"{article_of(arch)} has no decay gate (hook_gate): its gate multiplies the state's value "
                "columns; capture 'vgate' (hook_vgate) for it."
            )
        return (
            f"{article_of(arch)} without a decay gate has no hook_gate (DeltaNet, or a DeltaProduct built with "
            "use_forget_gate=False); its state does not decay."
        )
    if name == "vgate":
        return f"{article_of(arch)} has no value gate (hook_vgate): only the value-gated DeltaNet has one."
    if name in DELTA_RULE_ONLY and not delta_layers_of(model):
        return f"{article_of(arch)} has no delta-rule layer, so there is no hook_{name}."
    return f"no layer of {article_of(arch)} has hook_{name}; list its hooks with model.hook_dict."
