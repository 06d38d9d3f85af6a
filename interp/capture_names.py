"""Hook names for a capture: the shorthands ("beta", "resid", ...) a model answers to, expanded to its hooks.

expand_names(model, ["beta", "resid"])   # blocks.{l}.attn.hook_beta ..., hook_embed, blocks.{l}.hook_resid_post ...
"""

from __future__ import annotations

from collections.abc import Iterable

from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import architecture_of, article_of, is_delta_rule, n_layers_of, require_delta_rule
from deltalens.models.registry import family

ATTN_SHORTHANDS = ("beta", "beta_logit", "gate", "state", "k", "q", "v", "z")
DELTA_RULE_ONLY = ("beta", "beta_logit", "gate", "state")  # the delta rule's write strength, decay and matrix state


def _headed(arch: str) -> tuple[str, ...]:
    """The per-head shorthands an architecture has hooks for (its family's act_names; every delta-rule
    model may have a gate, which expand_names asks the model about)."""
    names = family(arch).act_names
    return tuple(n for n in ATTN_SHORTHANDS if n in names or (is_delta_rule(arch) and n in DELTA_RULE_ONLY))


def residual_names(model) -> list[str]:
    """hook_embed, then each layer's output: what a residual-stream probe reads, in depth order."""
    arch = architecture_of(model)
    site = "hook_hidden" if arch == "lstm" else "hook_resid_post"
    return ["hook_embed"] + [f"blocks.{layer}.{site}" for layer in range(n_layers_of(model))]


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
            if arch == "deltanet" and name == "beta_logit" and not model.config.use_beta:
                raise DeltalensError("this DeltaNet was built with use_beta=False: beta is constant and has no logit.")
            if name == "gate" and not getattr(model, "gated", False):
                raise DeltalensError(
                    f"{article_of(arch)} without a decay gate has no hook_gate (DeltaNet, or "
                    "a DeltaProduct built with use_forget_gate=False)."
                )
            # a hybrid's softmax-attention layers have q, k, v, z but no beta, gate or state
            layers = getattr(model, "delta_layers", None) if name in DELTA_RULE_ONLY else None
            out += [f"blocks.{layer}.attn.hook_{name}" for layer in (layers or range(n_layers_of(model)))]
        else:
            if not is_delta_rule(arch) and any(name.endswith(f"hook_{x}") for x in DELTA_RULE_ONLY):
                require_delta_rule(model, name)
            out.append(name)
    return list(dict.fromkeys(out))  # keep order, drop repeats
