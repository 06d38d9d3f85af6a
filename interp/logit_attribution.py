"""Direct logit attribution of a delta-rule model: what each head, MLP and the embedding writes into
the answer's logit difference, through the final norm with its scale frozen (TransformerLens's convention).

The residual stream before the final RMSNorm is a sum of components (models/lm/delta_lm.py):

    x_T = embed + sum_l ( attn_out_l + mlp_out_l ),   attn_out_l = sum_h W_O[:, h] o_norm_h(z_h) (+ bias)

(o_norm acts on each head separately, so the heads' outputs add up to attn_out exactly). With the final
norm's scale sigma = sqrt(mean(x_T^2) + eps) frozen at its value in the run, the logit difference is
linear in the components:

    logit[answer] - mean_j logit[against_j] = sum_c  c . (W_U[:, answer] - mean_j W_U[:, against_j]) / sigma
                                              (+ the final norm's bias term, where it has one)

with W_U the unembedding with the norm's weight folded in (`model.W_U`). `per_factor=True` splits a
DeltaProduct head further by Householder factor: with o_norm's own scale frozen as well, the head's
output is linear in z = sum_j z_j, and z_j (the part of z read from factor j's values) comes from the
exact effective attention (interp/effective_attention.py). The components sum to the model's real
logit difference (to float rounding): `LogitAttribution.error`.

`reveal_rows(batch)`: the positions that predict a reveal's value, the true value's token and the
other values' tokens, the usual targets on REPL traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pandas as pd
import plotly.graph_objects as go
import torch
from einops import rearrange

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.interp.batch_inputs import require_batch
from deltalens.interp.effective_attention import effective_pattern, layer_inputs
from deltalens.models.architecture import architecture_of, article_of, delta_layers_of, require_one_stream
from deltalens.models.layers.head_results import has_read_out, head_results, read_out_bias
from deltalens.models.lm.lens import check_token_ids

__all__ = ["LogitAttribution", "logit_attribution", "head_outputs", "reveal_rows", "dla_figure"]


@dataclass(repr=False)
class LogitAttribution(Summary):
    """Per-row contributions (N, C) of C components to N logit differences, and their real values.

    >>> _, cache = model.run_with_cache(batch["tokens"])
    >>> result = dl.logit_attribution(model, cache, *dl.reveal_rows(batch))
    >>> isinstance(result, dl.LogitAttribution), tuple(result.head_grid().shape)
    (True, (2, 4))
    """

    components: list[str]  # "embed", "L0H1", "L0H1F2", "L0 mlp", "ln_final bias", ...
    contributions: torch.Tensor  # (N, C) float64
    actual: torch.Tensor  # (N,) the model's logit difference at each row
    n_layers: int
    n_heads: int
    n_factors: int = 1

    @property
    def total(self) -> torch.Tensor:
        return self.contributions.sum(1)

    @property
    def error(self) -> float:
        """max |sum of components - real logit difference| over the rows."""
        return float((self.total - self.actual).abs().max()) if len(self.actual) else 0.0

    @property
    def frame(self) -> pd.DataFrame:
        """One row per component: layer, head, factor (-1 where none) and the mean contribution."""
        rows = []
        for i, name in enumerate(self.components):
            layer = head = factor = -1
            if name.startswith("L") and "H" in name:
                body = name[1:]
                layer_s, _, rest = body.partition("H")
                head_s, _, factor_s = rest.partition("F")
                layer, head, factor = int(layer_s), int(head_s), int(factor_s) if factor_s else -1
            elif name.endswith(" mlp"):
                layer = int(name[1:].split()[0])
            rows.append(
                {
                    "component": name,
                    "layer": layer,
                    "head": head,
                    "factor": factor,
                    "mean": float(self.contributions[:, i].mean()) if len(self.actual) else 0.0,
                }
            )
        return pd.DataFrame(rows)

    def head_grid(self) -> torch.Tensor:
        """(n_layers, n_heads) mean contribution of each head (factors summed)."""
        grid = torch.zeros(self.n_layers, self.n_heads, dtype=torch.float64)
        frame = self.frame
        heads = frame[frame["head"] >= 0]
        for _, row in heads.iterrows():
            grid[int(row["layer"]), int(row["head"])] += row["mean"]
        return grid

    def title(self) -> str:
        return (
            f"LogitAttribution over {len(self.actual)} rows: mean real difference {float(self.actual.mean()):.3f}, "
            f"components sum to it within {self.error:.1e}"
        )

    def display_frame(self) -> pd.DataFrame:
        frame = self.frame
        return frame.reindex(frame["mean"].abs().sort_values(ascending=False).index)


def _rows(positions, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch index, position) of every row asked for."""
    positions = torch.as_tensor(positions)
    if positions.dtype == torch.bool:
        if positions.shape != (B, T):
            raise DeltalensError(f"a position mask must be (batch, pos) = ({B}, {T}); got {tuple(positions.shape)}.")
        b, t = positions.nonzero(as_tuple=True)
    elif positions.ndim == 2 and positions.shape[1] == 2:
        b, t = positions[:, 0].long(), positions[:, 1].long()
    elif positions.ndim <= 1:
        t = positions.long().flatten()
        if t.numel() == 1:
            t = t.expand(B)
        if t.numel() != B:
            raise DeltalensError(f"give one position per sequence ({B}), a (batch, pos) mask or (row, 2) pairs.")
        b = torch.arange(B)
    else:
        raise DeltalensError("positions must be one per sequence, a (batch, pos) bool mask, or (row, 2) pairs.")
    t = torch.where(t < 0, t + T, t)
    if len(t) and (int(t.min()) < 0 or int(t.max()) >= T or int(b.max()) >= B):
        raise DeltalensError(f"positions fall outside the cached run of {B} sequences x {T} tokens.")
    return b.cpu(), t.cpu()


def reveal_rows(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(positions (B, T) mask, answer (N,), against (N, n-1)) for the reveals of a REPL-trace batch: the row
    before each revealed value (which predicts it), the true value's token, the other values' tokens.

    >>> positions, answer, against = dl.reveal_rows(batch)  # S3: the answer and the two other values
    >>> against.shape[1]
    2
    """
    require_batch(batch, "reveal_rows")
    reveal = batch["reveal_mask"].clone()
    reveal[:, 0] = False
    tokens, answers = batch["tokens"], batch["answers"]
    table: dict[int, int] = {}
    for value, token in zip(answers[reveal].tolist(), tokens[reveal].tolist()):
        if table.setdefault(int(value), int(token)) != int(token) or list(table.values()).count(int(token)) > 1:
            # a BPE tokenizer writes a value with different tokens in different contexts
            raise DeltalensError(
                f"this tokenizer does not write each revealed value as one token of its own (value {value} "
                f"appears as token {table[int(value)]} and token {token}, or two values share a token); "
                "the answer-vs-other-values logit difference needs one token per value: use a checkpoint "
                "with a one-token-per-value tokenizer (statement or code)."
            )
    if not table:
        raise DeltalensError("this batch reveals no values, so there is no answer to attribute.")
    values = sorted(table)
    b, t = reveal.nonzero(as_tuple=True)
    answer = tokens[b, t]
    against = torch.tensor([[table[v] for v in values if table[v] != int(a)] for a in answer.tolist()])
    positions = torch.zeros_like(reveal)
    positions[b, t - 1] = True
    return positions, answer, against


def head_outputs(model, cache, layer: int, b: torch.Tensor, t: torch.Tensor, per_factor: bool = False):
    """(N, H[, n], d_model): each head's write into the residual stream at rows (b, t) (models/layers/
    head_results.py: its read-out with the other heads at zero); with per_factor the part of it read from each
    Householder factor's values (o_norm's scale frozen)."""
    mixer = model.blocks[layer].attn
    name = f"blocks.{layer}.attn.hook_"
    z = cache[name + "z"][b, t].float()  # (N, H, d_v)
    x = model.mixer_input(layer, cache[f"blocks.{layer}.hook_resid_pre"][b, t])
    if not per_factor:
        return head_results(mixer, z.to(x.dtype), x).float()
    g = None
    if getattr(mixer, "use_gate", False) or getattr(mixer, "use_output_gate", False):
        g = rearrange(mixer.g_proj(x), "n (h d) -> n h d", d=mixer.head_v_dim)
    W_O = rearrange(mixer.o_proj.weight, "m (h d) -> h d m", d=mixer.head_v_dim).float()  # (H, d_v, d_model)
    norm = mixer.o_norm
    rms = torch.sqrt(z.square().mean(-1, keepdim=True) + norm.eps)  # (N, H, 1), frozen
    parts = _factor_parts(model, cache, layer, b, t)  # (N, H, n, d_v)
    y = parts / rms[..., None, :]
    if norm.weight is not None:
        y = y * norm.weight.float()
    if g is not None:
        act = torch.sigmoid(g.float()) if norm.activation == "sigmoid" else torch.nn.functional.silu(g.float())
        y = y * act[:, :, None]
    return torch.einsum("nhjd,hdm->nhjm", y, W_O)


def _factor_parts(model, cache, layer, b, t) -> torch.Tensor:
    """z at rows (b, t) split by the factor its values came from: (N, H, n, d_v), summing to hook_z."""
    inp = layer_inputs(model, cache, layer)
    out = torch.zeros(len(b), model.cfg.n_heads, inp["k"].shape[3], inp["v"].shape[-1], dtype=torch.float64)
    for seq in b.unique().tolist():
        rows = (b == seq).nonzero(as_tuple=True)[0]
        queries, where = t[rows].unique(return_inverse=True)
        sl = slice(seq, seq + 1)
        A = effective_pattern(
            inp["q"][sl],
            inp["k"][sl],
            inp["beta"][sl],
            None if inp["log_gate"] is None else inp["log_gate"][sl],
            queries=queries,
        )[0]  # (H, Tq, T, n)
        parts = torch.einsum("hqsn,shnd->qhnd", A, inp["v"][seq].double())
        out[rows] = parts[where]
    return out.float()


def _layer_components(model, cache, layer: int, b, t, project, factors: int) -> tuple[list[str], list[torch.Tensor]]:
    """One layer's components at rows (b, t), projected: its heads (by factor where asked), a read-out bias where
    the mixer has one, its MLP; a transformers attention layer as one component."""
    mixer, N = model.blocks[layer].attn, len(b)
    if not has_read_out(mixer):  # a transformers attention layer: its whole output, one component
        names, columns = [f"L{layer} attn"], [project(cache[f"blocks.{layer}.hook_attn_out"][b, t].float())[:, None]]
    else:
        split = factors > 1 and layer in delta_layers_of(model)
        heads = head_outputs(model, cache, layer, b, t, per_factor=split)
        if split:
            names = [f"L{layer}H{h}F{j}" for h in range(heads.shape[1]) for j in range(factors)]
        else:
            names = [f"L{layer}H{h}" for h in range(heads.shape[1])]
        columns = [project(heads).reshape(N, -1)]
        x = model.mixer_input(layer, cache[f"blocks.{layer}.hook_resid_pre"][b, t])
        bias = read_out_bias(mixer, cache[f"blocks.{layer}.attn.hook_z"][b, t].to(x.dtype), x).float()
        if bool(bias.abs().max() > 0):
            names.append(f"L{layer} attn bias")
            columns.append(project(bias)[:, None])
    names.append(f"L{layer} mlp")
    columns.append(project(cache[f"blocks.{layer}.hook_mlp_out"][b, t].float())[:, None])
    return names, columns


def _bias_components(model, lm_w, answer, against) -> list[tuple[str, torch.Tensor]]:
    """The final norm's bias through the unembedding and the unembedding's own bias, where the model has them."""

    def toward(v: torch.Tensor) -> torch.Tensor:  # v[answer] - mean v[against], one column
        return (v[answer] - (0 if against is None else v[against].mean(-1)))[:, None]

    found = []
    norm_bias = getattr(model.model.norm, "bias", None)
    if norm_bias is not None:
        found.append(("ln_final bias", toward(lm_w.double() @ norm_bias.double())))
    if getattr(model.lm_head, "bias", None) is not None:
        found.append(("unembed bias", toward(model.lm_head.bias.double())))
    return found


@torch.no_grad()
def logit_attribution(
    model,
    cache,
    positions,
    answer,
    against: Optional[torch.Tensor] = None,
    per_factor: bool = False,
) -> LogitAttribution:
    """Each component's direct contribution to logit[answer] - mean logit[against] at the given positions.

    cache: model.run_with_cache(tokens) (every hook; a names filter must keep hook_embed, each layer's
    hook_resid_pre, attn.hook_z, hook_attn_out and hook_mlp_out, and ln_final.hook_scale /
    hook_normalized; per_factor also q, k, v, beta and the gate). positions: one per sequence, a
    (batch, pos) bool mask, or (row, 2) pairs (batch, pos). answer: (N,) token ids, one per row; against:
    (N,) or (N, k) token ids (None: attribute the answer's logit itself). per_factor: split DeltaProduct
    heads by Householder factor.

    >>> positions, answer, against = dl.reveal_rows(batch)
    >>> _, cache = model.run_with_cache(batch["tokens"])
    >>> result = dl.logit_attribution(model, cache, positions, answer, against)
    >>> result.error < 1e-3                                # the components sum to the real logit difference
    True
    """
    require_one_stream(model, "logit_attribution")
    if not callable(getattr(model, "mixer_input", None)):
        raise DeltalensError(
            f"{article_of(architecture_of(model))} is not one of deltalens's own language models, whose mixers' "
            "outputs split per head; for the Transformer use TransformerLens's cache.stack_head_results and "
            "cache.logit_attrs, an LSTM has no heads."
        )
    embed = cache["hook_embed"]
    B, T = embed.shape[:2]
    b, t = _rows(positions, B, T)
    N = len(b)
    answer = torch.as_tensor(answer).long().flatten().cpu()
    if answer.numel() != N:
        raise DeltalensError(f"give one answer token per row: {N} rows, {answer.numel()} answers.")
    for what, ids in (("answer", answer), ("against", against)):  # against: None, or (N,) / (N, k) ids
        check_token_ids(torch.as_tensor([] if ids is None else ids), model.cfg.d_vocab, f"{what} token ids")
    W_U = model.W_U.float()  # (d_model, vocab), the final norm's weight folded in
    lm_w = model.lm_head.weight.float()  # (vocab, d_model)
    direction = W_U[:, answer].T  # (N, d_model)
    unembed = lm_w[answer]  # to read the real logits
    if against is not None:
        against = torch.as_tensor(against).long().cpu()
        against = against[:, None] if against.ndim == 1 else against
        if against.shape[0] != N:
            raise DeltalensError(f"give the counterfactual tokens per row: {N} rows, {against.shape[0]} given.")
        direction = direction - W_U[:, against].mean(-1).T
        unembed = unembed - lm_w[against].mean(1)
    if "ln_final.hook_scale" not in cache:
        raise DeltalensError("the cache needs ln_final.hook_scale (the final norm's frozen scale): cache every hook.")
    scale = cache["ln_final.hook_scale"][b, t].float()  # (N, 1)
    actual = (cache["ln_final.hook_normalized"][b, t].float() * unembed).sum(-1)
    if getattr(model.lm_head, "bias", None) is not None:
        bias = model.lm_head.bias.float()
        actual = actual + bias[answer] - (0 if against is None else bias[against].mean(-1))

    def project(x: torch.Tensor) -> torch.Tensor:  # (N, ..., d_model) -> (N, ...)
        d = direction.reshape(N, *([1] * (x.ndim - 2)), -1)
        s = scale.reshape(N, *([1] * (x.ndim - 1)))
        return (x.double() * d.double()).sum(-1) / s.squeeze(-1).double()

    names, columns = ["embed"], [project(embed[b, t].float())[:, None]]
    factors = getattr(model, "n_factors", 1) if per_factor and architecture_of(model) == "deltaproduct" else 1
    for layer in range(model.cfg.n_layers):
        layer_names, layer_columns = _layer_components(model, cache, layer, b, t, project, factors)
        names += layer_names
        columns += layer_columns
    for name, column in _bias_components(model, lm_w, answer, against):
        names.append(name)
        columns.append(column)
    return LogitAttribution(
        components=names,
        contributions=torch.cat(columns, 1),
        actual=actual.double(),
        n_layers=model.cfg.n_layers,
        n_heads=max([model.cfg.n_heads, *(int(n.split("H")[1].split("F")[0]) + 1 for n in names if _is_head(n))]),
        n_factors=factors,
    )


def _is_head(name: str) -> bool:
    return name.startswith("L") and "H" in name and " " not in name


def dla_figure(result: LogitAttribution, title: str = "Direct logit attribution per head") -> go.Figure:
    """Heatmap (layer x head) of the mean contribution of each head to the logit difference.

    >>> _, cache = model.run_with_cache(batch["tokens"])
    >>> fig = dl.dla_figure(dl.logit_attribution(model, cache, *dl.reveal_rows(batch)))
    >>> len(fig.data) > 0
    True
    """
    grid = result.head_grid().numpy()
    limit = float(abs(grid).max()) or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            x=[f"H{h}" for h in range(result.n_heads)],
            y=[f"L{layer}" for layer in range(result.n_layers)],
            colorscale="RdBu",
            zmid=0.0,
            zmin=-limit,
            zmax=limit,
            colorbar={"title": "logit diff"},
        )
    )
    fig.update_layout(title=title, xaxis_title="head", yaxis_title="layer")
    return fig
