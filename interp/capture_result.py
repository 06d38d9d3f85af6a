"""What a capture returns: the kept activations with one row of labels per kept token (interp/capture.py
takes them; interp/capture_disk.py reads a capture written to disk back into one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError, did_you_mean
from deltalens.models.architecture import article_of
from deltalens.tasks.tokenizers import TokenKind

KIND_NAMES = {int(kind): kind.name.lower() for kind in TokenKind}
LABELS = ("trace", "position", "token", "kind", "action_pos", "perm_id", "answer", "reveal_var", "state_step")


@dataclass(repr=False)
class Capture(Summary):
    """Activations at every real token of a batch, one row per token, with the token's labels.

    acts[name]   (N, ...) float, N = number of real tokens; the trailing dims of the hook
                 (e.g. (N, H) for hook_beta, (N, H, d_k, d_v) for hook_state)
    labels       (N,) long tensors: trace, position, token, kind (TokenKind), action_pos,
                 perm_id, answer, reveal_var, state_step; states (N, n) the true s_t (values 1..n)

    >>> cap = dl.capture(model, batch, names=("beta",))
    >>> isinstance(cap, dl.Capture), cap.n_traces
    (True, 8)
    """

    arch: str
    acts: Mapping[str, torch.Tensor]
    labels: dict[str, torch.Tensor]
    states: torch.Tensor  # (N, n)
    n_traces: int
    n_layers: int
    n_heads: int
    lengths: torch.Tensor  # (B,) real tokens per trace
    logits: torch.Tensor | None = None  # (N, vocab) when asked for
    estimated_bytes: int | None = None  # what the plan said the kept rows would take (capture_plan.py)
    slices: int = 1  # forwards the batch was streamed through
    delta_layers: tuple[int, ...] | None = None  # the layers that run a delta rule (None: every layer of a
    # delta-rule family, as captures written before hybrids recorded it)

    @property
    def recurrent_layers(self) -> list[int]:
        """The delta-rule layers the beta, eigenvalue and state tools read (a hybrid's attention layers left out)."""
        if self.delta_layers is not None:
            return list(self.delta_layers)
        from deltalens.models.architecture import is_delta_rule

        return list(range(self.n_layers)) if is_delta_rule(self.arch) else []

    @property
    def nbytes(self) -> int:
        """Bytes the capture holds: activations, labels, states and logits."""
        tensors = [*self.acts.values(), *self.labels.values(), self.states]
        if self.logits is not None:
            tensors.append(self.logits)
        return sum(t.numel() * t.element_size() for t in tensors)

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def title(self) -> str:
        return (
            f"Capture of {article_of(self.arch)}: {len(self)} real tokens from {self.n_traces} "
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
        return torch.isin(self.labels["kind"], torch.tensor(token_kinds(kinds)))

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


def token_kinds(kinds) -> list[int]:
    """kinds= as TokenKind values: a TokenKind, its number or its name ("reveal"), or several of them."""
    items = [kinds] if isinstance(kinds, (int, str, TokenKind)) else kinds
    try:
        items = list(items)
    except TypeError:
        items = [kinds]
    known = ", ".join(k.name.lower() for k in TokenKind)
    out = []
    for item in items:
        if isinstance(item, str) and item.strip().upper() in TokenKind.__members__:
            out.append(int(TokenKind[item.strip().upper()]))
        elif isinstance(item, int) and not isinstance(item, bool) and item in {int(k) for k in TokenKind}:
            out.append(int(item))
        else:
            hint = did_you_mean(item.lower(), [k.name.lower() for k in TokenKind]) if isinstance(item, str) else ""
            raise DeltalensError(
                f"kinds takes TokenKind values ({known}, or their numbers 0-{len(TokenKind) - 1}), got {item!r}{hint}"
            )
    if not out:
        raise DeltalensError(f"kinds is empty; give one or more of {known}, or None for every token")
    return out
