"""Reveal accuracy under an intervention: the measurement every intervention, sweep and patch reports.

    dl.reveal_accuracy(model, batch, intervention)   # training.evaluate's EvalResult (reveal and trace accuracy)
    dl.accuracy_under(model, batch, intervention)    # its reveal accuracy, a float

The batches are batch dicts, token ids or REPL text (interp/batch_inputs.py); an intervention is an
interp/interventions.py Intervention or a list of forward hooks.
"""

from __future__ import annotations

import torch

from deltalens.interp.batch_inputs import as_batch, require_labels
from deltalens.training.evaluate import score_batch, summarise

__all__ = ["accuracy_under", "reveal_accuracy"]


@torch.no_grad()
def reveal_accuracy(model, batches, intervention=None):
    """training.evaluate's EvalResult (reveal and trace accuracy) on `batches` under `intervention`.

    >>> dl.reveal_accuracy(model, batch).reveal_accuracy > 0.99
    True
    """
    if not isinstance(batches, list) or (batches and isinstance(batches[0], str)):
        batches = [batches]
    sources, batches = batches, [as_batch(model, batch) for batch in batches]  # text, ids or batches (batch_inputs.py)
    for source, batch in zip(sources, batches):
        require_labels(batch, "reveal accuracy", source)
    hooks = [] if intervention is None else list(intervention)
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=hooks):
            scores = [score_batch(model, batch) for batch in batches]
    finally:
        model.train(was_training)
    return summarise(scores)


def accuracy_under(model, batches, intervention=None) -> float:
    """Reveal accuracy (a float) on `batches` under `intervention`.

    >>> dl.accuracy_under(model, batch) > 0.99, dl.accuracy_under(model, batch, dl.ablate_head(model, 1, 0)) > 0.9
    (True, True)
    """
    return reveal_accuracy(model, batches, intervention).reveal_accuracy
