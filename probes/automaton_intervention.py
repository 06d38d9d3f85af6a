"""The automaton's causal check: move one head's state to another cluster's centroid and see whether the model's
reveal follows the value that cluster stands for (probes/automaton.py extracts the automaton)."""

from __future__ import annotations

import numpy as np
import torch

from deltalens.core.errors import DeltalensError
from deltalens.probes.automaton import Automaton
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["centroid_intervention"]


@torch.no_grad()
def centroid_intervention(model, batch: dict, automaton: Automaton, max_cases: int = 64, seed: int = 0) -> dict:
    """Move the head's state at the last action before a reveal to another cluster's centroid; the fraction of
    reveals whose prediction becomes that cluster's value (and, as a control, stays right without the move).

    >>> result = dl.centroid_intervention(model, batch, dl.extract_automaton(cap, 0, 3), max_cases=8)
    >>> isinstance(result, dict)
    True
    """
    from deltalens.interp.batch_inputs import require_batch
    from deltalens.interp.interventions import patch_state

    require_batch(batch, "centroid_intervention")
    hook = f"blocks.{automaton.layer}.attn.hook_state"
    fits = hook in model.hook_dict and automaton.head < model.cfg.n_heads
    fits = fits and len(automaton.cluster_labels[0]) == batch["states"].shape[-1]  # as many variables
    if not fits or tuple(automaton.state_shape) != (model.cfg.d_k, model.cfg.d_v):
        raise DeltalensError(
            f"this automaton was read off L{automaton.layer}H{automaton.head} of another model (states "
            f"{automaton.state_shape[0]} x {automaton.state_shape[1]}): extract one from this model's capture"
        )
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise DeltalensError("centroid_intervention reads the predicted values with the model's tokenizer.")
    value_of = {}
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.token_of(i).strip()
        if piece.isdigit():
            value_of[i] = int(piece)
    rng = np.random.default_rng(seed)
    kinds, tokens = batch["kinds"], batch["tokens"]
    cases = []
    for b in range(tokens.shape[0]):
        for t in batch["reveal_mask"][b].nonzero().flatten().tolist():
            before = (kinds[b, :t] == TokenKind.ACTION).nonzero().flatten()
            init = (kinds[b, :t] == TokenKind.INIT).nonzero().flatten()
            if len(before) and len(init):
                start = batch["states"][b, int(init[-1])].tolist()
                cases.append((b, int(before[-1]), t, int(batch["reveal_vars"][b, t]), start))
    cases = cases[:max_cases]
    if not cases:
        raise DeltalensError("no reveal follows an action in this batch.")
    moved = kept = 0
    d_k, d_v = automaton.state_shape
    by_product = automaton.extra.get("label") == "product"
    delay = int(automaton.extra.get("delay", 0))
    for b, t_action, t_reveal, var, start in cases:
        t_action = min(t_action + delay, t_reveal - 2)  # where the automaton read the state, before the prediction
        target = int(rng.integers(automaton.k))
        label = automaton.cluster_labels[target]
        want = start[label[var]] if by_product else label[var]
        source = torch.zeros(1, tokens.shape[1], model.cfg.n_heads, d_k, d_v)
        source[0, t_action, automaton.head] = automaton.centroids[target].reshape(d_k, d_v)
        iv = patch_state(automaton.layer, automaton.head, source, positions=[t_action])
        row = tokens[b : b + 1]
        with model.hooks(fwd_hooks=iv.hooks):
            predicted = int(model(row)[0, t_reveal - 1].argmax())
        moved += value_of.get(predicted, 0) == want
        kept += int(model(row)[0, t_reveal - 1].argmax()) == int(tokens[b, t_reveal])
    return {"cases": len(cases), "follows_centroid": moved / len(cases), "correct_without": kept / len(cases)}
