"""Capture activations of any deltalens model on a batch of traces, aligned with the trace's labels.

`capture(model, batch, names)` runs `model.run_with_cache` with a names filter and returns a
`Capture`: every activation flattened to one row per real token (padding dropped), next to that
token's labels from the batch (tasks.dataset): trace index, position, `TokenKind` (init / action /
print / reveal / other), the action's permutation (lex rank) and index, the true state s_t, the
revealed value. Rows are in (trace, position) order, so tokens of one trace are contiguous.

Names are exact hook names or shorthands, expanded per layer for the model's architecture:

    "beta", "beta_logit", "gate", "state", "k", "q", "v", "z"
               blocks.{l}.attn.hook_<x> (the delta-rule family; gate only where the state decays;
               the Transformer has k, q, v, z; the LSTM none)
    "resid"    the residual stream read by probes: hook_embed then the output of every layer
               (blocks.{l}.hook_resid_post; for the LSTM blocks.{l}.hook_hidden)

Paper notation: hook_beta is beta_t (B, T, H); hook_k is k_t after L2 norm (B, T, H, d_k);
hook_state is S_t (B, T, H, d_k, d_v) in fla's [K, V] layout, the state after token t; a DeltaProduct's
hook_beta and hook_k carry a factor axis (B, T, H, n_h[, d_k]).

Batches of held-out traces for a checkpoint come from training/opened.py (`open_checkpoint(path)
.batch(n)`), or from any `tasks.dataset.make_batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Union

import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.models.architecture import (
    ARTICLE,
    architecture_of,
    is_delta_rule,
    n_heads_of,
    n_layers_of,
    require_delta_rule,
)
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["ATTN_SHORTHANDS", "DELTA_RULE_ONLY", "Capture", "capture", "expand_names", "residual_names"]

ATTN_SHORTHANDS = ("beta", "beta_logit", "gate", "state", "k", "q", "v", "z")
DELTA_RULE_ONLY = ("beta", "beta_logit", "gate", "state")  # the delta rule's write strength, decay and matrix state
_DELTA_HEADED = ("beta", "beta_logit", "gate", "state", "k", "q", "v", "z")
_HEADED = {
    "deltanet": _DELTA_HEADED,
    "gated_deltanet": _DELTA_HEADED,
    "deltaproduct": _DELTA_HEADED,
    "transformer": ("k", "q", "v", "z"),
    "lstm": (),
}
KIND_NAMES = {int(kind): kind.name.lower() for kind in TokenKind}
LABELS = ("trace", "position", "token", "kind", "action_pos", "perm_id", "answer", "reveal_var", "state_step")

Names = Union[str, Sequence[str], Callable[[str], bool], None]


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
            if name not in _HEADED[arch]:
                if name in DELTA_RULE_ONLY:
                    require_delta_rule(model, f"{name} (hook_{name})")
                raise DeltalensError(
                    f"{ARTICLE.get(arch, arch)} has no attention heads, so there is no "
                    f"hook_{name}; capture 'resid' instead."
                )
            if arch == "deltanet" and name == "beta_logit" and not model.config.use_beta:
                raise DeltalensError("this DeltaNet was built with use_beta=False: beta is constant and has no logit.")
            if name == "gate" and not getattr(model, "gated", False):
                raise DeltalensError(
                    f"{ARTICLE.get(arch, arch)} without a decay gate has no hook_gate (DeltaNet, or "
                    "a DeltaProduct built with use_forget_gate=False)."
                )
            out += [f"blocks.{layer}.attn.hook_{name}" for layer in range(n_layers_of(model))]
        else:
            if not is_delta_rule(arch) and any(name.endswith(f"hook_{x}") for x in DELTA_RULE_ONLY):
                require_delta_rule(model, name)
            out.append(name)
    return list(dict.fromkeys(out))  # keep order, drop repeats


@dataclass(repr=False)
class Capture(Summary):
    """Activations at every real token of a batch, one row per token, with the token's labels.

    acts[name]   (N, ...) float, N = number of real tokens; the trailing dims of the hook
                 (e.g. (N, H) for hook_beta, (N, H, d_k, d_v) for hook_state)
    labels       (N,) long tensors: trace, position, token, kind (TokenKind), action_pos,
                 perm_id, answer, reveal_var, state_step; states (N, n) the true s_t (values 1..n)
    """

    arch: str
    acts: dict[str, torch.Tensor]
    labels: dict[str, torch.Tensor]
    states: torch.Tensor  # (N, n)
    n_traces: int
    n_layers: int
    n_heads: int
    lengths: torch.Tensor  # (B,) real tokens per trace
    logits: torch.Tensor | None = None  # (N, vocab) when asked for

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def title(self) -> str:
        return (
            f"Capture of {ARTICLE.get(self.arch, self.arch)}: {len(self)} real tokens from {self.n_traces} "
            f"traces, {self.n_vars} variables; activations (one row per token):"
        )

    def display_frame(self) -> pd.DataFrame:
        rows = [
            {"name": name, "shape": tuple(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
            for name, value in self.acts.items()
        ]
        return pd.DataFrame(rows, columns=["name", "shape", "dtype"])

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.acts:
            raise DeltalensError(f"{name!r} was not captured; captured: {', '.join(self.acts) or 'nothing'}.")
        return self.acts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.acts

    @property
    def names(self) -> list[str]:
        return list(self.acts)

    @property
    def n_vars(self) -> int:
        return int(self.states.shape[1])

    def mask(self, kinds: int | Sequence[int] | None = None) -> torch.Tensor:
        """(N,) bool: tokens of the given TokenKind(s); None = every real token."""
        if kinds is None:
            return torch.ones(len(self), dtype=torch.bool)
        kinds = [int(kinds)] if isinstance(kinds, (int, TokenKind)) else [int(k) for k in kinds]
        return torch.isin(self.labels["kind"], torch.tensor(kinds))

    def layer(self, shorthand: str, layer: int) -> torch.Tensor:
        """acts of blocks.{layer}.attn.hook_{shorthand}."""
        return self[f"blocks.{layer}.attn.hook_{shorthand}"]

    def frame(self):
        """The labels as a pandas DataFrame, one row per token (kind as a lower-case name)."""
        data = {key: self.labels[key].numpy() for key in LABELS}
        frame = pd.DataFrame(data)
        frame["kind"] = frame["kind"].map(KIND_NAMES)
        for var in range(self.n_vars):
            frame[f"s{var}"] = self.states[:, var].numpy()
        return frame

    def padded(self, name: str) -> torch.Tensor:
        """acts[name] back in (B, T, ...) layout, zeros on padding."""
        flat = self[name]
        out = flat.new_zeros((self.n_traces, int(self.lengths.max()), *flat.shape[1:]))
        out[self.labels["trace"], self.labels["position"]] = flat
        return out


@torch.no_grad()
def capture(
    model,
    batch: dict[str, torch.Tensor],
    names: Names = ("resid",),
    with_logits: bool = False,
    hooks: Sequence[tuple[str, Callable]] = (),
) -> Capture:
    """Run `model` on `batch["tokens"]` and keep the named activations at every real token.

    names: shorthands or hook names (see the module docstring), or a callable filter on hook names.
    hooks: forward hooks active during the run (e.g. an intervention), so the capture shows the
        edited model. Activations are moved to the CPU as float32.
    """
    arch = architecture_of(model)
    if isinstance(names, str):
        names = [names]
    wanted = None if callable(names) else expand_names(model, names or [])
    names_filter = names if callable(names) else (lambda name: name in wanted)
    tokens = batch["tokens"]
    lengths = batch.get("lengths")
    if lengths is None:
        lengths = (tokens != 0).sum(1)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=list(hooks)):
            logits, cache = model.run_with_cache(tokens.to(device), names_filter=names_filter)
    finally:
        model.train(was_training)
    cache = dict(cache.items()) if hasattr(cache, "items") else dict(cache)
    if wanted is not None:
        missing = [name for name in wanted if name not in cache]
        if missing:
            raise DeltalensError(
                f"{ARTICLE.get(arch, arch)} has no hook named {', '.join(map(repr, missing))}; "
                f"list its hooks with model.hook_dict (or use shorthands such as 'resid', 'beta')."
            )
        cache = {name: cache[name] for name in wanted}
    B, T = tokens.shape
    real = torch.arange(T)[None, :] < lengths.cpu()[:, None]  # (B, T)
    trace, position = real.nonzero(as_tuple=True)
    acts = {name: value.detach().float().cpu()[trace, position] for name, value in cache.items()}
    labels = {"trace": trace, "position": position, "token": tokens.cpu()[trace, position]}
    for key, source in (
        ("kind", "kinds"),
        ("action_pos", "action_pos"),
        ("perm_id", "perm_ids"),
        ("answer", "answers"),
        ("reveal_var", "reveal_vars"),
        ("state_step", "state_steps"),
    ):
        value = batch.get(source)
        labels[key] = value.cpu()[trace, position] if value is not None else torch.full_like(trace, -1)
    states = (
        batch["states"].cpu()[trace, position] if "states" in batch else torch.zeros(len(trace), 0, dtype=torch.long)
    )
    return Capture(
        arch=arch,
        acts=acts,
        labels=labels,
        states=states,
        n_traces=B,
        n_layers=n_layers_of(model),
        n_heads=n_heads_of(model),
        lengths=lengths.cpu(),
        logits=logits.detach().float().cpu()[trace, position] if with_logits else None,
    )


def delta_rule_capture(source, batch, names) -> Capture:
    """A Capture of a delta-rule model: `source` itself when it is one, else `capture(source, batch, names)`.

    The probes that read beta or the state S_t take either a Capture or a model with a batch.
    """
    if isinstance(source, Capture):
        if not is_delta_rule(source.arch):
            raise DeltalensError(
                f"this capture comes from a {source.arch} model, which has no beta; the "
                "eigenvalue and subspace probes need a delta-rule model (DeltaNet, Gated DeltaNet, "
                "DeltaProduct)."
            )
        return source
    if batch is None:
        raise DeltalensError("pass a Capture, or a model together with a batch of traces.")
    require_delta_rule(source)
    return capture(source, batch, names=names)
