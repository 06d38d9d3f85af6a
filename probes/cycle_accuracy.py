"""Reveal accuracy by the cycle type of the actions a reveal depends on.

A model that applies n_h reflections per token in some representation can apply exactly the
elements that need at most n_h there (tasks/rotation_reps.py): in the standard representation a
4-cycle of S4 needs 3 and a 5-cycle of A5 needs 4, in the rotation ones every element needs 2. Which
actions a model gets wrong says which representation it is limited by.

Errors compound over a trace (a state gone wrong stays wrong), so a reveal is charged to the
actions since the state was last known. The meaningful split is per *action*, not per composed
permutation: a model that applies one action per token fails on the action it cannot apply, whatever
the product of the stretch is. Two views, both from `reveal_frame` (one row per revealed value):

* `single_action_table`: traces with ONE action and then one reveal (`checkpoint.batch(n,
  actions=1, spacing=1)`): the state before the action is the initial assignment, which the trace
  spells out, so the reveal tests that one action. Only reveals of a variable the action moves count
  (a fixed variable keeps its initial value: no action needed). Split by the action's cycle type.
* `stretch_table`: the first reveal of ordinary held-out traces (state before = the initial
  assignment again, no compounding), split by how many of the actions in between need more than
  `reflections` reflections in the standard representation.
* `position_table`: every reveal of a moved variable whose earlier reveals in the trace were all
  right, by its number in the trace and that same count: whether errors follow the hard actions or
  the time since the start.

Both carry chance (1/n) and, for a moved variable, the initial value guess, which is always wrong (0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import lex_unrank
from deltalens.tasks.representations import cycle_type
from deltalens.tasks.tokenizers import TokenKind
from deltalens.training.evaluate import score_batch

__all__ = ["reveal_frame", "single_action_table", "stretch_table", "position_table", "standard_reflections"]


def standard_reflections(perm: tuple[int, ...]) -> int:
    """Reflections the permutation needs in the standard representation: n minus its number of cycles."""
    return len(perm) - len(cycle_type(perm))


@torch.no_grad()
def reveal_frame(model, batch: dict, hooks=()) -> pd.DataFrame:
    """One row per revealed value of `batch`, scored under forward `hooks` (an Intervention or hook list):
    trace, reveal number in its trace, actions before it, the variable, correct, the actions since the
    previous reveal (their permutations, in order), and whether the composed stretch moves the variable."""
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=list(hooks)):
            score = score_batch(model, batch)
    finally:
        model.train(was_training)
    n = batch["states"].shape[-1]
    rows = []
    for b in range(batch["tokens"].shape[0]):
        kinds, action_pos, perm_ids = batch["kinds"][b], batch["action_pos"][b], batch["perm_ids"][b]
        is_action = (kinds == int(TokenKind.ACTION)) & (action_pos >= 0)
        perms = {int(action_pos[p]): lex_unrank(int(perm_ids[p]), n) for p in torch.nonzero(is_action).flatten()}
        previous_steps, previous_state = 0, batch["states"][b, 0].tolist()
        for number, p in enumerate(torch.nonzero(score["reveal"][b]).flatten().tolist()):
            steps, v = int(batch["state_steps"][b, p]), int(batch["reveal_vars"][b, p])
            state = batch["states"][b, p].tolist()
            if v < 0:
                raise DeltalensError("the batch marks a reveal with no revealed variable; use a trace batch.")
            stretch = tuple(perms[a] for a in range(previous_steps, steps))
            rows.append(
                {
                    "trace": b,
                    "reveal": number,
                    "actions_before": steps,
                    "var": v,
                    "correct": bool(score["correct"][b, p]),
                    "stretch": stretch,
                    "moved": state[v] != previous_state[v],
                }
            )
            previous_steps, previous_state = steps, state
    return pd.DataFrame(rows)


def _summary(frame: pd.DataFrame, by: str, n: int) -> pd.DataFrame:
    table = frame.groupby(by)["correct"].agg(accuracy="mean", n="size").reset_index()
    table["chance"] = 1.0 / n
    table["initial value guess"] = 0.0  # a moved variable no longer holds its initial value
    return table


def single_action_table(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """Accuracy at the first reveal after exactly one action, by that action's cycle type (moved variables only)."""
    first = frame[(frame["reveal"] == 0) & (frame["stretch"].map(len) == 1) & frame["moved"]].copy()
    if first.empty:
        raise DeltalensError("no single-action reveals of a moved variable; use batch(n, actions=1, spacing=1).")
    first["cycle_type"] = first["stretch"].map(lambda s: "+".join(map(str, cycle_type(s[0]))))
    first["reflections (standard rep)"] = first["stretch"].map(lambda s: standard_reflections(s[0]))
    table = _summary(first, "cycle_type", n)
    needs = first.groupby("cycle_type")["reflections (standard rep)"].first()
    table.insert(1, "reflections (standard rep)", table["cycle_type"].map(needs))
    return table.sort_values("reflections (standard rep)").reset_index(drop=True)


def stretch_table(frame: pd.DataFrame, n: int, reflections: int = 2) -> pd.DataFrame:
    """Accuracy at each trace's first reveal of a moved variable, by the number of actions before it
    that need more than `reflections` reflections in the standard representation."""
    first = frame[(frame["reveal"] == 0) & frame["moved"]].copy()
    if first.empty:
        raise DeltalensError("no first reveals of a moved variable in this batch.")
    column = f"actions needing > {reflections} (standard rep)"
    first[column] = first["stretch"].map(lambda s: int(np.sum([standard_reflections(p) > reflections for p in s])))
    return _summary(first, column, n)


def position_table(frame: pd.DataFrame, reflections: int = 2) -> pd.DataFrame:
    """Accuracy (and count) by reveal number (rows, 1 = first) and the number of actions since the previous
    reveal needing more than `reflections` reflections in the standard representation (columns), over
    reveals of a moved variable whose earlier reveals in the same trace were all right."""
    frame = frame.sort_values(["trace", "reveal"]).copy()
    earlier_wrong = frame.groupby("trace")["correct"].transform(lambda c: (~c).cumsum().shift(1, fill_value=0))
    kept = frame[(earlier_wrong == 0) & frame["moved"]].copy()
    kept["hard"] = kept["stretch"].map(lambda s: int(np.sum([standard_reflections(p) > reflections for p in s])))
    kept["reveal"] += 1
    table = kept.groupby(["reveal", "hard"])["correct"].agg(accuracy="mean", n="size").reset_index()
    return table.rename(columns={"hard": f"actions needing > {reflections} (standard rep)"})
