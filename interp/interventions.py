"""Interventions on trained models as TransformerLens forward hooks, and accuracy under them.

Every builder returns an `Intervention`: a label plus a list of (hook name, fn) pairs, usable as

    with iv.applied(model): ...                       # context manager (model.hooks underneath)
    model.run_with_hooks(tokens, fwd_hooks=iv.hooks)
    with model.hooks(fwd_hooks=iv.hooks): ...
    reveal_accuracy(model, batch, iv)                 # held-out reveal accuracy under it

Paper notation -> code:

* `rescale_beta(model, layer, head, to=(0, 1))`: the paper's test. The head's write strength
  beta_t = lo + (hi - lo) sigmoid(logit_t) is mapped from the model's range [lo, hi] (e.g.
  [0, 2]) to [lo', hi'] on `blocks.{l}.attn.hook_beta`:
      beta'_t = lo' + (beta_t - lo) (hi' - lo') / (hi - lo)       ([0, 2] -> [0, 1]: beta' = beta / 2)
  which equals `model.set_beta_range(layer, head, lo', hi')` exactly (same sigmoid, new range;
  tested) but lives in a hook, so nothing on the model changes and it composes with other hooks.
  The eigenvalue along k_t moves from 1 - beta_t to 1 - beta'_t: a reflection (beta 2, eigenvalue
  -1) becomes a projection (beta 1, eigenvalue 0). `scale=f` instead multiplies: beta' = f beta.
  A DeltaProduct's beta is (B, T, H, n_h): `factor=j` rescales factor j only.
* `clip_beta(model, layer, head, hi=1)`: beta' = min(beta, 1), the negative eigenvalues go (and with
  them part of the write: interp/split_interventions.py changes the transition or the write alone);
  `reflect_beta(model, layer, head)`: beta' = 2 - beta, eigenvalue 1 - beta -> beta - 1 (same size,
  opposite sign).
* `clamp_gate(model, layer, head, lo, hi)`: clamp a gated model's decay alpha_t into [lo, hi] on
  `blocks.{l}.attn.hook_gate` ([1, 1]: no forgetting).
* `ablate_head(model, layer, head, "zero" | "mean", site="z" | "state")`: replace the head's
  read-out o_t (hook_z) or its state S_t (hook_state) by zero or by its mean over the real tokens
  of a reference batch. Editing hook_state replaces S_t and every later step continues from it.
* `patch_activation(name, source, positions, head)`: copy an activation from another run (a
  tensor (B, T, ...), a run_with_cache cache, or a Capture) at chosen positions; `patch_state`
  is the same on a head's S_t, the experiment that moves a tracked value from one trace into
  another.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Union

import torch

from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.accuracy import accuracy_under, reveal_accuracy  # noqa: E402,F401 (re-exported)
from deltalens.interp.capture import Capture, capture, expand_names
from deltalens.interp.capture_names import site_layers
from deltalens.models.architecture import (
    architecture_of,
    article_of,
    is_delta_rule,
    require_delta_rule,
)

__all__ = [
    "Intervention",
    "rescale_beta",
    "clip_beta",
    "reflect_beta",
    "clamp_gate",
    "ablate_head",
    "patch_activation",
    "patch_state",
    "head_means",
    "reveal_accuracy",
    "accuracy_under",
]

Hook = tuple[str, Callable]
Positions = Union[None, int, Sequence[int], torch.Tensor]


@dataclass
class Intervention:
    """A named list of forward hooks (iterable, so `model.hooks(fwd_hooks=list(iv))` works too).

    >>> intervention = dl.rescale_beta(model, 0, 3, to=(0.0, 1.0))
    >>> isinstance(intervention, dl.Intervention)
    True
    """

    label: str
    hooks: list[Hook] = field(default_factory=list)
    layer: int | None = None
    head: int | None = None

    def __iter__(self):
        return iter(self.hooks)

    def __repr__(self) -> str:
        names = ", ".join(dict.fromkeys(name for name, _ in self.hooks)) or "no hooks"
        return f"Intervention({self.label!r}: {names})"

    def __len__(self) -> int:
        return len(self.hooks)

    def __add__(self, other: Intervention) -> Intervention:
        return Intervention(f"{self.label} + {other.label}", [*self.hooks, *other.hooks])

    @contextmanager
    def applied(self, model):
        """Within the block every forward of `model` runs with these hooks."""
        with model.hooks(fwd_hooks=list(self.hooks)):
            yield model


NO_INTERVENTION = Intervention("none")


# ---- checks ---------------------------------------------------------------------------------


def _check_head(model, layer: int, head: int | None) -> None:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise DeltalensError(f"layer {layer!r} is out of range: this model has layers 0..{n_layers - 1}.")
    if head is not None and (isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads):
        raise DeltalensError(f"head {head!r} is out of range: this model has heads 0..{n_heads - 1} per layer.")


def _position_mask(positions: Positions, B: int, T: int, device) -> torch.Tensor | None:
    """(B, T) bool mask, or None for every position."""
    if positions is None:
        return None
    try:  # a list or a numpy array of bools is a mask too, not the indices 0 and 1
        given = torch.as_tensor(positions)
    except (TypeError, ValueError, RuntimeError) as err:
        raise DeltalensError(f"positions must be indices or a bool mask, got {positions!r}") from err
    if given.is_floating_point() and not given.numel():  # [] reads as float: no position at all
        given = given.long()
    if given.is_floating_point() or given.is_complex():
        raise DeltalensError(f"positions must be whole numbers (indices) or bools (a mask), got {given.tolist()}")
    if given.dtype == torch.bool:
        mask = given.to(device)
        if mask.ndim == 1:
            mask = mask[None, :].expand(B, -1)
        if mask.shape != (B, T):
            raise DeltalensError(f"a position mask must be (T,) or (B, T) = ({B}, {T}); got {tuple(mask.shape)}.")
        return mask
    index = given.reshape(-1).long()
    if index.numel() and (index.min() < -T or index.max() >= T):
        raise DeltalensError(f"positions {index.tolist()} are outside a sequence of {T} tokens.")
    mask = torch.zeros(T, dtype=torch.bool)
    mask[index] = True
    return mask[None, :].expand(B, -1).to(device)


def _edit(value: torch.Tensor, replacement: torch.Tensor, head: int | None, mask: torch.Tensor | None):
    """value with [:, :, head] (or everything) replaced at the masked (batch, pos) entries."""
    value = value.clone()  # never edit the tensor the model (or a cache) still holds
    target = value if head is None else value[:, :, head]
    replacement = replacement.to(value.dtype).to(value.device)
    if mask is None:
        target[...] = replacement
    else:
        if replacement.ndim == target.ndim:  # per-position source: take its masked entries
            target[mask] = replacement[mask]
        else:  # a constant (e.g. a mean): broadcast it
            target[mask] = replacement
    return value


# ---- beta -----------------------------------------------------------------------------------


def check_factor(model, factor: int | None, layer: int = 0) -> int:
    """Raise unless `factor` (None = every factor) names a Householder factor of the layer; returns the
    layer's number of factors when its beta has a factor axis (DeltaProduct), else 0."""
    mixer = model.blocks[layer].attn
    if getattr(mixer, "is_softmax_attention", False):
        raise DeltalensError(
            f"layer {layer} of this hybrid is softmax attention, which has no beta; "
            f"pick a delta-rule layer, one of {model.delta_layers}."
        )
    n_factors = mixer.n_factors if getattr(mixer, "factor_axis", False) else 0
    if factor is not None and (
        isinstance(factor, bool) or not isinstance(factor, int) or not 0 <= factor < (n_factors or 1)
    ):
        raise DeltalensError(
            f"factor {factor!r} is out of range: this model applies {n_factors or 1} factor(s) per token."
        )
    return n_factors


@integer_indices("layer", "head", "factor")
def rescale_beta(
    model,
    layer: int,
    head: int | None,
    to: tuple[float, float] | None = None,
    scale: float | None = None,
    factor: int | None = None,
) -> Intervention:
    """Map a head's beta range to `to` (default (0, 1)), or multiply beta by `scale` (module docstring).

    head None rescales every head of the layer; `factor` picks one Householder factor of a
    DeltaProduct (None = all of them).

    >>> dl.accuracy_under(model, batch, dl.rescale_beta(model, 0, 3, to=(0.0, 1.0))) < 0.8   # the paper's test
    True
    """
    require_delta_rule(model, "beta to rescale")
    _check_head(model, layer, head)
    if to is not None and scale is not None:
        raise DeltalensError("give either a target range (to=(lo, hi)) or a factor (scale=f), not both.")
    mixer = model.blocks[layer].attn
    n_factors = check_factor(model, factor, layer)
    heads = slice(None) if head is None else head
    # index of (B, T, H[, n]): the head(s), then the factor where the model has a factor axis
    where_index = (slice(None), slice(None), heads) + ((factor,) if n_factors and factor is not None else ())
    lo = mixer.beta_lo[where_index[2:]].detach().clone()
    hi = mixer.beta_hi[where_index[2:]].detach().clone()
    name = f"blocks.{layer}.attn.hook_beta"
    where = (
        f"L{layer}" + ("" if head is None else f"H{head}") + (f"F{factor}" if n_factors and factor is not None else "")
    )
    if scale is not None:
        multiplier = float(scale)
        if not math.isfinite(multiplier) or multiplier < 0:
            raise DeltalensError(f"the beta scale must be a finite number >= 0 (beta stays >= 0), got {scale}.")

        def multiply(beta, hook):  # (B, T, H[, n])
            out = beta.clone()
            out[where_index] = beta[where_index] * multiplier
            return out

        return Intervention(f"{where} beta x{multiplier:g}", [(name, multiply)], layer, head)
    new_lo, new_hi = (0.0, 1.0) if to is None else _target_range(to)
    if to is not None and not 0.0 <= new_lo <= new_hi <= 2.0:  # NaN fails too; the default range passes
        raise DeltalensError(
            f"the beta range needs 0 <= lo <= hi <= 2 (eigenvalues 1 - beta in [-1, 1]), got [{to[0]}, {to[1]}]."
        )
    if torch.any(hi - lo <= 0):
        raise DeltalensError(f"layer {layer}'s beta range is empty (lo >= hi); reset it with model.reset_beta_range().")

    def hook(beta, hook):  # (B, T, H[, n])
        out = beta.clone()
        old_lo, old_hi = lo.to(beta), hi.to(beta)
        out[where_index] = new_lo + (beta[where_index] - old_lo) * ((new_hi - new_lo) / (old_hi - old_lo))
        return out

    span = f"[{float(lo.min()):g}, {float(hi.max()):g}]"
    return Intervention(f"{where} beta {span}->[{new_lo:g}, {new_hi:g}]", [(name, hook)], layer, head)


def _target_range(to: Any) -> tuple[float, float]:
    """rescale_beta's `to` as (lo, hi), or one sentence on what it must be."""
    try:
        pair = [] if isinstance(to, (str, bytes)) else [float(x) for x in to]
    except (TypeError, ValueError):
        pair = []
    if len(pair) != 2:
        raise DeltalensError(f"to= is a target range (lo, hi), e.g. to=(0.0, 1.0); got {to!r}.")
    return pair[0], pair[1]


@integer_indices("layer", "head", "factor")
def clip_beta(model, layer: int, head: int | None, hi: float = 1.0, factor: int | None = None) -> Intervention:
    """beta' = min(beta, hi) on a head: with hi = 1 the negative eigenvalues go (1 - beta >= 0), but so
    does part of every write with beta > 1 (beta k v^T); split_interventions.clip_transition keeps it.

    >>> dl.accuracy_under(model, batch, dl.clip_beta(model, 0, 3, hi=1.0)) < 0.8
    True
    """
    require_delta_rule(model, "beta to clip")
    _check_head(model, layer, head)
    if not 0.0 <= float(hi) <= 2.0:  # NaN fails too
        raise DeltalensError(f"the beta clip needs 0 <= hi <= 2, got {hi}.")
    n_factors = check_factor(model, factor, layer)
    heads = slice(None) if head is None else head
    where_index = (slice(None), slice(None), heads) + ((factor,) if n_factors and factor is not None else ())
    ceiling = float(hi)

    def hook(beta, hook):  # (B, T, H[, n])
        out = beta.clone()
        out[where_index] = beta[where_index].clamp(max=ceiling)
        return out

    where = (
        f"L{layer}" + ("" if head is None else f"H{head}") + (f"F{factor}" if n_factors and factor is not None else "")
    )
    return Intervention(f"{where} beta clipped at {ceiling:g}", [(f"blocks.{layer}.attn.hook_beta", hook)], layer, head)


@integer_indices("layer", "head", "factor")
def reflect_beta(model, layer: int, head: int | None, factor: int | None = None) -> Intervention:
    """beta' = 2 - beta on a head: the transition's eigenvalue along k_t, 1 - beta, becomes beta - 1,
    its mirror image. Every contraction keeps its size |1 - beta| and flips its sign, so a head that
    needs the negative eigenvalue loses it (and a [0, 1] head gains one), while one that only needs
    how much it forgets keeps that. The write strength moves with it (beta' k v^T): a reflection
    (beta 2) becomes the identity along k with no write, an erase-and-write (beta 1) stays as it is.

    >>> accuracy = dl.accuracy_under(model, batch, dl.reflect_beta(model, 0, 3))
    >>> 0.0 <= accuracy <= 1.0
    True
    """
    require_delta_rule(model, "beta to reflect")
    _check_head(model, layer, head)
    n_factors = check_factor(model, factor, layer)
    heads = slice(None) if head is None else head
    where_index = (slice(None), slice(None), heads) + ((factor,) if n_factors and factor is not None else ())

    def hook(beta, hook):  # (B, T, H[, n])
        out = beta.clone()
        out[where_index] = 2.0 - beta[where_index]
        return out

    where = (
        f"L{layer}" + ("" if head is None else f"H{head}") + (f"F{factor}" if n_factors and factor is not None else "")
    )
    return Intervention(f"{where} beta -> 2 - beta", [(f"blocks.{layer}.attn.hook_beta", hook)], layer, head)


# ---- the decay gate ---------------------------------------------------------------------------


@integer_indices("layer", "head")
def clamp_gate(model, layer: int, head: int | None, lo: float = 1.0, hi: float = 1.0) -> Intervention:
    """Clamp a head's decay alpha_t (blocks.{layer}.attn.hook_gate) into [lo, hi]; the default [1, 1]
    switches forgetting off. Same as `model.set_gate_range(layer, head, lo, hi)`, as a hook.

    >>> gated = dl.build("gated_deltanet", vocab_size=32, hidden_size=32, num_hidden_layers=1, num_heads=2)
    >>> intervention = dl.clamp_gate(gated, 0, 1)          # head 1 of layer 0 forgets nothing
    >>> intervention.layer, intervention.head
    (0, 1)
    """
    require_delta_rule(model, "decay gate")
    _check_head(model, layer, head)
    if not getattr(model, "gated", False):
        value_gated = site_layers(model, "vgate")
        value_side = " (its value gate, hook_vgate, takes a hook: run_with_hooks)" if value_gated else ""
        raise DeltalensError(
            f"{article_of(architecture_of(model))}'s delta-rule layers have no decay gate (no hook_gate): its state "
            f"does not decay, so there is no gate to clamp{value_side}."
        )
    if not 0.0 <= lo <= hi <= 1.0:
        raise DeltalensError(f"the gate range needs 0 <= lo <= hi <= 1, got [{lo}, {hi}].")
    heads = slice(None) if head is None else head

    def hook(alpha, hook):  # (B, T, H)
        out = alpha.clone()
        out[:, :, heads] = alpha[:, :, heads].clamp(lo, hi)
        return out

    where = f"L{layer}" + ("" if head is None else f"H{head}")
    return Intervention(f"{where} gate in [{lo:g}, {hi:g}]", [(f"blocks.{layer}.attn.hook_gate", hook)], layer, head)


# ---- ablation -------------------------------------------------------------------------------


@torch.no_grad()
def head_means(model, batch: dict[str, torch.Tensor], site: str = "z") -> dict[int, torch.Tensor]:
    """layer -> mean of blocks.{layer}.attn.hook_{site} over the batch's real tokens, (H, ...).

    >>> means = dl.head_means(model, batch)               # layer -> mean hook_z, for mean ablation
    >>> sorted(means)
    [0, 1]
    """
    cap = capture(model, batch, names=(site,))
    # the layers that have the site (a hybrid's attention layers have no state; their z has its own head count)
    return {
        layer: cap.layer(site, layer).mean(0)
        for layer in range(cap.n_layers)
        if f"blocks.{layer}.attn.hook_{site}" in cap
    }


@integer_indices("layer", "head")
def ablate_head(
    model,
    layer: int,
    head: int,
    method: str = "zero",
    site: str = "z",
    reference: dict[str, torch.Tensor] | None = None,
    mean: torch.Tensor | None = None,
    positions: Positions = None,
) -> Intervention:
    """Zero- or mean-ablate one head's read-out (site "z") or state (site "state").

    Mean ablation uses `mean` ((H, ...) or the head's own (...)) or computes it from the real tokens
    of `reference` (a batch). positions: None = every position.

    >>> dl.accuracy_under(model, batch, dl.ablate_head(model, 0, 3)) < 0.8
    True
    """
    if method not in ("zero", "mean"):
        raise DeltalensError(f"ablation method must be 'zero' or 'mean', got {method!r}.")
    if site not in ("z", "state"):
        raise DeltalensError(f"ablation site must be 'z' (the head's read-out) or 'state' (S_t), got {site!r}.")
    names = expand_names(model, [site])  # raises for an LSTM (no heads) or a state outside DeltaNet
    _check_head(model, layer, head)
    name = f"blocks.{layer % model.cfg.n_layers}.attn.hook_{site}"
    if name not in names:  # a hybrid's softmax-attention layer has no state
        layers = sorted({int(n.split(".")[1]) for n in names})
        raise DeltalensError(f"layer {layer} has no hook_{site}; the layers that have one are {layers}.")
    value = None
    if method == "mean":
        if mean is None:
            if reference is None:
                raise DeltalensError("mean ablation needs a reference batch (reference=...) or a mean tensor.")
            mean = head_means(model, reference, site)[layer]
        head_ndim = 1 if site == "z" else 2  # (d_v,) or (d_k, d_v)
        value = mean[head] if mean.ndim == head_ndim + 1 else mean

    def hook(act, hook):  # (B, T, H, ...)
        B, T = act.shape[:2]
        mask = _position_mask(positions, B, T, act.device)
        fill = torch.zeros(act.shape[3:], dtype=act.dtype) if value is None else value
        return _edit(act, fill, head, mask)

    arch = architecture_of(model)
    return Intervention(
        f"L{layer}H{head} {method}-ablate {site}" + ("" if is_delta_rule(arch) else f" ({arch})"),
        [(name, hook)],
        layer,
        head,
    )


# ---- patching -------------------------------------------------------------------------------


def _source_tensor(source: Any, name: str) -> torch.Tensor:
    if torch.is_tensor(source):
        return source
    if isinstance(source, Capture):
        return source.padded(name)
    try:
        return source[name]
    except (KeyError, TypeError):
        raise DeltalensError(f"the patch source has no {name!r}; run the source with that hook cached.") from None


@integer_indices("head")
def patch_activation(
    name: str, source: Any, positions: Positions = None, head: int | None = None, label: str | None = None
) -> Intervention:
    """Replace activation `name` by the source run's at `positions` (and only head `head`).

    source: a tensor shaped like the activation (B, T, ...), a cache from run_with_cache (or any
    mapping name -> tensor), or a Capture (padded back to (B, T, ...)). Positions: an index, a list
    of indices, a (T,) or (B, T) bool mask, or None for all. Heads sit on dim 2 (TransformerLens order).

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> _, cache = model.run_with_cache(clean["tokens"])
    >>> patch = dl.patch_activation(dl.act_name("z", 0), cache, head=3)
    >>> dl.accuracy_under(model, corrupt, patch) <= 1.0
    True
    """
    tensor = _source_tensor(source, name).detach()
    if head is not None:  # checked here, not as an IndexError inside the forward's hook
        n_heads = tensor.shape[2] if tensor.ndim > 2 else 0
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads:
            raise DeltalensError(
                f"head {head!r} is out of range: {name} has "
                + (f"heads 0..{n_heads - 1}." if n_heads else "no head axis (pass head=None).")
            )

    def hook(act, hook):
        B, T = act.shape[:2]
        if tensor.shape[0] != B or tensor.shape[2:] != act.shape[2:] or tensor.shape[1] < T:
            raise DeltalensError(
                f"the patch source for {name} has shape {tuple(tensor.shape)}, the run "
                f"{tuple(act.shape)}; patch between runs of the same batch size and length."
            )
        src = tensor[:, :T]
        if head is not None:
            src = src[:, :, head]
        mask = _position_mask(positions, B, T, act.device)
        return _edit(
            act, src, head, mask if mask is not None else torch.ones(B, T, dtype=torch.bool, device=act.device)
        )

    where = f" H{head}" if head is not None else ""
    return Intervention(label or f"patch {name}{where}", [(name, hook)], None, head)


@integer_indices("layer", "head")
def patch_state(layer: int, head: int | None, source: Any, positions: Positions = None) -> Intervention:
    """Patch one head's state S_t (blocks.{layer}.attn.hook_state) from another run at `positions`.

    The patched S_t is what o_t reads and what the recurrence continues from (replacement semantics).

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> _, cache = model.run_with_cache(clean["tokens"], names_filter=lambda name: name.endswith("hook_state"))
    >>> patch = dl.patch_state(0, 3, cache)
    >>> patch.layer, patch.head
    (0, 3)
    """
    name = f"blocks.{layer}.attn.hook_state"
    iv = patch_activation(name, source, positions, head, label=f"patch L{layer}H{head} state")
    iv.layer = layer
    return iv
