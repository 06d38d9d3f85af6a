"""Does a patched run follow its donor? The fraction of reveals predicted as the donor trace's value.

result = follows_donor(model, batch, donor_batch, patch_state(0, 3, donor_cache))
result.follows_where_different   # 1.0: the head's state carries the donor's arrangement
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.interventions import Hook, Intervention


@dataclass
class DonorFollowing:
    """How far predictions under a patch follow the donor trace (`follows_donor`)."""

    follows: float  # fraction of reveals predicted as the donor trace's value there
    follows_where_different: float  # the same over reveals whose donor value differs from the trace's own (NaN: none)
    n_reveals: int
    n_different: int


@torch.no_grad()
def follows_donor(model, batch, donor, intervention: Intervention | Sequence[Hook], tokenizer=None) -> DonorFollowing:
    """Under `intervention` (typically `patch_state` from the run on `donor`), the fraction of `batch`'s
    reveals whose argmax prediction is the donor trace's value: the donor's true state s_t at the same
    position, for the variable the reveal prints. Reveal accuracy says the trace's own value is lost;
    this says whether the donor's took its place. `tokenizer` (default `model.tokenizer`) reads the
    predicted tokens' values."""
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise DeltalensError("follows_donor needs the tokenizer to read predicted values; pass tokenizer=.")
    tokens = batch["tokens"]
    B, T = tokens.shape
    if donor["tokens"].shape[0] != B:
        raise DeltalensError(f"the donor batch has {donor['tokens'].shape[0]} traces, this one {B}; pair them up.")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=list(intervention)):
            logits = model(tokens.to(device)).cpu()
    finally:
        model.train(was_training)
    predicted = logits[:, :-1].argmax(-1)  # predicts tokens[:, 1:]
    reveal = batch["reveal_mask"][:, 1:].clone()
    donor_length = donor.get("lengths", torch.full((B,), donor["tokens"].shape[1]))
    position = torch.arange(1, T)[None, :]
    reveal &= position < torch.minimum(donor_length, torch.tensor(donor["states"].shape[1]))[:, None]
    b, t = reveal.nonzero(as_tuple=True)
    variable = batch["reveal_vars"][:, 1:][b, t]
    donor_value = donor["states"][b, t + 1, variable]
    own_value = batch["answers"][:, 1:][b, t]
    values = {int(i): _token_value(tokenizer, int(i)) for i in predicted[b, t].unique()}
    predicted_value = torch.tensor([values[int(i)] for i in predicted[b, t]], dtype=torch.long)
    follows = predicted_value == donor_value
    different = donor_value != own_value
    n, n_diff = int(len(follows)), int(different.sum())
    if n == 0:
        raise DeltalensError("these traces reveal no values (within the donor's length), so nothing can follow it.")
    return DonorFollowing(
        follows=float(follows.float().mean()),
        follows_where_different=float(follows[different].float().mean()) if n_diff else float("nan"),
        n_reveals=n,
        n_different=n_diff,
    )


def _token_value(tokenizer, token_id: int) -> int:
    """The value 1..n a token writes, 0 for any other token."""
    piece = tokenizer.token_of(token_id).strip()
    return int(piece) if piece.isdigit() else 0
