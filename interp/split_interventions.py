"""Interventions that change the transition and the write of a delta rule separately.

A delta-rule head uses beta_t twice in one step (Gated DeltaNet: after S <- alpha_t S; DeltaProduct:
once per Householder factor j, with k_{t,j}, v_{t,j}, beta_{t,j}):

    S_t = (I - beta_t k_t k_t^T) S_{t-1}  +  beta_t k_t v_t^T
          ---- the transition ----          --- the write ---

so `clip_beta` / `rescale_beta` (interp/interventions.py), which edit hook_beta, change both. The
builders here edit one use and keep the other exactly:

* `clip_transition(model, l, h, hi=1)`: transition beta' = min(beta, hi), write beta k v^T kept;
* `rescale_transition(model, l, h, to=(0, 1))`: the transition's beta range mapped as rescale_beta's;
* `abs_eigenvalue(model, l, h)`: the eigenvalue along k_t, 1 - beta, becomes |1 - beta|
  (beta' = 1 - |1 - beta|: a reflection becomes the identity along k, beta <= 1 is untouched), write kept;
* `clip_write(model, l, h, hi=1)`: the write becomes min(beta, hi) k v^T, the transition kept (with
  clip_transition, the two halves of clip_beta);
* `scale_write(model, l, h, scale=0.5)`: the write becomes scale beta k v^T, the transition kept (a
  uniform scale that a per-head output norm undoes: see its docstring).

How, with the kernels unchanged: the recurrence only sees (k, v, beta), and beta' k (v beta / beta')^T
= beta k v^T, so a transition-only change sets beta' on hook_beta and multiplies the head's v by
beta / beta' (v compensated). hook_v fires before hook_beta, so the intervention is a pair of hooks: the
one on hook_v hands the recurrence a copy of v and keeps it; the one on hook_beta sets beta' and scales
that copy in place. This is exact (up to fp32 rounding) wherever beta' >= FLOOR = 1e-6 or beta' >= beta.
Elsewhere (|1 - beta| within 1e-6 of beta = 2, e.g. a saturated sigmoid: beta' = 0 cannot carry a
write) the kernel's transition beta is FLOOR instead of beta', an eigenvalue off by less than 1e-6;
on 128 held-out traces the shipped [0, 2] checkpoints' tracking heads keep beta below 1.999 (exact).
A constant write scale needs only hook_v (v -> scale v), which is exact.

Other hooks on hook_v must come before these (one that returns a new tensor after them would hand the
recurrence a v the compensation never reaches), and other hooks on hook_beta before them too. Several
split interventions compose, each use separately: on one head clip_transition + clip_write is clip_beta.
hook_v and hook_beta, where cached, show the compensated v and the kernel's beta the recurrence used.
Attribution estimates (sweep(top_k=...)) read each hook alone and cannot see the pair: the head sweeps
run them exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.interventions import Intervention, _check_head, check_factor
from deltalens.models.architecture import require_delta_rule, require_householder

__all__ = [
    "FLOOR",
    "split_beta",
    "clip_transition",
    "rescale_transition",
    "abs_eigenvalue",
    "clip_write",
    "scale_write",
]

FLOOR = 1e-6  # the smallest transition beta that still carries a write (module docstring)

_OWNED = "_deltalens_split_v"  # marks a v copy that split hooks may scale in place
_USES = "_deltalens_split_uses"  # on that copy: the transition and write betas so far, and v before them


def _target(model, layer: int, head: int | None, factor: int | None, what: str) -> tuple[tuple, str]:
    """(index into (B, T, H[, n]) beta and v, label prefix such as "L0H3" or "L0H2F1")."""
    require_delta_rule(model, what)
    require_householder(model, "the transition / write split")
    _check_head(model, layer, head)
    n_factors = check_factor(model, factor, layer)
    heads = slice(None) if head is None else head
    with_factor = bool(n_factors) and factor is not None
    index = (slice(None), slice(None), heads) + ((factor,) if with_factor else ())
    where = f"L{layer}" + ("" if head is None else f"H{head}") + (f"F{factor}" if with_factor else "")
    return index, where


def _owned(v: torch.Tensor) -> torch.Tensor:
    """v itself if an earlier split hook already copied it this forward, else a marked copy."""
    if getattr(v, _OWNED, False):
        return v
    v = v.clone()  # never edit the tensor the model (or a cache) still holds
    setattr(v, _OWNED, True)
    return v


def compensate(transition: torch.Tensor, write: torch.Tensor, floor: float = FLOOR):
    """(kernel beta, v factor) so that kernel (factor v) = write v, with the kernel's beta the
    transition's wherever that can keep the write (module docstring)."""
    lifted = (write > transition) & (transition < floor)  # a write that beta' alone cannot carry
    kernel = torch.where(lifted, torch.full_like(transition, floor), transition)
    positive = kernel > 0  # else write = 0 too: v stays
    factor = torch.where(positive, write / torch.where(positive, kernel, torch.ones_like(kernel)), 1.0)
    return kernel, factor


def split_beta(
    model,
    layer: int,
    head: int | None,
    transition: Callable[[torch.Tensor], torch.Tensor] | None,
    label: str,
    factor: int | None = None,
    floor: float = FLOOR,
    write: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Intervention:
    """The head's step becomes (I - a k k^T) S + b k v^T with a = transition(beta), b = write(beta).

    transition, write: elementwise maps of the head's beta (B, T[, n]); None keeps that use at beta.
    label: what it does, after the head's name. head None: every head of the layer; factor: one
    Householder factor of a DeltaProduct (None = all).
    """
    index, where = _target(model, layer, head, factor, "beta to split")
    kept: dict[str, torch.Tensor] = {}

    def keep_v(v, hook):  # (B, T, H[, n], d_v)
        kept["v"] = v = _owned(v)
        return v

    def set_beta(beta, hook):  # (B, T, H[, n])
        v = kept.pop("v", None)
        if v is None:
            raise DeltalensError(
                f"{hook.name}: the split intervention's hook on hook_v did not run first; apply its hooks together."
            )
        # the two uses as every split hook of this forward left them (the first one starts them at beta)
        uses = getattr(v, _USES, None) or {"a": beta.clone(), "b": beta.clone(), "v": v.clone()}
        setattr(v, _USES, uses)
        if transition is not None:
            uses["a"][index] = transition(uses["a"][index]).to(beta.dtype)
        if write is not None:
            uses["b"][index] = write(uses["b"][index]).to(beta.dtype)
        kernel, scale = compensate(uses["a"], uses["b"], floor)
        v.copy_(uses["v"] * scale[..., None].to(v.dtype))
        if not torch.isfinite(v).all():
            raise DeltalensError(
                f"keeping the write of {where} overflows v in {v.dtype}; run the model in float32 or bfloat16."
            )
        return kernel

    hooks = [(f"blocks.{layer}.attn.hook_v", keep_v), (f"blocks.{layer}.attn.hook_beta", set_beta)]
    return Intervention(f"{where} {label}", hooks, layer, head)


@integer_indices("layer", "head", "factor")
def clip_transition(model, layer: int, head: int | None, hi: float = 1.0, factor: int | None = None) -> Intervention:
    """Transition beta' = min(beta, hi), the write kept: with hi = 1 only the negative eigenvalues go.

    >>> dl.accuracy_under(model, batch, dl.clip_transition(model, 0, 3, hi=1.0)) < 0.8   # the write kept
    True
    """
    if not 0.0 <= float(hi) <= 2.0:  # NaN fails too
        raise DeltalensError(f"the transition clip needs 0 <= hi <= 2, got {hi}.")
    ceiling = float(hi)
    label = f"transition beta clipped at {ceiling:g} (write kept)"
    return split_beta(model, layer, head, lambda beta: beta.clamp(max=ceiling), label, factor)


@integer_indices("layer", "head", "factor")
def rescale_transition(
    model, layer: int, head: int | None, to: tuple[float, float] = (0.0, 1.0), factor: int | None = None
) -> Intervention:
    """The transition's beta range [lo, hi] mapped onto `to` as rescale_beta maps it, the write kept.

    >>> dl.accuracy_under(model, batch, dl.rescale_transition(model, 0, 3, to=(0.0, 1.0))) < 0.8
    True
    """
    new_lo, new_hi = float(to[0]), float(to[1])
    if not 0.0 <= new_lo <= new_hi <= 2.0:  # NaN fails too
        raise DeltalensError(f"the beta range needs 0 <= lo <= hi <= 2, got [{to[0]}, {to[1]}].")
    index, _ = _target(model, layer, head, factor, "beta to rescale")
    mixer = model.blocks[layer].attn
    lo = mixer.beta_lo[index[2:]].detach().clone()
    hi = mixer.beta_hi[index[2:]].detach().clone()
    if torch.any(hi - lo <= 0):
        raise DeltalensError(f"layer {layer}'s beta range is empty (lo >= hi); reset it with model.reset_beta_range().")

    def remap(beta):  # lo/hi broadcast over (B, T[, n]) as rescale_beta's
        old_lo, old_hi = lo.to(beta), hi.to(beta)
        return new_lo + (beta - old_lo) * ((new_hi - new_lo) / (old_hi - old_lo))

    span = f"[{float(lo.min()):g}, {float(hi.max()):g}]->[{new_lo:g}, {new_hi:g}]"
    return split_beta(model, layer, head, remap, f"transition beta {span} (write kept)", factor)


@integer_indices("layer", "head", "factor")
def abs_eigenvalue(model, layer: int, head: int | None, factor: int | None = None) -> Intervention:
    """The transition's eigenvalue along k, 1 - beta, becomes |1 - beta| (beta' = 1 - |1 - beta|): every
    negative eigenvalue turns positive with its size kept, the write kept.

    >>> accuracy = dl.accuracy_under(model, batch, dl.abs_eigenvalue(model, 0, 3))
    >>> 0.0 <= accuracy <= 1.0
    True
    """
    label = "eigenvalue 1 - beta -> |1 - beta| (write kept)"
    return split_beta(model, layer, head, lambda beta: 1.0 - (1.0 - beta).abs(), label, factor)


@integer_indices("layer", "head", "factor")
def clip_write(model, layer: int, head: int | None, hi: float = 1.0, factor: int | None = None) -> Intervention:
    """The write becomes min(beta, hi) k v^T, the transition I - beta k k^T kept: with hi = 1, the part of
    clip_beta that transition-only clipping leaves out (clip_beta = clip_transition + clip_write). Unlike a
    uniform scale_write it changes the writes of some tokens only (those with beta > hi).

    >>> accuracy = dl.accuracy_under(model, batch, dl.clip_write(model, 0, 3, hi=1.0))  # the S3 tracking head
    >>> accuracy >= 0.9  # its reflections kept, its write clipped: it still tracks
    True
    """
    if not 0.0 <= float(hi) <= 2.0:  # NaN fails too
        raise DeltalensError(f"the write clip needs 0 <= hi <= 2, got {hi}.")
    ceiling = float(hi)
    label = f"write beta clipped at {ceiling:g} (transition kept)"
    return split_beta(model, layer, head, None, label, factor, write=lambda beta: beta.clamp(max=ceiling))


@integer_indices("layer", "head", "factor")
def scale_write(model, layer: int, head: int | None, scale: float = 0.5, factor: int | None = None) -> Intervention:
    """The write becomes scale * beta k v^T (v -> scale v), the transition I - beta k k^T kept.

    With a zero start state S_t is linear in the writes, so scaling every write of a head scales its
    S_t and o_t by `scale`; a per-head output norm (DeltaNet's o_norm) then undoes it wherever o_t is not
    within its eps of 0. A near-null result says little about how strongly the head must write:
    clip_write, which changes some tokens' writes only, is the informative write-only control.

    >>> accuracy = dl.accuracy_under(model, batch, dl.scale_write(model, 0, 3, scale=0.5))
    >>> 0.0 <= accuracy <= 1.0
    True
    """
    index, where = _target(model, layer, head, factor, "write to scale")
    multiplier = float(scale)
    if not torch.isfinite(torch.tensor(multiplier)) or multiplier < 0:
        raise DeltalensError(f"the write scale must be a finite number >= 0, got {scale}.")

    def hook(v, hook):  # (B, T, H[, n], d_v)
        v = _owned(v)
        v[index] = v[index] * multiplier
        return v

    label = f"{where} write x{multiplier:g} (transition kept)"
    return Intervention(label, [(f"blocks.{layer}.attn.hook_v", hook)], layer, head)
