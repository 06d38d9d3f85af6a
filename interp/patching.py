"""Activation patching over layers x heads (x positions) and path patching into a receiver head's input.

Both follow the "denoising" convention (Wang et al. 2022; Heimersheim & Nanda 2024): run the corrupted
input, put back an activation from the clean run, and read a metric of the logits (e.g.
interp/trace_pairs.py's `reveal_metric`, the clean-minus-corrupt answer logit difference):

* `patch_heads(model, clean, corrupt, metric, site="z")`: for every (layer, head) (and, with
  per_position=True, every position) the metric of the corrupted run with that head's
  blocks.{l}.attn.hook_{site} taken from the clean run. Sites: "z" on every architecture with heads
  (the Transformer through TransformerLens's own hook_z), and on the delta rule "beta", "state"
  (replacement semantics: the recurrence continues from the patched S_t), "q", "k", "v".
* `path_patch(model, clean, corrupt, metric, sender, receiver, via)`: the effect of the sender head's
  clean output that reaches the metric only through the receiver head's `via` input ("q", "k", "v";
  "beta" on the delta rule). Step 1: run the corrupted input with the sender's hook_z from the clean
  run and every other head's hook_z frozen at its corrupted value (MLPs recompute), and record the
  receiver's hook_{via}; step 2: run the corrupted input with only the receiver's hook_{via} set to
  that recording. sender=None sweeps every head of the layers before the receiver's.

`PatchGrid.normalised()` maps the metric to (patched - corrupt) / (clean - corrupt): 0 = nothing
restored, 1 = the clean run's value. `n_forwards` counts the model runs, the cost in forward-equivalents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.colour_scales import KINDS
from deltalens.core.display import Summary
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.capture_names import site_layers
from deltalens.interp.trace_pairs import metric_value
from deltalens.models.architecture import architecture_of, is_delta_rule

__all__ = ["PatchGrid", "patch_heads", "path_patch", "patch_grid_figure", "tokens_of"]

Metric = Callable[[torch.Tensor], torch.Tensor]
# a patching result's fractions restored are shown only when the clean and corrupted runs' metrics differ by this
# much (a logit difference: below a tenth of a nat a fraction of it is noise over a near-zero denominator)
SPAN_FLOOR = 0.1
# a "top head" is named only when its |effect| is at least STANDOUT times the next head's and not negligible
STANDOUT = 2.0
NEGLIGIBLE = 1e-3


def standout_head(grid: torch.Tensor) -> tuple[int, int, float] | None:
    """(layer, head, value) of the largest |value| of an (L, H) grid when it stands out: at least STANDOUT times
    the second largest |value| and above NEGLIGIBLE (NaN cells, layers without the site, never count)."""
    flat = torch.nan_to_num(grid.abs().double(), nan=-1.0).flatten()
    if flat.numel() == 0:
        return None
    order = flat.argsort(descending=True)
    best = float(flat[order[0]])
    second = float(flat[order[1]]) if flat.numel() > 1 else 0.0
    if best <= NEGLIGIBLE or best < STANDOUT * max(second, 0.0):
        return None
    layer, head = divmod(int(order[0]), grid.shape[1])
    return layer, head, float(grid[layer, head])


def standout_sentence(grid: torch.Tensor, what: str) -> str:
    """'L0H3 stands out: +0.95 (what), 4.1x the next head' or 'no head stands out ...', the sign named."""
    found = standout_head(grid)
    flat = torch.nan_to_num(grid.abs().double(), nan=-1.0).flatten()
    order = flat.argsort(descending=True)
    if found is None:
        if flat.numel() == 0 or float(flat[order[0]]) <= NEGLIGIBLE:
            return f"no head stands out: every head's {what} is at most {NEGLIGIBLE:g} in size"
        first, second = divmod(int(order[0]), grid.shape[1]), divmod(int(order[1]), grid.shape[1])
        return (
            f"no head stands out: the largest {what}, L{first[0]}H{first[1]} "
            f"({float(grid[first]):+.3f}), is not {STANDOUT:g}x the next, L{second[0]}H{second[1]} "
            f"({float(grid[second]):+.3f})"
        )
    layer, head, value = found
    nxt = float(flat[order[1]]) if flat.numel() > 1 else 0.0
    beside = f"{float(flat[order[0]]) / nxt:.1f}x the next head" if nxt > NEGLIGIBLE else "no other head has an effect"
    direction = "raises" if value > 0 else "lowers"
    return f"L{layer}H{head} stands out: it {direction} the metric ({value:+.3f}, {what}), {beside}"


DELTA_SITES = ("z", "beta", "state", "q", "k", "v")
TRANSFORMER_SITES = ("z", "q", "k", "v")


def tokens_of(x) -> torch.Tensor:
    """The (batch, pos) token tensor of a batch dict or a tensor."""
    tokens = x["tokens"] if isinstance(x, dict) else torch.as_tensor(x)
    return tokens[None] if tokens.ndim == 1 else tokens


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _check_site(model, site: str, what: str = "site") -> None:
    arch = architecture_of(model)
    if arch == "lstm" or not model.cfg.n_heads:
        raise DeltalensError("an LSTM has no heads to patch; patch its hidden state with patch_activation instead.")
    allowed = DELTA_SITES if is_delta_rule(arch) else TRANSFORMER_SITES
    if site not in allowed:
        raise DeltalensError(f"the {what} must be one of {', '.join(allowed)} for this {arch}; got {site!r}.")


def _hook_name(layer: int, site: str) -> str:
    return f"blocks.{layer}.attn.hook_{site}"


def _check_head(model, layer: int, head: int, what: str) -> None:
    if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
        raise DeltalensError(
            f"the {what} (layer {layer}, head {head}) is outside this model's "
            f"{model.cfg.n_layers} layers x {model.cfg.n_heads} heads."
        )


@torch.no_grad()
def _run(model, tokens: torch.Tensor, metric: Metric, hooks=()) -> float:
    with model.hooks(fwd_hooks=list(hooks)):
        logits = model(tokens)
    return metric_value(metric(logits))


@torch.no_grad()
def _cache(model, tokens: torch.Tensor, names: set[str]) -> tuple[torch.Tensor, dict]:
    logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    return logits, {name: cache[name] for name in names}


@dataclass(repr=False)
class PatchGrid(Summary):
    """The metric of the corrupted run with each (layer, head[, position]) patched from the clean run.

    >>> import torch
    >>> grid = dl.PatchGrid(torch.tensor([[0.0, 2.0]]), clean=2.0, corrupt=0.0, site="z", n_forwards=4)
    >>> grid.normalised().tolist(), grid.top()
    ([[0.0, 1.0]], (0, 1))
    """

    values: torch.Tensor  # (L, H) or (L, H, T)
    clean: float  # metric of the clean run
    corrupt: float  # metric of the corrupted run
    site: str
    n_forwards: int  # model runs it took (forward-equivalents)
    method: str = "activation patching"

    @property
    def span_ok(self) -> bool:
        """Whether the clean and corrupted runs differ by at least SPAN_FLOOR (a fraction restored means something)."""
        return abs(self.clean - self.corrupt) >= SPAN_FLOOR

    def span_sentence(self) -> str | None:
        """One sentence when the runs barely differ (fractions would blow up), else None."""
        if self.span_ok:
            return None
        return (
            f"the clean and corrupted runs differ by only {abs(self.clean - self.corrupt):.3g} "
            f"(clean {self.clean:.3f}, corrupt {self.corrupt:.3f}), under the floor of {SPAN_FLOOR:g}: there is too "
            "little to restore for a fraction restored to mean anything; the grid shows each head's raw change of the "
            "metric instead"
        )

    def normalised(self) -> torch.Tensor:
        """The fraction of the clean-minus-corrupt difference each patch restores; refused under SPAN_FLOOR."""
        sentence = self.span_sentence()
        if sentence is not None:
            raise DeltalensError(sentence[0].upper() + sentence[1:] + ".")
        return (self.values - self.corrupt) / (self.clean - self.corrupt)

    def standout(self) -> tuple[int, int, float] | None:
        """(layer, head, effect) of the head whose effect stands out (`standout_head`), else None."""
        return standout_head(self.per_head())

    def summary(self) -> str:
        """One sentence: the head that stands out, with its sign, or that none does (and why)."""
        return standout_sentence(self.per_head(), "effect on the metric")

    def per_head(self) -> torch.Tensor:
        """(L, H): summed over positions where the grid has them (the effect minus the corrupted baseline)."""
        if self.values.ndim == 2:
            return self.values - self.corrupt
        return (self.values - self.corrupt).sum(-1)

    def top(self) -> tuple[int, int]:
        """(layer, head) of the largest effect (a layer without the site, NaN, never counts)."""
        flat = int(torch.nan_to_num(self.per_head().abs(), nan=-1.0).flatten().argmax())
        return divmod(flat, self.values.shape[1])

    def frame(self) -> pd.DataFrame:
        grid = self.per_head()
        rows = [
            {"layer": layer, "head": head, "effect": float(grid[layer, head])}
            for layer in range(grid.shape[0])
            for head in range(grid.shape[1])
            if not bool(torch.isnan(grid[layer, head]))  # a hybrid's layer without the site
        ]
        return pd.DataFrame(rows).sort_values("effect", key=abs, ascending=False, ignore_index=True)

    def title(self) -> str:
        return (
            f"PatchGrid ({self.method}, hook_{self.site}): clean {self.clean:.3f}, corrupt {self.corrupt:.3f}, "
            f"{self.n_forwards} forward-equivalents; largest effect at L{self.top()[0]}H{self.top()[1]}"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.frame()


@integer_indices("on_head")
def patch_heads(
    model,
    clean,
    corrupt,
    metric: Metric,
    site: str = "z",
    per_position: bool = False,
    progress: bool = True,
    on_head: Optional[Callable[[int, int], None]] = None,
) -> PatchGrid:
    """Activation patching of every head: for each (layer, head), the metric of the corrupted run with that
    head's blocks.{layer}.attn.hook_{site} taken from the clean run (with per_position, at one position at
    a time).

    clean, corrupt: batch dicts (with "tokens") or token tensors of the same shape. metric: a function of
    the logits (batch, pos, vocab) returning a scalar tensor, larger when the clean answer wins, e.g.
    `reveal_metric(clean, corrupt)` (interp/trace_pairs.py: the clean-minus-corrupt answer logit
    difference at the reveals). site: "z" everywhere; "beta", "state", "q", "k", "v" on the delta rule.
    on_head(layer, head): called before each head's run (a progress bar). Returns a PatchGrid whose
    `normalised()` is 0 where nothing is restored and 1 where the clean value is.

    >>> import deltalens as dl
    >>> model = dl.load("s3-deltanet-neg-statement")
    >>> clean, corrupt = dl.trace_pair(model, 2, seed=0)
    >>> grid = dl.patch_heads(model, clean, corrupt, dl.reveal_metric(clean, corrupt), progress=False)
    >>> tuple(grid.values.shape)
    (2, 4)
    """
    _check_site(model, site)
    clean_t, corrupt_t = tokens_of(clean).to(_device(model)), tokens_of(corrupt).to(_device(model))
    if clean_t.shape != corrupt_t.shape:
        raise DeltalensError(f"clean {tuple(clean_t.shape)} and corrupt {tuple(corrupt_t.shape)} runs must match.")
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, clean_t.shape[1]
    was_training = model.training
    model.eval()
    try:
        layers = site_layers(model, site)  # a hybrid: the layers that have the site (NaN rows elsewhere)
        names = {_hook_name(layer, site) for layer in layers}
        clean_logits, source = _cache(model, clean_t, names)
        clean_value = metric_value(metric(clean_logits))
        corrupt_value = _run(model, corrupt_t, metric)
        shape = (L, H, T) if per_position else (L, H)
        values = torch.full(shape, float("nan"), dtype=torch.float64)
        layers = [layer for layer in layers if source[_hook_name(layer, site)].shape[2] == H]  # the model's heads
        jobs = [
            (layer, head, pos)
            for layer in layers
            for head in range(H)
            for pos in (range(T) if per_position else [None])
        ]
        for layer, head, pos in progress_bar(jobs, desc=f"patching hook_{site}", enabled=progress):
            if on_head is not None and pos in (None, 0):
                on_head(layer, head)
            src = source[_hook_name(layer, site)]

            def hook(act, hook, src=src, head=head, pos=pos):
                out = act.clone()
                if pos is None:
                    out[:, :, head] = src[:, :, head].to(act.dtype)
                else:
                    out[:, pos, head] = src[:, pos, head].to(act.dtype)
                return out

            value = _run(model, corrupt_t, metric, [(_hook_name(layer, site), hook)])
            values[(layer, head) if pos is None else (layer, head, pos)] = value
    finally:
        model.train(was_training)
    return PatchGrid(values, clean_value, corrupt_value, site, n_forwards=len(jobs) + 2)


def _receiver_input(model, corrupt_t, clean_z, corrupt_z, sender, r_layer: int, receiver_name: str) -> torch.Tensor:
    """The receiver's input (hook `receiver_name`) on the corrupted run with every head before its layer frozen at its
    corrupted z, except the sender, which gets its clean z: what the sender's clean output makes of that input."""
    s_layer, s_head = sender
    freeze = []
    for layer in range(r_layer):  # later layers cannot reach the receiver's input
        name = _hook_name(layer, "z")

        def frozen(act, hook, name=name, layer=layer):
            out = corrupt_z[name].to(act.dtype).clone()
            if layer == s_layer:
                out[:, :, s_head] = clean_z[name][:, :, s_head].to(act.dtype)
            return out

        freeze.append((name, frozen))
    recorded = {}

    def record(act, hook):
        recorded["value"] = act.detach().clone()

    with torch.no_grad(), model.hooks(fwd_hooks=freeze + [(receiver_name, record)]):
        model(corrupt_t, return_type=None) if is_delta_rule(architecture_of(model)) else model(corrupt_t)
    return recorded["value"]


def path_patch(
    model,
    clean,
    corrupt,
    metric: Metric,
    sender: Optional[tuple[int, int]],
    receiver: tuple[int, int],
    via: str = "k",
    progress: bool = True,
) -> Union[float, PatchGrid]:
    """The metric of the corrupted run when the sender's clean output reaches it only through the receiver
    head's `via` input (module docstring). sender None: a PatchGrid over every head of the earlier layers
    (NaN from the receiver's layer on).

    >>> clean, corrupt = dl.trace_pair(model, 2)
    >>> grid = dl.path_patch(model, clean, corrupt, dl.reveal_metric(clean, corrupt), None, (1, 0), "k", progress=False)
    >>> tuple(grid.values.shape)                           # senders: every head before layer 1 (NaN after)
    (2, 4)
    """
    if via not in ("q", "k", "v", "beta"):
        raise DeltalensError(f"via must be 'q', 'k', 'v' or 'beta', got {via!r}.")
    _check_site(model, via, what="receiver input")
    r_layer, r_head = receiver
    _check_head(model, r_layer, r_head, "receiver")
    clean_t, corrupt_t = tokens_of(clean).to(_device(model)), tokens_of(corrupt).to(_device(model))
    if clean_t.shape != corrupt_t.shape:
        raise DeltalensError(f"clean {tuple(clean_t.shape)} and corrupt {tuple(corrupt_t.shape)} runs must match.")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    senders = [(layer, head) for layer in range(r_layer) for head in range(H)] if sender is None else [tuple(sender)]
    if not senders:
        raise DeltalensError(f"the receiver sits in layer {r_layer}: no earlier layer has a head to send to it")
    for s_layer, s_head in senders:
        _check_head(model, s_layer, s_head, "sender")
        if s_layer >= r_layer:
            raise DeltalensError(
                f"the sender (layer {s_layer}) must sit in a layer before the receiver's ({r_layer}) "
                "for a path to exist."
            )
    was_training = model.training
    model.eval()
    try:
        z_names = {_hook_name(layer, "z") for layer in range(L)}
        clean_logits, clean_z = _cache(model, clean_t, z_names)
        corrupt_logits, corrupt_z = _cache(model, corrupt_t, z_names)
        clean_value, corrupt_value = metric_value(metric(clean_logits)), metric_value(metric(corrupt_logits))
        receiver_name = _hook_name(r_layer, via)
        results = {}
        for s_layer, s_head in progress_bar(
            senders, desc=f"path patching into L{r_layer}H{r_head} {via}", enabled=progress
        ):
            input_ = _receiver_input(model, corrupt_t, clean_z, corrupt_z, (s_layer, s_head), r_layer, receiver_name)

            def patch(act, hook, recorded=input_):
                out = act.clone()
                out[:, :, r_head] = recorded[:, :, r_head].to(act.dtype)
                return out

            results[(s_layer, s_head)] = _run(model, corrupt_t, metric, [(receiver_name, patch)])
    finally:
        model.train(was_training)
    if sender is not None:
        s_layer, s_head = sender
        return results[(s_layer, s_head)]
    values = torch.full((L, H), float("nan"), dtype=torch.float64)
    for (layer, head), value in results.items():
        values[layer, head] = value
    return PatchGrid(
        values, clean_value, corrupt_value, f"z -> L{r_layer}H{r_head}.{via}", 2 * len(senders) + 2, "path patching"
    )


def patch_grid_figure(
    grid: PatchGrid,
    normalise: bool = True,
    title: Optional[str] = None,
    scale: Optional[tuple[float, float]] = None,
    numbers: bool = False,
) -> go.Figure:
    """Heatmap (layer x head) of a PatchGrid (positions summed), normalised to [0 = corrupt, 1 = clean].

    scale: the colour range (low, high); give two grids the same one to compare them by colour (by default
    each grid spans its own values). numbers: write each cell's value in it.

    >>> import torch, deltalens as dl
    >>> grid = dl.PatchGrid(torch.tensor([[0.0, 2.0], [1.0, 0.0]]), clean=2.0, corrupt=0.0, site="z", n_forwards=6)
    >>> fig = dl.patch_grid_figure(grid, scale=(-1, 1), numbers=True)
    >>> fig.data[0].zmax, fig.data[0].z.tolist()
    (1, [[0.0, 1.0], [0.5, 0.0]])
    """
    normalise = normalise and grid.span_ok  # under the floor a fraction is noise: the raw change is drawn
    if grid.values.ndim == 3:
        values = grid.per_head() / ((grid.clean - grid.corrupt) or 1.0) if normalise else grid.per_head()
    else:
        values = grid.normalised() if normalise else grid.values
    z = values.numpy()
    colour = {"zmid": 0.0} if scale is None else {"zmin": scale[0], "zmax": scale[1]}
    if scale is None and normalise:  # a fraction of the clean-corrupt difference: -1..1 on every grid
        colour = {k: v for k, v in KINDS["restored"].items() if k in ("zmin", "zmid", "zmax")}
    text = {"texttemplate": "%{z:.3f}", "textfont": {"size": 13}} if numbers else {}
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h}" for h in range(z.shape[1])],
            y=[f"L{layer}" for layer in range(z.shape[0])],
            colorscale="RdBu",
            colorbar={"title": "restored" if normalise else "metric"},
            hovertemplate="%{y}%{x}: %{z:.4f}<extra></extra>",
            **colour,
            **text,
        )
    )
    fig.update_layout(title=title or f"{grid.method}: hook_{grid.site}", xaxis_title="head", yaxis_title="layer")
    return fig
