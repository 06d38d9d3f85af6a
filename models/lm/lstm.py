"""Non-linear RNN baseline: a stacked LSTM with TransformerLens hooks on every layer's h_t and c_t.

The paper contrasts linear RNNs (DeltaNet), which cannot renormalise a belief state, with
non-linear RNNs, which can. This LSTM is that non-linear RNN. Per layer l and token t
(Hochreiter & Schmidhuber 1997, PyTorch's gate order i, f, g, o):

    i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of  W_ih x_t + b_ih + W_hh h_{t-1} + b_hh
    c_t = f * c_{t-1} + i * g          # cell state      -> blocks.{l}.hook_cell
    h_t = o * tanh(c_t)                # hidden state    -> blocks.{l}.hook_hidden, input of layer l+1

Code symbols: `x` is the layer input (the embedding for l = 0, else h of layer l-1); `h`, `c` are
h_t, c_t stacked over t as (batch, pos, d_model).

Hooks (TransformerLens names and order, batch first):

    hook_embed                (B, T, d_model)  token embedding
    blocks.{l}.hook_cell      (B, T, d_model)  c_t of layer l
    blocks.{l}.hook_hidden    (B, T, d_model)  h_t of layer l (its output)
    ln_final.hook_scale       (B, T, 1)        LayerNorm scale (when final_norm)
    ln_final.hook_normalized  (B, T, d_model)  input of the unembedding (when final_norm)

Editing a state hook. A hook on `hook_hidden` or `hook_cell` acts as if it ran inside the
recurrence at every step: what it returns at position t is the state the layer carries to t+1
(and, for the cell, what h_t = o * tanh(c_t) is computed from), and the edited h_t is what layer
l+1 reads. So patching h or c at position t changes that layer at t (cell edits) and after, every
layer above, and the logits from t on; nothing before t changes. The hook itself is still called
TransformerLens-style, once per pass on the whole (B, T, d_model) trajectory, so caching and
position-indexed edits (`h[:, t] = ...`) work as usual. Implementation ("replay"):

    1. run the layer, call the hooks on its trajectory;
    2. where a hook changed a value, re-run the layer from the first changed position with the
       edited values pinned in place (`_recur`, a step loop that mirrors nn.LSTM);
    3. call the hooks again on the new trajectory; stop when they agree with what was carried.

Edits that set a value (patching from another run, zero/mean ablation, writing a direction)
settle after one replay. Edits that depend on the value they receive (add a vector, scale) take
up to two replays per edited position. Consequences: hooks on these two points must be
deterministic and position-wise (the output at t depends on the input at t only), and they may
be called more than once per forward; the last call sees the final trajectory, so the cache is
consistent. A hook that never settles raises DeltalensError.

Fast path and plain fallback side by side: every forward starts with one fused nn.LSTM call
(cuDNN on GPU), which yields h_t of all steps. c_t is materialised only when a hook on
`hook_cell` asks for it, from those h_t (`_cells_from_hidden`: batched gates, elementwise scan),
so caching never changes the logits. A replay runs `_recur`, a readable step loop that mirrors
nn.LSTM; the two agree to float precision (tests/test_baselines.py). Positions before the first
edit are never recomputed, so they stay bit-identical.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn as nn
from transformer_lens.hook_points import HookPoint
from transformer_lens.HookedRootModule import HookedRootModule

from deltalens.core.errors import DeltalensError
from deltalens.models.io.config_from_dict import config_from_dict
from deltalens.models.lm.lens import LensModel

if TYPE_CHECKING:
    from deltalens.models.layers.carry import Carry


@dataclass
class LSTMConfig:
    """A stacked LSTM language model. Field names follow TransformerLens where they exist."""

    d_vocab: int = 64  # vocabulary size; set it from the tokenizer
    d_model: int = 64  # embedding width = hidden size = cell size of every layer
    n_layers: int = 2  # stacked LSTM layers, one nn.LSTM each so each layer's h and c can be hooked
    final_norm: bool = True  # LayerNorm on the last hidden state before the unembedding
    forget_bias: float = 1.0  # initial forget-gate bias; 1.0 keeps memories early in training (Jozefowicz et al. 2015)
    seed: Optional[int] = None  # seeds the weight init without touching the global RNG; None = global RNG

    def __post_init__(self) -> None:
        for name in ("d_vocab", "d_model", "n_layers"):
            if int(getattr(self, name)) < 1:
                raise DeltalensError(f"lstm {name} must be a positive integer, got {getattr(self, name)!r}")

    # TransformerLens's config fields that its ActivationCache reads (none is a dataclass field)
    model_type = "lstm"
    attn_only = False
    n_heads = 0
    d_head = 0
    n_ctx = None  # no context limit: the recurrence reads a trace of any length
    positional_embedding_type = "none"

    @property
    def normalization_type(self) -> Optional[str]:
        return "LN" if self.final_norm else None


def lstm_config_from_dict(config: dict[str, Any]) -> LSTMConfig:
    return config_from_dict(LSTMConfig, config, "lstm")


def _changed(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """(B, T) mask of positions where any feature differs; NaN == NaN so a NaN state is not an 'edit'."""
    differs = (new != old) & ~(torch.isnan(new) & torch.isnan(old))
    return differs.any(dim=-1)


class LSTMBlock(nn.Module):
    """One LSTM layer with hooks on its hidden and cell trajectories (see the module docstring)."""

    def __init__(self, d_model: int, layer: int):
        super().__init__()
        self.layer = layer
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)
        self.hook_cell = HookPoint()  # (B, T, d_model) c_t
        self.hook_hidden = HookPoint()  # (B, T, d_model) h_t, the layer's output
        self.carry: Optional[Carry] = None  # set while a long sequence runs in chunks (models/lm/chunked.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, T, d_model) -> h: (B, T, d_model)
        if self.carry is not None:
            return self._continue(x, self.carry)
        watch_cell = self.hook_cell.has_hooks()
        h_raw, _ = self.lstm(x)  # fused recurrence; it returns h_t of every step but only the last c_t
        c_raw = self._cells_from_hidden(x, h_raw) if watch_cell else None

        # Replay loop. "carried" is what the recurrence actually propagated in the last run
        # (raw values, except at pinned positions); the hooks see the raw values.
        h_carried, c_carried = h_raw, c_raw
        n_steps = x.shape[1]
        for _ in range(2 * n_steps + 2):
            c_hooked = self.hook_cell(c_raw.clone()) if watch_cell and c_raw is not None else None
            h_hooked = self.hook_hidden(h_raw.clone())
            off = _changed(h_hooked, h_carried)  # (B, T)
            if watch_cell:
                off = off | _changed(c_hooked, c_carried)
            if not off.any():
                return h_hooked  # the hooks agree with the trajectory: done
            start = int(off.any(dim=0).nonzero()[0])
            if c_raw is None:
                c_raw = c_carried = self._cells_from_hidden(x, h_raw)
            pin_h = _changed(h_hooked, h_raw)
            pin_c = _changed(c_hooked, c_raw) if watch_cell else None
            h_raw, c_raw, h_carried, c_carried = self._recur(
                x,
                start=start,
                prefix=(h_raw, c_raw, h_carried, c_carried),
                pin_h=(pin_h, h_hooked),
                pin_c=(pin_c, c_hooked) if watch_cell else None,
            )
        raise DeltalensError(
            f"the hooks on blocks.{self.layer}.hook_hidden/hook_cell never settled after "
            f"{2 * n_steps + 2} passes; hooks on LSTM states must be deterministic and act position by position"
        )

    def _continue(self, x: torch.Tensor, carry: Carry) -> torch.Tensor:
        """The fused recurrence from the (h, c) the previous chunk left (models/lm/chunked.py)."""
        if self.hook_cell.has_hooks() or self.hook_hidden.has_hooks():
            raise DeltalensError(
                "hooks on an LSTM's hidden and cell states replay the whole sequence: run it whole, not in chunks"
            )
        h, state = self.lstm(x, carry.state)
        carry.state = tuple(s.detach() for s in state)
        return self.hook_hidden(h)

    def _cells_from_hidden(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """c_t of every step given the layer's h_t: (B, T, d).

        With h known, every gate is one batched matmul; only c_t = f * c_{t-1} + i * g is a scan,
        and it is elementwise. The fast path thus keeps its exact h (caching does not perturb the
        logits) and still exposes c_t.
        """
        lstm = self.lstm
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)  # h_{t-1}, h_{-1} = 0
        gates = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h_prev @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        i, f, g, _ = gates.chunk(4, dim=-1)
        forget, write = torch.sigmoid(f), torch.sigmoid(i) * torch.tanh(g)  # (B, T, d) each
        c = torch.zeros_like(h[:, 0])
        cells = []
        for t in range(h.shape[1]):
            c = forget[:, t] * c + write[:, t]
            cells.append(c)
        return torch.stack(cells, dim=1) if cells else torch.zeros_like(h)

    def _recur(
        self,
        x: torch.Tensor,
        start: int = 0,
        prefix: Optional[tuple[torch.Tensor, ...]] = None,
        pin_h: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
        pin_c: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
    ):
        """Reference recurrence, one step at a time, with optional pinned (edited) states.

        x: (B, T, d). `prefix` holds (h_raw, c_raw, h_carried, c_carried) of an earlier run whose
        positions < start are kept. `pin_h` / `pin_c` are (mask (B, T), values (B, T, d)): at
        masked positions the carried state is the given value instead of the computed one.
        Returns (h, c) when nothing is pinned, else (h_raw, c_raw, h_carried, c_carried).
        """
        lstm = self.lstm
        batch, n_steps, d = x.shape
        # Input projections of all steps at once: (B, T, 4d); only the h-dependent part is sequential.
        x_proj = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0
        if start > 0:
            if prefix is None:
                raise DeltalensError(f"the LSTM recurrence from step {start} needs the earlier run (prefix)")
            h_prev, c_prev = prefix[2][:, start - 1], prefix[3][:, start - 1]
        else:
            h_prev = x.new_zeros(batch, d)
            c_prev = x.new_zeros(batch, d)
        h_raws, c_raws, h_outs, c_outs = [], [], [], []
        for t in range(start, n_steps):
            gates = x_proj[:, t] + h_prev @ lstm.weight_hh_l0.T  # (B, 4d)
            i, f, g, o = gates.chunk(4, dim=-1)
            c_raw = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
            c_prev = c_raw if pin_c is None else torch.where(pin_c[0][:, t, None], pin_c[1][:, t], c_raw)
            h_raw = torch.sigmoid(o) * torch.tanh(c_prev)
            h_prev = h_raw if pin_h is None else torch.where(pin_h[0][:, t, None], pin_h[1][:, t], h_raw)
            h_raws.append(h_raw)
            c_raws.append(c_raw)
            h_outs.append(h_prev)
            c_outs.append(c_prev)

        def stack(steps: list[torch.Tensor], earlier: Optional[torch.Tensor]) -> torch.Tensor:
            tail = torch.stack(steps, dim=1) if steps else x.new_zeros(batch, 0, d)
            if start == 0:
                return tail
            if earlier is None:
                raise DeltalensError(f"the LSTM recurrence from step {start} needs the earlier run (prefix)")
            return torch.cat([earlier[:, :start], tail], dim=1)

        if pin_h is None and pin_c is None:
            return stack(h_raws, None), stack(c_raws, None)
        p = prefix if prefix is not None else (None,) * 4
        return stack(h_raws, p[0]), stack(c_raws, p[1]), stack(h_outs, p[2]), stack(c_outs, p[3])


class FinalLayerNorm(nn.Module):
    """LayerNorm with TransformerLens's hook_scale and hook_normalized (after the affine map)."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.hook_scale = HookPoint()  # (B, T, 1)
        self.hook_normalized = HookPoint()  # (B, T, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x - x.mean(dim=-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale * self.weight + self.bias)


class HookedLSTM(LensModel, HookedRootModule):
    """Stacked LSTM language model: tokens (B, T) -> logits (B, T, d_vocab)."""

    arch = "lstm"

    def __init__(self, config: Optional[LSTMConfig] = None, **overrides: Any):
        super().__init__()
        if config is None:
            config = lstm_config_from_dict(overrides)
        elif overrides:
            config = lstm_config_from_dict({**asdict(config), **overrides})
        self.cfg = config
        with torch.random.fork_rng(devices=[], enabled=config.seed is not None):
            if config.seed is not None:
                torch.manual_seed(config.seed)
            self.embed = nn.Embedding(config.d_vocab, config.d_model)
            self.hook_embed = HookPoint()  # (B, T, d_model)
            self.blocks = nn.ModuleList([LSTMBlock(config.d_model, layer) for layer in range(config.n_layers)])
            self.ln_final = FinalLayerNorm(config.d_model) if config.final_norm else None
            self.unembed = nn.Linear(config.d_model, config.d_vocab)
            with torch.no_grad():
                for block in self.blocks:
                    d = config.d_model
                    # PyTorch packs the gate biases as [i, f, g, o]; b_ih + b_hh is the effective bias.
                    block.lstm.bias_ih_l0[d : 2 * d].fill_(config.forget_bias)
                    block.lstm.bias_hh_l0[d : 2 * d].zero_()
        self.setup()

    @property
    def model_config(self) -> dict[str, Any]:
        """JSON-able config: `models.build("lstm", **model.model_config)` rebuilds this model."""
        return asdict(self.cfg)

    @property
    def W_E(self) -> torch.Tensor:
        """The embedding, (d_vocab, d_model)."""
        return self.embed.weight

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding (d_model, d_vocab), the final LayerNorm's weight folded in (TransformerLens's fold_ln)."""
        weight = self.unembed.weight.T
        return weight if self.ln_final is None else self.ln_final.weight[:, None] * weight

    @property
    def b_U(self) -> torch.Tensor:
        """The unembedding's bias, the final LayerNorm's bias folded in."""
        bias = self.unembed.bias
        return bias if self.ln_final is None else bias + self.ln_final.bias @ self.unembed.weight.T

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        tokens = torch.as_tensor(tokens, device=self.embed.weight.device)
        return self.W_U[:, tokens].movedim(0, -1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: (B, T) int64, or (T,) for one sequence, or text (read with the tokenizer) -> logits (B, T, d_vocab)
        tokens = self._checked_tokens(tokens)
        x = self.hook_embed(self.embed(tokens))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        if self.ln_final is not None:
            x = self.ln_final(x)
        return self.unembed(x)  # (B, T, d_vocab)
