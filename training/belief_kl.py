"""How far a trained model's predictive is from the exact belief (PFSA-SR).

At every revealed value of a probabilistic trace the exact posterior predictive p (the joint
filter, tasks/pfsa.py) says how likely each value 1..n was given everything before it. The
model's predictive q is its next-token distribution at that position restricted to the n value
tokens and renormalised (``value_mass`` keeps how much it put on them at all). The measure is
KL(p || q) in nats, grouped by the number of partial reveals since the last full reveal (the
initial assignments count as one): the quantity whose unnormalised mass a linear recurrence
cannot restore, since only a full reveal pins the state again.

Two kinds of held-out traces:
* ``random``: the checkpoint's own probabilistic family at the evaluation spacing, from the
  evaluation split (seeds never used in training);
* ``adversarial``: tasks/adversary.py's mix / leak / reveal cycle with block 2 (random swaps at
  the family's p), which never resets and drains the unnormalised marginal at a known rate (for
  families with p = 0.5: its shuffle is a fair swap); a hidden-block family gets its own adversary.

    from deltalens.training.belief_kl import belief_kl
    result = belief_kl(model, tokenizer, spec)          # spec: the checkpoint's ProbTraceSpec
    result.table()                                      # mean KL by kind x partial reveals
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.tasks.adversary import adversarial_sequence, adversarial_trace
from deltalens.tasks.dataset import collate, trace_seed
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.tasks.hidden_block import hidden_block_adversary
from deltalens.tasks.pfsa import joint_filter
from deltalens.tasks.probabilistic import ProbTrace, ProbTraceSpec, generate_prob_trace, parse_prob_trace
from deltalens.tasks.tokenizers import BOS_ID, split_lines

_DIGIT = re.compile(r"\d+")


def partial_counts(trace: ProbTrace) -> list[int]:
    """For every printed value, in order: partial reveals since the last full one before its line."""
    counts, since = [], 0
    for reveal in trace.reveals:
        full = len(reveal.variables) == trace.n
        counts += [since] * len(reveal.variables)
        since = 0 if full else since + 1
    return counts


def uniform_reveal_kl(traces: Sequence[ProbTrace], kind: str) -> pd.DataFrame:
    """One row per revealed value: KL(exact || uniform 1/n), the score of a predictor that learned
    nothing (the scale a model's KL sits on), with kind and partial reveals as `reveal_kl` has them."""
    rows = []
    for trace in traces:
        posts = [post for line in trace.posteriors for post in line]
        for post, since in zip(posts, partial_counts(trace)):
            kl = sum(p * math.log(p * trace.n) for p in post.predictive if p > 0)
            rows.append({"kind": kind, "partial_reveals": since, "kl": kl, "value_mass": 1.0})
    return pd.DataFrame(rows)


def token_table(tokenizer) -> dict[str, int]:
    """Token string -> id (the vocabularies of probabilistic tokenizers have tens of tokens)."""
    return {tokenizer.token_of(i): i for i in range(tokenizer.vocab_size)}


def value_candidates(table: dict[str, int], text: str, n: int) -> list[int]:
    """Ids of the token ``text`` with each value 1..n in place of its number (" 2" -> " 1", " 2", " 3")."""
    try:
        return [table[_DIGIT.sub(str(v), text)] for v in range(1, n + 1)]
    except KeyError:
        raise DeltalensError(f"the tokenizer has no token for every value in place of {text!r}") from None


@torch.no_grad()
def reveal_kl(model, tokenizer, traces: Sequence[ProbTrace], kind: str, batch_size: int = 64) -> pd.DataFrame:
    """One row per revealed value: trace, kind, partial reveals since a full one, KL(p || q), the
    model's mass on value tokens, and p and q themselves."""
    was_training = model.training
    model.eval()
    weight = next(model.parameters(), None)
    device = weight.device if weight is not None else torch.device("cpu")
    table = token_table(tokenizer)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(traces), batch_size):
        chunk = traces[start : start + batch_size]
        encoded = [tokenizer.encode_trace(t) for t in chunk]
        batch = collate(encoded)
        probs = torch.softmax(model(batch["tokens"].to(device)).float().cpu(), dim=-1)
        for b, (trace, enc) in enumerate(zip(chunk, encoded)):
            posteriors = [post for line in trace.posteriors for post in line]
            positions = [t for t, flag in enumerate(enc.is_reveal) if flag]
            for t, post, since in zip(positions, posteriors, partial_counts(trace)):
                candidates = value_candidates(table, tokenizer.token_of(enc.ids[t]), trace.n)
                q_raw = probs[b, t - 1, candidates].double().numpy()  # predicted from position t - 1
                mass = float(q_raw.sum())
                q = q_raw / max(mass, 1e-300)
                p = np.asarray(post.predictive, dtype=np.float64)
                support = p > 0
                kl = float(np.sum(p[support] * (np.log(p[support]) - np.log(np.maximum(q[support], 1e-300)))))
                rows.append(
                    {
                        "trace": start + b,
                        "kind": kind,
                        "partial_reveals": since,
                        "kl": kl,
                        "value_mass": mass,
                        "revealed": int(post.value),
                        "p": p.tolist(),
                        "q": q.tolist(),
                    }
                )
    model.train(was_training)
    return pd.DataFrame(rows)


@torch.no_grad()
def transcript_beliefs(model, tokenizer, text: str) -> pd.DataFrame:
    """Exact posterior predictive (p) and the model's (q) at every printed value of a probabilistic
    REPL transcript, generated or written by hand: one row per value with line, variable, revealed,
    p, q, KL(p || q) and the model's mass on value tokens. Only what an observer sees is used."""
    program = parse_prob_trace(text)
    exact = joint_filter(program.pfsa(), program.events).reveals
    ids, positions = [BOS_ID], []
    for line in split_lines(text if text.endswith("\n") else text + "\n"):
        line_ids = tokenizer.encode(line)
        if not line.startswith(">>>"):  # an output line: its number tokens are the printed values
            numbers = [i for i, token in enumerate(line_ids) if tokenizer.token_of(token).strip().isdigit()]
            positions += [len(ids) + i for i in numbers]
        ids += line_ids
    if len(positions) != len(exact):
        raise DeltalensError("the transcript's output lines and its prints disagree on the number of printed values.")
    weight = next(model.parameters(), None)
    was_training = model.training
    model.eval()
    try:
        logits = model(torch.tensor([ids], device=weight.device if weight is not None else "cpu"))
    finally:
        model.train(was_training)
    probs = torch.softmax(logits[0].float().cpu(), dim=-1)
    table, rows = token_table(tokenizer), []
    for t, post in zip(positions, exact):
        candidates = value_candidates(table, tokenizer.token_of(ids[t]), program.n)
        q_raw = probs[t - 1, candidates].double().numpy()
        mass = float(q_raw.sum())
        q, p = q_raw / max(mass, 1e-300), np.asarray(post.predictive, dtype=np.float64)
        support = p > 0
        kl = float(np.sum(p[support] * (np.log(p[support]) - np.log(np.maximum(q[support], 1e-300)))))
        rows.append(
            {
                "line": post.line,
                "variable": VARIABLE_NAMES[post.variable],
                "revealed": int(post.value),
                "p": p.round(4).tolist(),
                "q": q.round(4).tolist(),
                "kl": kl,
                "value_mass": mass,
            }
        )
    return pd.DataFrame(rows)


def random_traces(spec: ProbTraceSpec, count: int, seed: int = 0) -> list[ProbTrace]:
    """Held-out traces of the family (evaluation split: no seed is ever a training seed)."""
    return [generate_prob_trace(spec, trace_seed(seed, "eval", i)) for i in range(count)]


def adversarial_traces(spec: ProbTraceSpec, count: int, cycles: int, seed: int = 0) -> list[ProbTrace]:
    """The adversary's cycle (block 2, leak probability = the family's swap p) ``cycles`` times; for a
    hidden-block family, its own adversary (tasks/hidden_block.py) with ``cycles`` partial reveals."""
    if spec.hidden_block:
        return [hidden_block_adversary(spec, cycles, seed=seed * 1_000_003 + i) for i in range(count)]
    if spec.swap_prob != 0.5:
        raise DeltalensError(
            f"the block-2 adversary shuffles with a fair swap (p = 0.5), a statement the p = {spec.swap_prob} "
            "family's tokenizer does not have; evaluate it without adversarial traces (n_adversarial=0)."
        )
    sequence = adversarial_sequence(n=spec.n, block=2, p=spec.swap_prob, cycles=cycles)
    return [adversarial_trace(sequence, seed=seed * 1_000_003 + i) for i in range(count)]


@dataclass(repr=False)
class BeliefKL(Summary):
    """KL(exact posterior || model) at every printed value of random and adversarial probabilistic traces.

    >>> prob = dl.load("s3-deltanet-neg-statement-prob")
    >>> result = dl.belief_kl(prob, prob.tokenizer, prob.checkpoint.spec, n_random=4, n_adversarial=2, cycles=2)
    >>> "kl" in result.rows.columns
    True
    """

    rows: pd.DataFrame  # reveal_kl rows of both kinds

    def title(self) -> str:
        means = ", ".join(f"{kind} {kl:.4f}" for kind, kl in self.summary().items())
        return f"BeliefKL: KL(exact posterior predictive || model), nats, by partial reveals (mean: {means})"

    def display_frame(self) -> pd.DataFrame:
        return self.table()

    def table(self, max_partial: int | None = None) -> pd.DataFrame:
        """Mean KL and count per (kind, partial reveals since a full one)."""
        rows = self.rows if max_partial is None else self.rows[self.rows.partial_reveals <= max_partial]
        out = rows.groupby(["kind", "partial_reveals"]).agg(
            kl=("kl", "mean"), kl_sem=("kl", "sem"), value_mass=("value_mass", "mean"), count=("kl", "size")
        )
        return out.reset_index()

    def summary(self) -> dict[str, float]:
        """Mean KL per kind."""
        return {kind: float(group.kl.mean()) for kind, group in self.rows.groupby("kind")}


def belief_kl(
    model, tokenizer, spec: ProbTraceSpec, n_random: int = 256, n_adversarial: int = 64, cycles: int = 16, seed: int = 0
) -> BeliefKL:
    """KL(exact || model) at every reveal of held-out random and adversarial traces.

    >>> prob = dl.load("s3-deltanet-neg-statement-prob")
    >>> result = dl.belief_kl(prob, prob.tokenizer, prob.checkpoint.spec, n_random=4, n_adversarial=2, cycles=2)
    >>> isinstance(result, dl.BeliefKL)
    True
    """
    frames = [reveal_kl(model, tokenizer, random_traces(spec, n_random, seed), "random")]
    if n_adversarial and (spec.hidden_block or spec.swap_prob == 0.5):  # what the adversary can write
        frames.append(reveal_kl(model, tokenizer, adversarial_traces(spec, n_adversarial, cycles, seed), "adversarial"))
    return BeliefKL(pd.concat(frames, ignore_index=True))


def kl_figure(
    tables: dict[str, list[dict[str, Any]]], min_count: int = 20, colors: dict[str, str] | None = None
) -> go.Figure:
    """Mean KL vs partial reveals since the last full reveal, one line per model and trace kind
    (one colour per model; solid: random, dashed: adversarial). ``tables`` maps a model label to
    ``BeliefKL.table().to_dict("records")`` (what checkpoints store); rows with fewer than
    ``min_count`` reveals are dropped.

    >>> prob = dl.load("s3-deltanet-neg-statement-prob")
    >>> result = dl.belief_kl(prob, prob.tokenizer, prob.checkpoint.spec, n_random=4, n_adversarial=2, cycles=2)
    >>> fig = dl.kl_figure({"DeltaNet": result.table().to_dict("records")}, min_count=1)
    >>> len(fig.data) > 0
    True
    """
    palette = plotly.colors.qualitative.Plotly
    colors = {label: (colors or {}).get(label, palette[i % len(palette)]) for i, label in enumerate(tables)}
    fig = go.Figure()
    for label, records in tables.items():
        table = pd.DataFrame.from_records(records)
        for kind, dash in (("random", "solid"), ("adversarial", "dash")):
            part = table[(table.kind == kind) & (table["count"] >= min_count)] if len(table) else table
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part.partial_reveals,
                    y=part.kl,
                    mode="lines+markers",
                    name=f"{label} ({kind})",
                    line={"dash": dash, "color": colors[label]},
                    legendgroup=label,
                    error_y={"type": "data", "array": part.kl_sem.fillna(0)},
                )
            )
    fig.update_layout(
        title="KL(exact posterior predictive ‖ model predictive) at reveals",
        xaxis_title="partial reveals since the last full reveal",
        yaxis_title="KL (nats)",
        template="plotly_white",
    )
    fig.update_yaxes(type="log")
    return fig
