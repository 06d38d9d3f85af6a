"""Linear probes of the exact belief (PFSA-SR) from a model's states.

At the print line of every reveal the exact belief before the printed value is known: the joint
b_t over the n! arrangements and the marginal matrix M_t (P(variable i = value v)). A ridge probe
reads each from the model's internal state at that token, fitted on 70% of held-out traces and
scored (R^2, pooled over outputs) on the other 30%:

* DeltaNet: every layer's and head's ``hook_state`` (d_k x d_v), flattened and concatenated;
* LSTM: every layer's ``hook_hidden`` and ``hook_cell``;
* anything else (the Transformer): the residual stream after every layer.

The marginal probe is then applied at the adversary's late queries (``decoded_marginal_tv``): the
total-variation distance between the decoded row of the queried variable and its exact posterior,
by horizon; a state that still holds the belief decodes it, whatever its read-out does.
``state_norms`` follows the state's size along the adversary's cycles (DeltaNet ``hook_state``'s
Frobenius norm per head, the LSTM's ``hook_cell`` norm per layer).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from sklearn.linear_model import RidgeCV

from deltalens.interp.capture import capture
from deltalens.tasks.dataset import collate
from deltalens.tasks.pfsa import Observation
from deltalens.tasks.probabilistic import ProbTrace
from deltalens.tasks.tokenizers import TokenKind

ALPHAS = np.logspace(-3, 3, 7)


def exact_beliefs(trace: ProbTrace) -> tuple[np.ndarray, np.ndarray]:
    """(R, n!) joint and (R, n, n) marginal exact beliefs just before each of the R reveals."""
    pfsa = trace.pfsa()
    b = pfsa.initial_belief()
    joints, marginals = [], []
    for event in trace.events:
        if isinstance(event, Observation):
            joints.append(b.copy())
            marginals.append(pfsa.marginals(b))
            b = pfsa.mask(b, event)
            b = b / b.sum()
        else:
            b = pfsa.transition(b, event)
    return np.array(joints), np.array(marginals)


def state_names(model) -> list[str]:
    """The hooks whose activations count as the model's state (module docstring)."""
    names = list(getattr(model, "hook_dict", {}))
    states = [n for n in names if n.endswith("attn.hook_state")]
    if states:
        return states
    lstm = [n for n in names if n.endswith(("hook_hidden", "hook_cell"))]
    return lstm or [n for n in names if n.endswith("hook_resid_post")]


def print_starts(kinds: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the first token of every print line (its state predicts the printed value)."""
    return (kinds == TokenKind.PRINT) & (torch.roll(kinds, 1, dims=1) != TokenKind.PRINT)


@torch.no_grad()
def print_features(model, tokenizer, traces: Sequence[ProbTrace]) -> tuple[np.ndarray, np.ndarray]:
    """(N, F) state features at every reveal's print token, and (N,) the trace index of each row,
    in trace order then reveal order."""
    batch = collate([tokenizer.encode_trace(t) for t in traces])
    kinds = batch["kinds"]
    first = print_starts(kinds)
    names = state_names(model)
    cap = capture(model, batch, names=names, positions=first, batch_size=16)
    order = torch.argsort(cap.labels["trace"] * (kinds.shape[1] + 1) + cap.labels["position"])
    features = torch.cat([cap.acts[name].flatten(1) for name in names], dim=1)[order]
    return features.numpy(), cap.labels["trace"][order].numpy()


def fit_belief_probes(model, tokenizer, traces: Sequence[ProbTrace], train_share: float = 0.7) -> dict:
    """Ridge probes of the joint and marginal beliefs; R^2 on the held-out traces, and the probes."""
    features, trace_of = print_features(model, tokenizer, traces)
    joint, marginal = zip(*(exact_beliefs(t) for t in traces))
    targets = {"joint": np.concatenate(joint), "marginal": np.concatenate(marginal).reshape(len(features), -1)}
    if any(len(t) != len(features) for t in targets.values()):
        raise ValueError("the model's print tokens and the traces' reveals disagree in number.")
    train = trace_of < int(train_share * len(traces))
    out: dict = {"features": int(features.shape[1]), "rows": int(len(features)), "probes": {}}
    for kind, y in targets.items():
        probe = RidgeCV(alphas=ALPHAS).fit(features[train], y[train])
        pred = probe.predict(features[~train])
        sse = float(((pred - y[~train]) ** 2).sum())
        sst = float(((y[~train] - y[train].mean(0)) ** 2).sum())
        out[f"r2_{kind}"] = 1.0 - sse / sst
        out["probes"][kind] = probe
    return out


def decoded_marginal_tv(model, tokenizer, probe: RidgeCV, traces: Sequence[ProbTrace]) -> float:
    """Mean total-variation distance at each trace's last reveal (the query) between the probe's
    decoded marginal row of the queried variable (clipped at 0, renormalised) and the exact one."""
    features, trace_of = print_features(model, tokenizer, traces)
    last = np.r_[trace_of[1:] != trace_of[:-1], True]
    decoded = probe.predict(features[last])
    n = traces[0].n
    tvs = []
    for row, trace in zip(decoded, traces):
        query = trace.reveals[-1].variables[0]
        q = np.clip(row.reshape(n, n)[query], 0, None)
        q = q / q.sum() if q.sum() > 0 else np.full(n, 1 / n)
        tvs.append(0.5 * float(np.abs(q - np.asarray(trace.posteriors[-1][0].predictive)).sum()))
    return float(np.mean(tvs))


@torch.no_grad()
def state_norms(model, tokenizer, traces: Sequence[ProbTrace], cycles: Sequence[int]) -> dict[str, list[float]]:
    """Mean state norm at the print line of the given cycles (1-based), per recurrent state:
    ``L{l}H{h}`` for a DeltaNet head's hook_state (Frobenius), ``L{l}`` for an LSTM layer's cell.
    An architecture without a recurrent state (the Transformer) gives an empty dict."""
    hooks = [name for name in getattr(model, "hook_dict", {}) if name.endswith(("attn.hook_state", "hook_cell"))]
    if not hooks:
        return {}
    batch = collate([tokenizer.encode_trace(t) for t in traces])
    kinds = batch["kinds"]
    # the k-th print line of each trace
    prints = print_starts(kinds)
    order = prints.cumsum(1) * prints
    wanted = torch.zeros_like(prints)
    for c in cycles:
        wanted |= order == c
    cap = capture(model, batch, names=hooks, positions=wanted, batch_size=4)
    cycle_of = order[cap.labels["trace"], cap.labels["position"]]
    out: dict[str, list[float]] = {}
    for name in hooks:
        acts = cap.acts[name]
        layer = int(name.split(".")[1])
        if acts.dim() == 4:  # (N, H, d_k, d_v)
            norms = acts.flatten(2).norm(dim=-1)
            for head in range(norms.shape[1]):
                out[f"L{layer}H{head}"] = [float(norms[cycle_of == c, head].mean()) for c in cycles]
        else:
            norms = acts.flatten(1).norm(dim=-1)
            out[f"L{layer}"] = [float(norms[cycle_of == c].mean()) for c in cycles]
    return out
