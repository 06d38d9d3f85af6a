"""A sparse dictionary scored against the truth: which fact "variable x holds value v" each feature fires for.

    score = dl.score_sae(dictionary, model, batch)     # or a Capture holding the site's hooks
    score.features     # per latent: its best fact, precision, recall, F1, frequency, dead, dense
    score.facts        # per fact (x, v): the latent with the best F1 for it
    score.coverage     # facts with a latent at F1 >= 0.9 (of n x n)
    score.arrangements # per whole state (which value each variable holds, one of n! for a permutation group):
                       # the latent with the best F1 for it; score.arrangement_coverage counts those >= 0.9

Rows are the held-out (odd-numbered) traces' kept tokens, as the dictionary's training split leaves them
(probes/sparse_dictionary.py). A latent is "on" at a row when it is among the row's top k with a positive
activation; a fact is true at a row when the true state at that token has variable x holding value v (the
capture's `states`, the same labels the linear probes read). For every (latent, fact) pair: precision
P(fact | on), recall P(on | fact), F1; each latent's best fact is the one of highest F1. Dead: never on over
these rows; dense: on at more than half of them (a fact is true at 1/n of the rows, so a latent that
tracks one fires far less often). A `state_rows` dictionary has d_k rows per token, each with the token's facts.
A fact holds in several arrangements (S3: "a holds 2" in 2 of the 6), so a latent per arrangement matches a
fact at recall 1/2 at best; the arrangement table scores the latents against the whole states as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.probes.sparse_dictionary import Dictionary, _capture_for, site_vectors

__all__ = ["DictionaryScore", "score_sae", "COVERED_F1", "DENSE_FRACTION"]

COVERED_F1 = 0.9  # a fact is covered when some latent matches it at F1 >= this
DENSE_FRACTION = 0.5  # a latent on at more than this share of rows is dense


@dataclass
class DictionaryScore(Summary):
    """Per latent and per fact, how the dictionary's features match the true state (module docstring).

    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> score = dl.score_sae(d, cap)
    >>> len(score.facts) == score.n_facts == 9                 # S3: variables a, b, c x values 1, 2, 3
    True
    """

    features: pd.DataFrame  # latent, variable, value, precision, recall, f1, frequency, dead, dense
    facts: pd.DataFrame  # variable, value, latent, precision, recall, f1 (the latent of best F1 for it)
    n_vars: int
    rows: int
    fvu: float  # fraction of variance unexplained on these rows
    arrangements: pd.DataFrame | None = None  # arrangement ("a=1 b=2 c=3"), rows, latent, precision, recall, f1

    @property
    def arrangement_coverage(self) -> int:
        """Arrangements seen in the rows with a latent at F1 >= COVERED_F1."""
        return 0 if self.arrangements is None else int((self.arrangements["f1"] >= COVERED_F1).sum())

    @property
    def coverage(self) -> int:
        """Facts with a latent at F1 >= COVERED_F1."""
        return int((self.facts["f1"] >= COVERED_F1).sum())

    @property
    def n_facts(self) -> int:
        return self.n_vars * self.n_vars

    def title(self) -> str:
        return (
            f"DictionaryScore: {self.coverage} of {self.n_facts} facts covered at F1 >= {COVERED_F1}, "
            f"{self.arrangement_coverage} of {0 if self.arrangements is None else len(self.arrangements)} "
            f"arrangements, {int(self.features['dead'].sum())} dead and {int(self.features['dense'].sum())} dense "
            "latents, "
            f"FVU {self.fvu:.3f} on {self.rows} held-out rows"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.facts

    def to_dict(self) -> dict:
        return {
            "coverage": self.coverage,
            "n_facts": self.n_facts,
            "dead": int(self.features["dead"].sum()),
            "dense": int(self.features["dense"].sum()),
            "fvu": self.fvu,
            "rows": self.rows,
            "arrangement_coverage": self.arrangement_coverage,
            "arrangements": [] if self.arrangements is None else self.arrangements.to_dict(orient="records"),
            "facts": self.facts.to_dict(orient="records"),
            "features": self.features.to_dict(orient="records"),
        }


def fact_table(on: np.ndarray, states: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(precision, recall, F1), each (latents, n, n), of every latent (on: rows x latents, bool) for every fact
    "variable x holds value v" (states: rows x n, values 0 .. n-1, i.e. the traces' value minus one)."""
    truth = np.stack([states == v for v in range(n)], axis=-1)  # (rows, x, v)
    truth = truth.reshape(len(states), n * n).astype(np.float64)
    on = on.astype(np.float64)
    both = on.T @ truth  # (latents, facts)
    fired, true = on.sum(0)[:, None], truth.sum(0)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(fired > 0, both / fired, 0.0)
        recall = np.where(true > 0, both / true, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    shape = (on.shape[1], n, n)
    return precision.reshape(shape), recall.reshape(shape), f1.reshape(shape)


def _kind_ids(kinds) -> list[int]:
    from deltalens.tasks.tokenizers.base import TokenKind

    kinds = [kinds] if isinstance(kinds, (str, int)) else list(kinds)
    ids = []
    for kind in kinds:
        try:
            ids.append(int(TokenKind[kind.upper()]) if isinstance(kind, str) else int(TokenKind(kind)))
        except (KeyError, ValueError):
            names = ", ".join(k.name.lower() for k in TokenKind)
            raise DeltalensError(f"unknown token kind {kind!r}; use one of {names}.") from None
    return ids


def score_sae(dictionary: Dictionary, source, batch=None, kinds=None) -> DictionaryScore:
    """Score `dictionary` against the true state on the held-out traces of `source` (a Capture holding its
    site's hooks, or a model with `batch`; module docstring). kinds: score only at tokens of these kinds
    (TokenKind or its names, e.g. ("print",) for the print lines, where the state is read out); None: every token.

    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> score = dl.score_sae(d, cap)
    >>> 0 <= score.coverage <= score.n_facts
    True
    """
    cap = _capture_for(source, batch, dictionary.site, dictionary.layer)
    n = cap.n_vars
    if n < 1:
        raise DeltalensError("scoring a dictionary needs traces that carry their true state (a REPL task's batch).")
    x, token = site_vectors(cap, dictionary.site, dictionary.layer, dictionary.head)
    held = (cap.labels["trace"][token] % 2) == 1
    if not held.any():
        raise DeltalensError("scoring needs held-out rows: capture at least two traces (the odd ones are scored).")
    if kinds is not None:
        held &= torch.isin(cap.labels["kind"][token], torch.as_tensor(_kind_ids(kinds)))
        if not held.any():
            raise DeltalensError(f"no held-out token is of the kinds {list(kinds)!r}.")
    x, token = x[held], token[held]
    states = cap.states[token].numpy() - 1  # the traces write values 1 .. n
    if states.min() < 0 or states.max() >= n:
        raise DeltalensError(f"the capture's true states are not values 1 .. {n}; score on a REPL task's traces.")
    acts = dictionary.activations(x)
    on = (acts > 0).numpy()
    precision, recall, f1 = fact_table(on, states, n)
    flat = f1.reshape(len(f1), -1)
    best = flat.argmax(1)
    frequency = on.mean(0)
    features = pd.DataFrame(
        {
            "latent": np.arange(len(f1)),
            "variable": best // n,
            "value": best % n,
            "precision": precision.reshape(len(f1), -1)[np.arange(len(f1)), best],
            "recall": recall.reshape(len(f1), -1)[np.arange(len(f1)), best],
            "f1": flat[np.arange(len(f1)), best],
            "frequency": frequency,
            "dead": frequency == 0,
            "dense": frequency > DENSE_FRACTION,
        }
    )
    top = flat.argmax(0)  # per fact, the latent of highest F1
    facts = pd.DataFrame(
        {
            "variable": np.repeat(np.arange(n), n),
            "value": np.tile(np.arange(n), n),
            "latent": top,
            "precision": precision.reshape(len(f1), -1)[top, np.arange(n * n)],
            "recall": recall.reshape(len(f1), -1)[top, np.arange(n * n)],
            "f1": flat[top, np.arange(n * n)],
        }
    )
    with torch.no_grad():
        error = (dictionary.reconstruct(x) - x).pow(2).sum()
        fvu = float(error / (x - x.mean(0)).pow(2).sum().clamp_min(1e-30))
    return DictionaryScore(
        features=features, facts=facts, n_vars=n, rows=len(x), fvu=fvu, arrangements=arrangement_table(on, states)
    )


def arrangement_table(on: np.ndarray, states: np.ndarray) -> pd.DataFrame:
    """Per arrangement of values seen in the rows (states: rows x n, values 0 .. n-1), the latent of best F1."""
    from deltalens.tasks.groups import VARIABLE_NAMES

    seen, which = np.unique(states, axis=0, return_inverse=True)
    truth = np.eye(len(seen), dtype=np.float64)[which.reshape(-1)]  # (rows, arrangements)
    hits = on.astype(np.float64).T @ truth  # (latents, arrangements)
    fired, true = on.sum(0)[:, None].astype(np.float64), truth.sum(0)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(fired > 0, hits / fired, 0.0)
        recall = hits / true
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    top = f1.argmax(0)
    cols = np.arange(len(seen))
    names = [" ".join(f"{VARIABLE_NAMES[i]}={v + 1}" for i, v in enumerate(row)) for row in seen]
    return pd.DataFrame(
        {
            "arrangement": names,
            "rows": true[0].astype(int),
            "latent": top,
            "precision": precision[top, cols],
            "recall": recall[top, cols],
            "f1": f1[top, cols],
        }
    )
