"""The automaton a tracking head implements, read off its states, and compared with the group's Cayley graph.

A head that tracks a permutation should visit one state S_t per value arrangement and move between them
as the actions say: its states, taken after each action, should cluster by the tracked arrangement, and
the clusters with the actions' transitions should form the Cayley graph of the group on the actions
used (vertices: arrangements; an edge g -a-> g.a per action a). `extract_automaton(cap, layer, head)`:

1. states: hook_state of the head (flattened d_k x d_v) `delay` tokens after the last token of each action,
   plus the last initialisation token (the start state), from a Capture of hook_state. The delay matters:
   with a short convolution before k and v a head may apply an action's reflection one token late (the
   shipped S3 DeltaNet's L0H3 does: its state after action t holds the arrangement after action t - 1,
   100% linearly decodable, against 33% at delay 0). delay=None picks the delay, 0 .. 3, at which the
   held-out traces' states are best told apart by their nearest training class mean (`extra["delay"]`);
2. clusters: k-means for each candidate k on the training traces, k chosen by the silhouette of the
   held-out traces' states (assigned to the nearest training centroid);
3. transitions: consecutive action positions give (cluster, action) -> next cluster; the table keeps the
   majority next cluster, and `determinism` is the fraction of observed transitions that follow it;
4. minimised: Moore partition refinement, each cluster labelled by the arrangement most of its states
   hold (what a reveal would print), so clusters that behave alike and print alike merge;
5. compared with the Cayley graph (the closure of the observed arrangements under the actions used,
   each action's permutation read off the data): `agreement` is the fraction of the minimised table's
   transitions that map, through the labels, onto Cayley edges; `isomorphic` whether some bijection
   of states onto arrangements carries every transition onto an edge and covers the whole graph.

`centroid_intervention(model, batch, result)` is the causal check: replace the head's state at an action
just before a reveal by another cluster's centroid (replacement semantics, interp/interventions.py) and
count how often the reveal then prints that cluster's value.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.capture import Capture
from deltalens.probes.automaton_graph import (
    _apply,
    _closure,
    _isomorphic,
    _minimised,
    _permutation_of_actions,
    _transitions,
    statement_of,
)
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["Automaton", "extract_automaton", "automaton_figure"]

MAX_CLUSTERS = 1024  # the most clusters tried: k-means' cost grows with k
CANDIDATES = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 24, 30, 32, 40, 48, 60, 64, 90, 96, 120, 128, 160, 240)


@dataclass(repr=False)
class Automaton(Summary):
    """The automaton one head's states form (module docstring), and how it compares with the Cayley graph.

    >>> automaton = dl.extract_automaton(cap, 0, 3)
    >>> isinstance(automaton, dl.Automaton), automaton.isomorphic
    (True, True)
    """

    layer: int
    head: int
    k: int  # clusters chosen
    scores: dict[int, float]  # candidate k -> held-out silhouette
    n_states: int  # after minimisation
    labels: list[tuple[int, ...]]  # minimised state -> the arrangement most of its states hold
    transitions: dict[tuple[int, int], int]  # (state, action perm id) -> state, minimised
    determinism: float  # observed transitions that follow the majority table (clusters)
    agreement: float  # minimised transitions that land on the Cayley edge of their labels
    isomorphic: bool
    n_arrangements: int  # vertices of the Cayley graph (closure of the observed arrangements)
    actions: list[int]  # perm ids of the actions used
    centroids: torch.Tensor  # (k, d_k * d_v) cluster centroids
    cluster_to_state: list[int]  # cluster -> minimised state
    cluster_labels: list[tuple[int, ...]]  # cluster -> majority arrangement
    state_shape: tuple[int, int] = (0, 0)
    purity: float = 0.0  # states whose cluster's majority arrangement is their own
    extra: dict = field(default_factory=dict)

    def title(self) -> str:
        verdict = "isomorphic to" if self.isomorphic else "not isomorphic to"
        return (
            f"Automaton of L{self.layer}H{self.head}: {self.k} clusters -> {self.n_states} states after minimisation, "
            f"{verdict} the Cayley graph ({self.n_arrangements} arrangements, {len(self.actions)} actions); "
            f"{self.agreement:.1%} of transitions agree, determinism {self.determinism:.1%}, purity {self.purity:.1%}"
            f" (states read {self.extra.get('delay', 0)} token(s) after each action)"
        )

    def tracks(self) -> bool:
        """Whether the head's states track what its traces do: at least two states after minimisation, and
        clusters at least half pure (most states in a cluster hold its arrangement)."""
        return self.n_states >= 2 and self.purity >= 0.5

    def verdict(self) -> str:
        """One sentence: what the automaton shows, or why there is no automaton to draw."""
        if self.tracks():
            return self.title()
        return (
            f"L{self.layer}H{self.head} does not track the arrangement: its states minimise to "
            f"{self.n_states} state{'s' if self.n_states != 1 else ''} for {self.n_arrangements} arrangements "
            f"(clusters {self.purity:.0%} pure), so there is no automaton to draw; pick a tracking head "
            "(the attribution ranking's top one, or the Heads page's)."
        )

    def display_frame(self) -> pd.DataFrame:
        rows = [
            {
                "state": s,
                "label": "".join(map(str, self.labels[s])),
                "action": a,
                "next": t,
                "next_label": "".join(map(str, self.labels[t])),
            }
            for (s, a), t in sorted(self.transitions.items())
        ]
        return pd.DataFrame(rows, columns=["state", "label", "action", "next", "next_label"])

    def to_dict(self) -> dict:
        return {
            "layer": self.layer,
            "head": self.head,
            "clusters": self.k,
            "states": self.n_states,
            "arrangements": self.n_arrangements,
            "actions": len(self.actions),
            "isomorphic_to_cayley": self.isomorphic,
            "transition_agreement": round(self.agreement, 4),
            "determinism": round(self.determinism, 4),
            "purity": round(self.purity, 4),
            "label": self.extra.get("label"),
            "purity_arrangement": round(self.extra.get("purity_arrangement", float("nan")), 4),
            "purity_product": round(self.extra.get("purity_product", float("nan")), 4),
            "delay": self.extra.get("delay"),
            "silhouette": {int(k): round(v, 4) for k, v in self.scores.items()},
        }


def _action_rows(cap: Capture) -> list[list[int]]:
    """Per trace, the capture rows of its start state and of the last token of each action, in order."""
    kind = cap.labels["kind"].numpy()
    trace = cap.labels["trace"].numpy()
    action_pos = cap.labels["action_pos"].numpy()
    out: list[list[int]] = []
    N = len(kind)
    for i in range(N):
        if i == 0 or trace[i] != trace[i - 1]:
            out.append([])
        last_of_line = (
            i + 1 >= N
            or trace[i + 1] != trace[i]
            or kind[i + 1] != kind[i]
            or (kind[i] == TokenKind.ACTION and action_pos[i + 1] != action_pos[i])
        )
        if last_of_line and kind[i] == TokenKind.INIT and (i + 1 < N and kind[i + 1] != TokenKind.INIT):
            out[-1] = [i]  # the start state: after the last init token
        elif last_of_line and kind[i] == TokenKind.ACTION and out[-1]:
            out[-1].append(i)
    return [rows for rows in out if len(rows) > 1]


def _delayed(cap: Capture, sequences: list[list[int]], delay: int) -> tuple[list[list[int]], dict[int, int]]:
    """Each sequence cut where the row `delay` tokens on leaves its trace; label row -> row whose state is read."""
    trace = cap.labels["trace"]
    out, read = [], {}
    for rows in sequences:
        kept = []
        for i in rows:
            j = i + delay
            if j >= len(trace) or trace[j] != trace[i] or (kept and j <= read[kept[-1]]):
                break
            kept.append(i)
            read[i] = j
        if len(kept) > 1:
            out.append(kept)
    return out, read


def _class_mean_accuracy(X: np.ndarray, truth: list, train: list[int], test: list[int]) -> float:
    """Held-out accuracy of the nearest training class mean: how well the states separate the labels."""
    classes = sorted(set(truth[i] for i in train))
    means = np.stack([X[[i for i in train if truth[i] == c]].mean(0) for c in classes])
    scale = X[train].std(0) + 1e-12  # per-feature scale, so one large coordinate does not decide alone
    d = (((X[test][:, None, :] - means[None]) / scale) ** 2).sum(-1)
    return float(np.mean([classes[j] == truth[i] for i, j in zip(test, d.argmin(1))]))


def _check_choices(held_out, candidates) -> None:
    """held_out a fraction strictly between 0 and 1; candidates whole numbers of clusters from 2 (bounded)."""
    if isinstance(held_out, bool) or not isinstance(held_out, (int, float)) or not 0 < held_out < 1:
        raise DeltalensError(f"held_out is the fraction of traces held out, strictly between 0 and 1, got {held_out!r}")
    if candidates is None:
        return
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence) or not candidates:
        raise DeltalensError(f"candidates must be a list of cluster counts (e.g. [6, 12]), got {candidates!r}")
    for k in candidates:
        if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_CLUSTERS:
            raise DeltalensError(
                f"candidates are numbers of clusters, whole numbers from 2 to {MAX_CLUSTERS}; got {k!r} in "
                f"{list(candidates)}"
            )


def _head_states(cap: Capture, layer: int, head: int, label: str, delay) -> torch.Tensor:
    """The layer's captured states (N, H, d_k, d_v), after checking the arguments that name them."""
    if label not in ("auto", "arrangement", "product"):
        raise DeltalensError(f"label must be 'auto', 'arrangement' or 'product', got {label!r}.")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cap.n_layers:
        raise DeltalensError(f"layer {layer!r} is out of range: the captured model has layers 0..{cap.n_layers - 1}.")
    name = f"blocks.{layer}.attn.hook_state"
    if name not in cap:
        raise DeltalensError(f"the capture has no {name}; capture names=('state',) first.")
    S = cap[name]
    if not 0 <= head < S.shape[1]:
        raise DeltalensError(f"head {head} is out of range: the layer has {S.shape[1]} heads.")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= 8):
        raise DeltalensError(f"delay must be a whole number of tokens from 0 to 8 (or None to choose), got {delay!r}.")
    return S


def _trace_split(cap: Capture, all_sequences: list[list[int]], held_out: float, seed: int):
    """A function: sequences -> (fitted rows, held-out rows), holding out a fixed random part of the traces."""
    traces = sorted({int(cap.labels["trace"][rows[0]]) for rows in all_sequences})
    if len(traces) < 2:
        raise DeltalensError(
            f"the capture has {len(traces)} trace with actions; at least 2 are needed (some to fit, some held out)"
        )
    rng = np.random.default_rng(seed)
    n_test = min(max(1, int(round(held_out * len(traces)))), len(traces) - 1)  # one trace at least on each side
    test_traces = set(rng.choice(traces, size=n_test, replace=False).tolist())

    def split(sequences):
        train = [i for rows in sequences if int(cap.labels["trace"][rows[0]]) not in test_traces for i in rows]
        test = [i for rows in sequences if int(cap.labels["trace"][rows[0]]) in test_traces for i in rows]
        return train, test

    return split


def _read_at(flat: np.ndarray, read: dict[int, int]) -> np.ndarray:
    """Row i holds the state of row read[i] (zeros elsewhere)."""
    X = np.zeros_like(flat)
    X[list(read)] = flat[list(read.values())]
    return X


def _choose_delay(cap, all_sequences, flat, arrangement, split, delay):
    """(delay, delay -> held-out nearest-class-mean accuracy): the given delay, else the best of 0 .. 3."""
    separation = {}
    for d in [delay] if delay is not None else range(4):
        sequences, read = _delayed(cap, all_sequences, d)
        train_rows, test_rows = split(sequences)
        if train_rows and len(test_rows) >= 3:
            separation[d] = _class_mean_accuracy(_read_at(flat, read), arrangement, train_rows, test_rows)
    if not separation:
        raise DeltalensError("too few traces to hold some out for choosing the number of clusters; capture more.")
    return max(separation, key=lambda d: (round(separation[d], 3), -d)), separation


def _products(sequences: list[list[int]], arrangement: dict) -> dict:
    """row -> position permutation pi_t with s_t[i] = s_start[pi_t[i]] (the product since the trace's start)."""
    product = {}
    for rows in sequences:
        start = list(arrangement[rows[0]])
        for i in rows:
            product[i] = tuple(start.index(x) for x in arrangement[i])
    return product


def _clusters(X, sequences, train_rows, test_rows, arrangement, candidates, seed):
    """(silhouette per k, chosen k, k-means on every row, row -> cluster): k by the held-out silhouette."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    distinct = len({arrangement[i] for i in train_rows})
    most = min(len(train_rows) - 1, max(2 * distinct, 12))
    asked = list(candidates or CANDIDATES)
    candidates = [k for k in asked if 2 <= k <= most]
    if not candidates:
        raise DeltalensError(
            f"none of the candidate cluster counts {asked} fits these states: with {len(train_rows)} fitted rows of "
            f"{distinct} arrangements the counts tried must lie from 2 to {most}"
        )
    scores = {}
    with warnings.catch_warnings():  # k above the number of distinct states warns; such a k scores low anyway
        warnings.filterwarnings("ignore", message="Number of distinct clusters")
        for k in candidates:
            km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(X[train_rows])
            assigned = km.predict(X[test_rows])
            if len(set(assigned.tolist())) < 2 or len(set(assigned.tolist())) >= len(test_rows):
                continue
            scores[k] = float(silhouette_score(X[test_rows], assigned))
    if not scores:
        raise DeltalensError("no candidate number of clusters splits the held-out states; capture more traces.")
    k = max(scores, key=lambda kk: (round(scores[kk], 3), -kk))
    every = [i for rows in sequences for i in rows]
    km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(X[every])
    return scores, k, km, {i: int(c) for i, c in zip(every, km.predict(X[every]))}


def _purity(cluster: dict[int, int], truth: dict, k: int) -> tuple[float, list]:
    """(fraction of rows whose cluster's majority label is theirs, each cluster's majority label)."""
    members = defaultdict(list)
    for i, c in cluster.items():
        members[c].append(truth[i])
    majority = [Counter(members[c]).most_common(1)[0][0] if members[c] else () for c in range(k)]
    return sum(Counter(members[c]).most_common(1)[0][1] for c in members) / len(cluster), majority


@integer_indices("layer", "head")
def extract_automaton(
    cap: Capture,
    layer: int,
    head: int,
    candidates: Optional[Sequence[int]] = None,
    held_out: float = 0.3,
    seed: int = 0,
    label: str = "auto",
    delay: Optional[int] = None,
) -> Automaton:
    """The automaton of one head's states (module docstring). cap: a Capture with "state" (hook_state).

    delay: tokens after an action's last token at which its state is read (None: chosen, 0 .. 3).

    label: what a state is compared with. "arrangement": the values the variables hold; "product": the
    permutation applied since the trace's start (the group element: a head that tracks the product of the
    actions and leaves the initial values to another component); "auto": whichever the clusters are purer in.

    >>> automaton = dl.extract_automaton(cap, 0, 3)        # cap holds hook_state
    >>> automaton.tracks(), automaton.n_states
    (True, 6)
    """
    S = _head_states(cap, layer, head, label, delay)
    _check_choices(held_out, candidates)
    all_sequences = _action_rows(cap)
    if not all_sequences:
        raise DeltalensError("the captured traces have no actions after their initialisation, so no transitions.")
    flat = S[:, head].reshape(len(S), -1).double().numpy()
    split = _trace_split(cap, all_sequences, held_out, seed)
    true = cap.states.numpy()
    arrangement = {i: tuple(int(x) for x in true[i]) for rows in all_sequences for i in rows}
    delay, separation = _choose_delay(cap, all_sequences, flat, arrangement, split, delay)
    sequences, read = _delayed(cap, all_sequences, delay)
    train_rows, test_rows = split(sequences)
    X = _read_at(flat, read)  # row i: the state that action i's row is read at (i + delay)
    scores, k, km, cluster = _clusters(X, sequences, train_rows, test_rows, arrangement, candidates, seed)
    product = _products(sequences, arrangement)
    purities = {"arrangement": _purity(cluster, arrangement, k), "product": _purity(cluster, product, k)}
    chosen = max(purities, key=lambda key: purities[key][0]) if label == "auto" else label
    purity, cluster_labels = purities[chosen]
    truth = arrangement if chosen == "arrangement" else product

    table, determinism, actions = _transitions(cap, cluster, sequences)
    part, n_states, delta, labels = _minimised(k, cluster_labels, table, actions)
    sigma = _permutation_of_actions(cap, sequences)
    vertices = _closure({truth[i] for i in cluster}, actions, sigma)  # closed under the actions used
    agree = sum(_apply(labels[s], sigma[a]) == labels[t] for (s, a), t in delta.items())
    d_k, d_v = S.shape[-2:]
    return Automaton(
        layer=layer,
        head=head,
        k=k,
        scores=scores,
        n_states=n_states,
        labels=labels,
        transitions=delta,
        determinism=determinism,
        agreement=agree / len(delta) if delta else 0.0,
        isomorphic=_isomorphic(n_states, delta, vertices, sigma, actions),
        n_arrangements=len(vertices),
        actions=actions,
        centroids=torch.from_numpy(km.cluster_centers_).float(),
        cluster_to_state=part,
        cluster_labels=cluster_labels,
        state_shape=(int(d_k), int(d_v)),
        purity=purity,
        extra={
            "label": chosen,
            "purity_arrangement": purities["arrangement"][0],
            "purity_product": purities["product"][0],
            "delay": delay,
            "separation": separation,  # delay -> held-out nearest-class-mean accuracy of the arrangement
            "statements": {a: statement_of(sigma[a]) for a in actions if a in sigma},  # perm id -> "a, b = b, a"
        },
    )


def automaton_figure(automaton: Automaton, title: Optional[str] = None) -> go.Figure:
    """The minimised automaton drawn as a graph: states on a circle, labelled by arrangement, edges by action.

    >>> fig = dl.automaton_figure(dl.extract_automaton(cap, 0, 3))
    >>> fig.data[-1].name
    'states'
    """
    n = automaton.n_states
    angle = np.linspace(0, 2 * np.pi, n, endpoint=False)
    x, y = np.cos(angle), np.sin(angle)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    fig = go.Figure()
    for index, action in enumerate(automaton.actions):
        ex, ey = [], []
        for (s, a), t in automaton.transitions.items():
            if a == action:
                ex += [x[s], x[t], None]
                ey += [y[s], y[t], None]
        fig.add_trace(
            go.Scatter(
                x=ex,
                y=ey,
                mode="lines",
                name=automaton.extra.get("statements", {}).get(action, f"action {action}"),
                line={"color": palette[index % len(palette)], "width": 1},
            )
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="markers+text",
            name="states",
            marker={"size": 14, "color": "black"},
            text=["".join(map(str, lab)) for lab in automaton.labels],
            textposition="top center",
        )
    )
    fig.update_layout(
        title=title or automaton.title(),
        xaxis={"visible": False},
        yaxis={"visible": False},
        showlegend=True,
        height=600,
    )
    return fig
