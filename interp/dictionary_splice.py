"""A sparse dictionary spliced into the forward: the site replaced by its reconstruction, optionally with some
latents removed, and reveal accuracy under it (SAE papers' "loss recovered", in this task's terms).

    iv = dl.splice_sae(model, d)                          # an Intervention: hooks on the site
    iv = dl.splice_sae(model, d, drop=[3, 17])            # the same without latents 3 and 17
    report = dl.splice_report(model, d, batch, score, fact=(0, 1))   # variable a (0) holds value 2 (index 1)

For a state site the hook is on hook_state, so the reconstructed S_t is what o_t reads and what step t + 1
continues from (the state edit that propagates; models/layers/hooked_recurrence.py); z and resid replace those
activations where they are. A write has no hook of its own (beta, k and v each have one), so a `write`
dictionary is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.batch_inputs import as_batch, require_labels
from deltalens.interp.interventions import Intervention
from deltalens.training.evaluate import score_batch

__all__ = ["SpliceReport", "fact_latents", "splice_report", "splice_sae"]


def _check_site(dictionary) -> None:
    if dictionary.site == "write":
        raise DeltalensError(
            "a 'write' dictionary cannot be spliced: the write beta_t k_t v_t^T has no hook of its own (splice a "
            "state or z dictionary of the same head)."
        )


def _check_fits(model, dictionary) -> None:
    """One sentence unless the dictionary's layer, head and site are this model's (a dictionary trained on another
    model failed deep in the forward, and left the layer's state_edit set)."""
    layer, head, site = dictionary.layer, dictionary.head, dictionary.site
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    where = "hook_resid_post" if site == "resid" else "attn.hook_z" if site == "z" else "attn.hook_state"
    fits = isinstance(layer, int) and 0 <= layer < n_layers and f"blocks.{layer}.{where}" in model.hook_dict
    if site != "resid":
        fits = fits and isinstance(head, int) and 0 <= head < n_heads
    if not fits:
        at = f"layer {layer}" + ("" if site == "resid" else f", head {head}")
        raise DeltalensError(
            f"this dictionary codes {site} at {at}, which this model ({n_layers} layers of {n_heads} heads) does not "
            "have: splice a dictionary trained on this model"
        )


def _reconstructor(dictionary, dropped):
    """x (..., site shape) -> its reconstruction, in place of one head's part of an activation."""
    head, site = dictionary.head, dictionary.site

    def rebuild(part: torch.Tensor) -> torch.Tensor:
        width = part.shape[-1] if site in ("state_rows", "z", "resid") else part[0, 0].numel()
        rows = part.reshape(-1, width).float()
        return dictionary.reconstruct(rows, dropped).reshape(part.shape).to(part.dtype)

    return head, rebuild


def splice_sae(model, dictionary, drop: Sequence[int] | None = None) -> Intervention:
    """An Intervention replacing the dictionary's site by its reconstruction (without the `drop` latents).

    >>> d = dl.train_sae(model, batch, site="z", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> 0.0 <= dl.accuracy_under(model, batch, dl.splice_sae(model, d)) <= 1.0
    True

    A state site is replaced inside the recurrence, step by step (S_t := reconstruction of the S_t the edited
    past produced; the layer's state_edit, set by a hook on its hook_q and cleared by one on its hook_z), so
    reconstruction errors carry forward as they would if the dictionary were the state. A layer without a
    per-step edit (M²RNN's non-linear recurrence) has each S_t replaced through hook_state by the reconstruction
    of the unedited run's S_t instead, which the layer continues from but whose errors do not compound (the
    label says so). z and resid are replaced where they are. (A forward that raises inside the spliced layer leaves
    its state_edit set until the layer's next hook_z: run the next forward with the splice, or set
    `model.blocks[layer].attn.state_edit = None`.)"""
    _check_site(dictionary)
    _check_fits(model, dictionary)
    layer, site = dictionary.layer, dictionary.site
    dropped = None
    if drop is not None:
        dropped = torch.as_tensor(list(drop), dtype=torch.long)
        if len(dropped) and (dropped.min() < 0 or dropped.max() >= dictionary.num_latents):
            raise DeltalensError(f"latents to drop must be 0 .. {dictionary.num_latents - 1}; got {list(drop)}.")
    head, rebuild = _reconstructor(dictionary, dropped)
    where = f"L{layer}" + ("" if head is None else f"H{head}")
    label = f"splice {site} {where}" + (f" without latents {list(drop)}" if drop else "")
    if site == "resid":
        name = f"blocks.{layer}.hook_resid_post"
        hooks = [(name, lambda act, hook=None: rebuild(act))]
    elif site == "z":
        name = f"blocks.{layer}.attn.hook_z"

        def replace_z(act: torch.Tensor, hook=None) -> torch.Tensor:
            act = act.clone()
            act[:, :, head] = rebuild(act[:, :, head])
            return act

        hooks = [(name, replace_z)]
    elif not hasattr(model.blocks[layer].attn, "state_edit"):  # M²RNN: no per-step edit; replace what it shows
        name = f"blocks.{layer}.attn.hook_state"
        label += " (each S_t rebuilt from the unedited run's: no compounding)"

        def replace_state(act: torch.Tensor, hook=None) -> torch.Tensor:
            act = act.clone()
            act[:, :, head] = rebuild(act[:, :, head])
            return act

        hooks = [(name, replace_state)]
    else:
        name = f"blocks.{layer}.attn.hook_q"
        mixer = model.blocks[layer].attn

        def edit(t: int, S: torch.Tensor) -> torch.Tensor:  # S (B, H, d_k, d_v) after token t
            S = S.clone()
            S[:, head] = rebuild(S[:, head][:, None])[:, 0]
            return S

        def arm(act, hook=None):
            mixer.state_edit = edit
            return act

        def disarm(act, hook=None):
            mixer.state_edit = None
            return act

        hooks = [(name, arm), (f"blocks.{layer}.attn.hook_z", disarm)]
    if hooks[0][0] not in model.hook_dict:
        raise DeltalensError(f"this model has no {hooks[0][0]}: the dictionary was trained on another architecture.")
    return Intervention(label, hooks, layer=layer, head=head)


def fact_latents(score, variable: int, value: int, top: int = 3) -> list[int]:
    """The latents whose best fact is "variable holds value" (0-based), highest F1 first, at most `top`.

    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> len(dl.fact_latents(dl.score_sae(d, cap), 0, 1)) <= 3
    True
    """
    rows = score.features[(score.features["variable"] == variable) & (score.features["value"] == value)]
    rows = rows[~rows["dead"]].sort_values("f1", ascending=False)
    return [int(x) for x in rows["latent"].head(top)]


@dataclass
class SpliceReport:
    """Reveal accuracy plain, spliced, and spliced without one fact's latents (on that fact's reveals and the rest).

    >>> d = dl.train_sae(model, batch, site="z", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> dl.splice_report(model, d, batch).baseline
    1.0
    """

    baseline: float
    spliced: float
    fact: tuple[int, int] | None = None  # (variable, value), 0-based
    dropped: list[int] | None = None
    fact_reveals: int = 0
    fact_accuracy_spliced: float = float("nan")  # on reveals of `variable` whose answer is `value`
    fact_accuracy_ablated: float = float("nan")
    other_accuracy_spliced: float = float("nan")  # on every other reveal
    other_accuracy_ablated: float = float("nan")

    def to_dict(self) -> dict:
        return dict(vars(self))


def _reveal_outcomes(model, batch, intervention) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(correct, variable, answer) per reveal token, under `intervention`."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=[] if intervention is None else list(intervention)):
            score = score_batch(model, batch)
    finally:
        model.train(was_training)
    reveal = score["reveal"]
    return score["correct"][reveal], batch["reveal_vars"][reveal], batch["answers"][reveal]


def splice_report(model, dictionary, batch, score=None, fact: tuple[int, int] | None = None, top: int = 3):
    """Reveal accuracy on `batch` plain and with the dictionary spliced in; with `fact` = (variable, value), 0-based,
    also spliced without that fact's `top` latents (fact_latents of `score`), split into that fact's reveals
    (variable printed, value the answer) and every other reveal.

    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> report = dl.splice_report(model, d, batch)
    >>> 0.0 <= report.spliced <= report.baseline == 1.0
    True
    """
    source, batch = batch, as_batch(model, batch)
    require_labels(batch, "a splice report", source)
    plain, variable, answer = _reveal_outcomes(model, batch, None)
    spliced, _, _ = _reveal_outcomes(model, batch, splice_sae(model, dictionary))
    report = SpliceReport(baseline=float(plain.float().mean()), spliced=float(spliced.float().mean()))
    if fact is None:
        return report
    if score is None:
        raise DeltalensError("ablating a fact needs the dictionary's score (dl.score_sae) to find its latents.")
    x, v = fact
    dropped = fact_latents(score, x, v, top)
    if not dropped:
        raise DeltalensError(f"no live latent of this dictionary matches the fact: variable {x} holds value {v + 1}.")
    ablated, _, _ = _reveal_outcomes(model, batch, splice_sae(model, dictionary, drop=dropped))
    target = (variable == x) & (answer == v + 1)  # answers are the traces' values 1 .. n
    mean = lambda t, m: float(t[m].float().mean()) if m.any() else float("nan")  # noqa: E731
    report.fact, report.dropped, report.fact_reveals = (x, v), dropped, int(target.sum())
    report.fact_accuracy_spliced, report.fact_accuracy_ablated = mean(spliced, target), mean(ablated, target)
    report.other_accuracy_spliced, report.other_accuracy_ablated = mean(spliced, ~target), mean(ablated, ~target)
    return report
