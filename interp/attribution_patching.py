"""Attribution patching: every head x position of a model ranked from one forward and one backward pass.

Activation patching (interp/patching.py) costs one forward per (layer, head[, position]). Attribution
patching (Nanda 2023; Syed, Rager, Conmy 2023) replaces each patch by its first-order estimate at the
corrupted run:

    metric(corrupt with a_clean at one site) - metric(corrupt)  ~  dmetric/da|corrupt . (a_clean - a_corrupt)

summed over the site's features, so one clean forward (no gradient), one corrupted forward and one
backward give every estimate at once (interp/attribution_runs.py runs them without the work the metric never
reads: logits only where it looks, the prefix both batches share once, no gradients for the weights).
Sites (blocks.{l}.attn.hook_x, per head and position):

* "z"      the head's read-out (every architecture with heads; the Transformer's own hook_z);
* "beta"   the delta rule's write strength (factors summed for a DeltaProduct);
* "state"  S_t under replacement semantics (the recurrence continues from the patched S_t), whose
  gradient is not the read-out's alone: with g_t = dmetric/do_t (hook_z's gradient) and the per-token
  transition M_t = H_{t,n-1} ... H_{t,0} alpha_t (H = I - beta k k^T), the adjoint runs backwards,

      lambda_T = q~_T g_T^T,   lambda_t = q~_t g_t^T + M_{t+1}^T lambda_{t+1}

  and lambda_t . (S_clean_t - S_corrupt_t) is the estimate (one scan over (B, H, d_k, d_v) per layer).

`attribution_of_intervention` is the same estimate for a per-head intervention (a sweep's beta rescale
or ablation): its hook applied to the captured activation gives a_new - a, so a whole model's heads are
ranked from one forward and backward; `interp/head_sweep.sweep(..., top_k=)` verifies only the top ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.interp.attribution_runs import SiteNames, attribution_runs
from deltalens.interp.patching import PatchGrid, _check_site, tokens_of
from deltalens.models.architecture import architecture_of, is_delta_rule, require_householder, require_one_pattern

__all__ = ["AttributionResult", "attribution_patching", "attribution_of_intervention", "state_adjoint", "reveal_margin"]

Metric = Callable[[torch.Tensor], torch.Tensor]


@dataclass(repr=False)
class AttributionResult(Summary):
    """Per site, (L, H, T) first-order estimates of patching that head at that position.

    Printed (or shown in a notebook) as a one-screen summary: the metric on both runs, the cost, and per
    head the estimate at each site summed over positions, largest |z| first; the tensors are in `grids`.

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> result = dl.attribution_patching(model, clean, corrupt, dl.reveal_metric(clean, corrupt))
    >>> result.top("z"), tuple(result.grids["z"].shape[:2])
    ((0, 3), (2, 4))
    >>> repr(result).startswith("AttributionResult (hook_z): metric clean")
    True
    """

    grids: dict[str, torch.Tensor]
    clean: float
    corrupt: float
    seconds: float  # wall time of the whole estimate
    forward_seconds: float  # wall time of one plain forward of the corrupted batch, for the cost ratio
    timings: dict[str, float] = field(default_factory=dict)  # seconds per part: shared prefix, clean, corrupt+backward

    @property
    def forward_equivalents(self) -> float:
        return self.seconds / self.forward_seconds if self.forward_seconds > 0 else float("nan")

    def per_head(self, site: str = "z") -> torch.Tensor:
        """(L, H): the estimate of patching the head at every position (sum over positions)."""
        return self.grids[site].sum(-1)

    def as_grid(self, site: str = "z", per_position: bool = False) -> PatchGrid:
        """A PatchGrid (values = corrupt + estimate), to set beside activation patching's."""
        values = self.grids[site] if per_position else self.per_head(site)
        return PatchGrid(
            values + self.corrupt, self.clean, self.corrupt, site, n_forwards=0, method="attribution patching"
        )

    def summary(self, site: str = "z") -> str:
        """One sentence: the head whose estimate stands out, with its sign (interp/patching.py's rule), or none."""
        from deltalens.interp.patching import SPAN_FLOOR, standout_sentence

        note = ""
        if abs(self.clean - self.corrupt) < SPAN_FLOOR:
            note = (
                f" (the clean and corrupted runs differ by only {abs(self.clean - self.corrupt):.3g}, under the floor "
                f"of {SPAN_FLOOR:g}: fractions of that difference are not shown)"
            )
        return standout_sentence(self.per_head(site), f"estimated change of the metric, hook_{site}") + note

    def top(self, site: str = "z") -> tuple[int, int]:
        """(layer, head) of the largest estimate (a layer without the site, NaN, never counts)."""
        grid = self.per_head(site)
        return divmod(int(torch.nan_to_num(grid.abs(), nan=-1.0).flatten().argmax()), grid.shape[1])

    def title(self) -> str:
        sites = ", ".join(f"hook_{site}" for site in self.grids)
        layer, head = self.top(next(iter(self.grids)))
        return (
            f"AttributionResult ({sites}): metric clean {self.clean:.3f}, corrupt {self.corrupt:.3f}; "
            f"largest estimate at L{layer}H{head}; {self.forward_equivalents:.1f} forward-equivalents"
        )

    def display_frame(self):
        import pandas as pd

        first = next(iter(self.grids))
        L, H = self.per_head(first).shape
        rows = [
            {"layer": layer, "head": head, **{f"ap_{s}": float(self.per_head(s)[layer, head]) for s in self.grids}}
            for layer in range(L)
            for head in range(H)
            if not bool(torch.isnan(self.per_head(first)[layer, head]))
        ]
        return pd.DataFrame(rows).sort_values(f"ap_{first}", key=abs, ascending=False, ignore_index=True)


def _inputs(model, layer: int, acts: dict) -> dict:
    from deltalens.interp.effective_attention import layer_inputs

    return layer_inputs(model, acts, layer)


@torch.no_grad()
def state_adjoint(q, k, beta, log_gate, grad_z, scale: Optional[float] = None) -> torch.Tensor:
    """lambda (B, T, H, d_k, d_v) = dmetric/dS_t with S_t replaced (module docstring), from hook_z's gradient.

    q (B, T, H, d_k); k (B, T, H, n, d_k); beta (B, T, H, n); log_gate (B, T, H), (B, T, H, d_k) per key
    channel (KDA), or None; grad_z (B, T, H, d_v).
    """
    B, T, H, K = q.shape
    n = k.shape[3]
    scale = K**-0.5 if scale is None else scale
    qs, ks, bs, g = q.double() * scale, k.double(), beta.double(), grad_z.double()
    alpha = None if log_gate is None else log_gate.double().exp().reshape(B, T, H, -1)  # (..., 1) or (..., d_k)
    out = torch.zeros(B, T, H, K, g.shape[-1], dtype=torch.float64, device=q.device)
    lam = torch.zeros(B, H, K, g.shape[-1], dtype=torch.float64, device=q.device)
    for t in range(T - 1, -1, -1):
        if t < T - 1:  # lam <- M_{t+1}^T lam = Diag(alpha) H_0 ... H_{n-1} lam (H symmetric)
            for j in range(n - 1, -1, -1):
                kj = ks[:, t + 1, :, j]  # (B, H, K)
                lam = (
                    lam
                    - bs[:, t + 1, :, j, None, None]
                    * kj[..., None]
                    * torch.einsum("bhk,bhkv->bhv", kj, lam)[:, :, None]
                )
            if alpha is not None:
                lam = lam * alpha[:, t + 1, :, :, None]
        lam = lam + qs[:, t, :, :, None] * g[:, t, :, None, :]
        out[:, t] = lam
    return out


def _names(model, sites: Sequence[str]) -> dict[str, list[str]]:
    L = model.cfg.n_layers
    needed = {site: [] for site in sites}
    for site in sites:
        for layer in range(L):
            needed[site].append(f"blocks.{layer}.attn.hook_{site}")
    return needed


def _sum_features(x: torch.Tensor) -> torch.Tensor:
    """(B, T, H, ...) -> (T, H): summed over the batch and every trailing feature axis."""
    return x.reshape(*x.shape[:3], -1).sum(-1).sum(0)


def _site_grid(model, site: str, kept, runs, shape: tuple[int, int, int]) -> torch.Tensor:
    """One site's (layers, heads, positions) estimates: gradient x (clean - corrupt), or for "state" the state
    adjoint x (clean - corrupt); NaN for a layer without the hook (a hybrid's) or with another head count."""
    L, H, T = shape
    clean_cache, acts, grad_of, first = runs.clean, runs.corrupt, runs.grads, runs.start
    grid = torch.zeros(L, H, T, dtype=torch.float64)  # 0 before `first`: both runs are the same there
    for layer in range(L):
        name = f"blocks.{layer}.attn.hook_{site}"
        if name not in kept or acts[name].shape[2] != H:
            grid[layer] = float("nan")
            continue
        if site == "state":
            inp = _inputs(model, layer, acts)
            zname = f"blocks.{layer}.attn.hook_z"
            weight = state_adjoint(
                inp["q"], inp["k"], inp["beta"], inp["log_gate"], grad_of.get(zname, torch.zeros_like(acts[zname]))
            )
        else:
            weight = grad_of[name].double()
        diff = clean_cache[name].double() - acts[name].detach().double()
        grid[layer, :, first:] = _sum_features(weight * diff).T
    return grid


def attribution_patching(
    model,
    clean,
    corrupt,
    metric: Metric,
    sites: Sequence[str] = ("z",),
    time_forward: bool = True,
) -> AttributionResult:
    """First-order estimates of patching each head at each position from the clean into the corrupted run.

    clean, corrupt: batches or token tensors of one shape; metric(logits) -> a scalar tensor (differentiable);
    sites: any of "z", "beta", "state" ("z", "q", "k", "v" on a Transformer). One forward of the clean run, one
    forward and one backward of the corrupted run (plus, for "state", one adjoint scan per layer); on a delta-rule
    LM the prefix both batches share runs once and the LM head only where the metric reads (attribution_runs).
    time_forward: first time one plain forward of the corrupted batch (outside `seconds`), the unit of
    `forward_equivalents`; False skips it (forward_equivalents is then NaN).

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> result = dl.attribution_patching(model, clean, corrupt, dl.reveal_metric(clean, corrupt), sites=("z", "beta"))
    >>> result.top("z"), sorted(result.grids)
    ((0, 3), ['beta', 'z'])
    """
    sites = (sites,) if isinstance(sites, str) else tuple(sites)
    if not sites:
        raise DeltalensError(
            "sites names no site: give one or more of 'z', 'beta', 'state' (a Transformer: z, q, k, v)"
        )
    for site in sites:
        _check_site(model, site)
    if "state" in sites:  # its adjoint scan runs the transitions alpha (I - beta k k^T) backwards
        require_householder(model, "attribution patching of 'state'")
        require_one_pattern(model, "attribution patching of 'state'")
    if "state" in sites and bool(getattr(model, "state_norm_every", 0)):  # its estimates anti-correlate (-0.97)
        raise DeltalensError(
            "attribution patching of 'state' is wrong on a model that renormalises its state (state_norm_every > 0): "
            "the norm is not linear, so the first-order estimate misleads; use sites=('z',) or activation patching "
            "(dl.patch_heads)"
        )
    device = next(model.parameters()).device
    clean_t, corrupt_t = tokens_of(clean).to(device), tokens_of(corrupt).to(device)
    if clean_t.shape != corrupt_t.shape:
        raise DeltalensError(f"clean {tuple(clean_t.shape)} and corrupt {tuple(corrupt_t.shape)} runs must match.")
    L, delta = model.cfg.n_layers, is_delta_rule(architecture_of(model))
    hooks = model.hook_dict  # a hybrid's layers without a site are left out (NaN rows in its grid)
    want_state = "state" in sites
    grad_sites = tuple(s for s in sites if s != "state") + (("z",) if want_state and "z" not in sites else ())
    extra = ("q", "k", "beta", "gate") if want_state else ()
    was_training = model.training
    model.eval()
    try:
        forward_seconds = 0.0
        if time_forward:
            with torch.no_grad():  # the cost reference: one plain forward, not counted in `seconds`
                start = time.perf_counter()
                model(corrupt_t)
                forward_seconds = time.perf_counter() - start
        start = time.perf_counter()
        names = SiteNames(
            keep=frozenset(n for layer in range(L) for s in sites if (n := f"blocks.{layer}.attn.hook_{s}") in hooks),
            watch=frozenset(
                n for layer in range(L) for s in grad_sites if (n := f"blocks.{layer}.attn.hook_{s}") in hooks
            ),
            store=frozenset(  # hook_gate only where the state decays
                name
                for layer in range(L)
                for s in extra + (("state",) if want_state else ())
                if (name := f"blocks.{layer}.attn.hook_{s}") in model.hook_dict
            ),
        )
        runs = attribution_runs(model, clean_t, corrupt_t, metric, names)

        if "state" in sites and not delta:
            raise DeltalensError("only the delta rule has a matrix state to attribute.")
        shape = (L, model.cfg.n_heads, corrupt_t.shape[1])
        grids = {site: _site_grid(model, site, names.keep, runs, shape) for site in sites}
        seconds = time.perf_counter() - start
    finally:
        model.train(was_training)
    return AttributionResult(grids, runs.clean_value, runs.corrupt_value, seconds, forward_seconds, runs.timings)


def reveal_margin(batch: dict) -> Metric:
    """metric(logits) = mean over a batch's reveals of logit[true value] - mean logit[the other values]: a
    smooth stand-in for reveal accuracy that, unlike the log-probability, does not saturate once the model is sure."""
    from deltalens.interp.logit_attribution import reveal_rows

    positions, answer, against = reveal_rows(batch)
    b, t = positions.nonzero(as_tuple=True)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        rows = logits[b.to(logits.device), t.to(logits.device)].float()
        good = rows.gather(1, answer.to(logits.device)[:, None])[:, 0]
        return (good - rows.gather(1, against.to(logits.device)).mean(1)).mean()

    return metric


def attribution_of_intervention(model, batch: dict, build, metric: Optional[Metric] = None) -> torch.Tensor:
    """(L, H): first-order change of `metric` (default: `reveal_margin`) when build(model, l, h)'s
    Intervention is applied, for every head, from one forward and one backward of `batch`.

    Each Intervention's hooks are applied to the captured activations to get the change a_new - a (no extra
    forward); a change to hook_state is weighted by the state adjoint (module docstring).

    >>> change = dl.attribution_of_intervention(model, batch, lambda m, l, h: dl.rescale_beta(m, l, h, to=(0.0, 1.0)))
    >>> tuple(change.shape)                                # (layer, head)
    (2, 4)
    """
    metric = reveal_margin(batch) if metric is None else metric
    L, H = model.cfg.n_layers, model.cfg.n_heads
    plans = {(layer, head): build(model, layer, head) for layer in range(L) for head in range(H)}
    names = {name for iv in plans.values() for name, _ in iv.hooks}
    state_layers = {int(n.split(".")[1]) for n in names if n.endswith("hook_state")}
    if state_layers:  # the state adjoint (as attribution_patching's)
        require_householder(model, "the attribution of a state intervention")
        require_one_pattern(model, "the attribution of a state intervention")
    grad_names = {n for n in names if not n.endswith("hook_state")} | {
        f"blocks.{lay}.attn.hook_z" for lay in state_layers
    }
    store = names | {f"blocks.{lay}.attn.hook_{x}" for lay in state_layers for x in ("q", "k", "beta", "gate")}
    store = {name for name in store if name in model.hook_dict}
    acts: dict[str, torch.Tensor] = {}
    device = next(model.parameters()).device
    tokens = tokens_of(batch).to(device)

    def grab(act, hook, key):
        acts[key] = act

    was_training = model.training
    model.eval()
    try:
        hooks = [(name, partial(grab, key=name)) for name in store | grad_names]
        with torch.enable_grad(), model.hooks(fwd_hooks=hooks):
            value = metric(model(tokens))
            wanted = sorted(n for n in grad_names if n in acts and acts[n].requires_grad)
            grads = dict(zip(wanted, torch.autograd.grad(value, [acts[n] for n in wanted], allow_unused=True)))
    finally:
        model.train(was_training)
    lambdas = {}
    for layer in state_layers:
        inp = _inputs(model, layer, {k: v.detach() for k, v in acts.items()})
        g = grads.get(f"blocks.{layer}.attn.hook_z")
        lambdas[f"blocks.{layer}.attn.hook_state"] = state_adjoint(
            inp["q"], inp["k"], inp["beta"], inp["log_gate"], torch.zeros_like(inp["z"]) if g is None else g
        )
    out = torch.zeros(L, H, dtype=torch.float64)
    with torch.no_grad():
        for (layer, head), iv in plans.items():
            total = 0.0
            for name, fn in iv.hooks:
                act = acts[name].detach()
                new = fn(act.clone(), _HookName(name))
                weight = lambdas.get(name, grads.get(name))
                if weight is None or new is None:
                    continue
                total += float((weight.double() * (new.double() - act.double())).sum())
            out[layer, head] = total
    return out


class _HookName:
    """Stands in for the HookPoint an intervention's hook function receives (it reads only .name)."""

    def __init__(self, name: str) -> None:
        self.name = name
