"""Linear probes: where in the model can the current value of each variable be read off linearly?

For every site (the residual stream after each layer, and, for DeltaNet, each head's state S_t
flattened to d_k * d_v numbers) and every variable x_i, a multinomial logistic regression
(scikit-learn) is trained to predict, from the activation at token t, one of two targets:

* "value": s_t[i], the value x_i holds at token t (labels from the batch, 1..n);
* "source": the variable j whose initial value x_i now holds (s_t[i] = s_0[j]), i.e. the
  permutation composed so far. A head can track this product of actions alone while the initial
  values sit elsewhere (another head, or the read-out): then "source" is linear in its state
  and "value" is not, since value = s_0[source] needs both.

Which tokens: `at="readout"` (default) probes the positions whose logits predict a revealed value
(the token just before each REVEAL token), where the model must have the value at hand;
`at="all"` every token, or a TokenKind (list) for those kinds. The state's encoding can depend on
the token: a trained head may hold the permutation in a form that is linear only where it is
read. Only tokens after the trace's last init line are probed (`after_init`): before it, the
value of a variable not yet assigned is in no activation. Tokens are split into train and test by TRACE, never by
token, so a probe cannot pass by memorising neighbouring tokens of the same trace. The control
fits the same probe on shuffled training labels (permuted across training tokens): its test
accuracy is what the probe can reach without any information. `majority_rate` is how often a test
token's label is the training tokens' most common one (the score of always guessing it). A probe that
finds nothing linear does not guess the majority: it spreads its guesses over the classes, so it and its
control can land between 1/n and majority_rate (a "source" probe at 0.33 beside a majority rate of 0.44:
early in a trace most variables still hold their own initial value). A probe reads something only where
it beats both its control and majority_rate.

Kept fast on a CPU: at most `max_tokens` training tokens (drawn at random), features
standardised, `max_iter` lbfgs iterations; convergence warnings are silenced (a probe that did
not converge only under-reports accuracy).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from deltalens.core.display import Summary
from deltalens.core.display import progress as progress_bar
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import Capture, capture
from deltalens.models.architecture import architecture_of, article_of
from deltalens.tasks.tokenizers import TokenKind

__all__ = ["ProbeReport", "linear_probes", "probe_sites", "probe_accuracy_figure"]

SITES = ("resid", "state")


@dataclass(repr=False)
class ProbeReport(Summary):
    """One row per (site, variable): test accuracy of the probe and of its shuffled-label control.

    >>> report = dl.linear_probes(cap, sites=("resid",))
    >>> "accuracy" in report.results.columns
    True
    """

    results: (
        pd.DataFrame
    )  # site, kind ("resid" | "state"), layer, head, target, variable, accuracy, control_accuracy, majority_rate, ...
    n_train_traces: int
    n_test_traces: int

    def title(self) -> str:
        return (
            f"ProbeReport: linear probes decoding each variable ({self.n_train_traces} training, "
            f"{self.n_test_traces} test traces; control = shuffled labels)"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.summary()

    def summary(self, target: str | None = None) -> pd.DataFrame:
        """Mean over variables per (site, target): accuracy, control_accuracy, majority_rate."""
        rows = self.results if target is None else self.results[self.results["target"] == target]
        return (
            rows.groupby(["site", "kind", "layer", "head", "target"], dropna=False, sort=False)[
                ["accuracy", "control_accuracy", "majority_rate"]
            ]
            .mean()
            .reset_index()
        )

    def by_head(self) -> pd.DataFrame:
        """State probes, one row per (layer, head), a column pair per target (probe_accuracy_<target>)."""
        out = self.summary()
        out = out[out["kind"] == "state"]
        wide = out.pivot_table(
            index=["layer", "head"], columns="target", values=["accuracy", "control_accuracy"]
        ).reset_index()
        short = {"accuracy": "probe_accuracy", "control_accuracy": "probe_control"}
        wide.columns = [f"{short[a]}_{t}" if t else a for a, t in wide.columns]
        wide["layer"], wide["head"] = wide["layer"].astype(int), wide["head"].astype(int)
        return wide

    def by_layer(self) -> pd.DataFrame:
        """Residual-stream probes, one row per (depth, target); layer -1 = the embedding."""
        out = self.summary()
        return out[out["kind"] == "resid"].drop(columns=["head"]).reset_index(drop=True)


def _check_arguments(sites, targets, max_tokens, seed) -> None:
    """linear_probes' choices, each refused in one sentence before any work (not numpy's or pandas's error)."""
    if sites is not None and not list(sites):
        raise DeltalensError("sites names no site: give 'resid' and/or 'state', or None for every site the model has")
    if isinstance(targets, str) or not list(targets):
        raise DeltalensError(f"targets is a list of 'value' and/or 'source', got {targets!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
        raise DeltalensError(
            f"max_tokens must be a whole number >= 2 (a probe needs tokens to fit), got {max_tokens!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DeltalensError(f"seed must be a whole number >= 0, got {seed!r}")


def probe_sites(source, sites: Sequence[str] | None = None) -> list[tuple[str, str, int, int | None, str]]:
    """(site label, kind, layer, head, hook name) for every probe site a model (or Capture) has.

    Residual sites: hook_embed (layer -1) and each layer's output. State sites: every head of every
    delta-rule layer's hook_state (a hybrid's attention layers have none). `sites` None: the residual
    sites, and the state sites where the source has them (a model with delta-rule layers, or a Capture
    holding their hook_state); naming "state" asks for them whatever the capture holds.
    """
    unknown = set(sites or ()) - set(SITES)
    if unknown:
        raise DeltalensError(f"unknown probe site(s) {sorted(unknown)}; use 'resid' and/or 'state'.")
    if isinstance(source, Capture):
        arch, n_layers, n_heads = source.arch, source.n_layers, source.n_heads
        has: set[str] = set(source.names)
    else:
        arch, n_layers, n_heads = architecture_of(source), source.cfg.n_layers, source.cfg.n_heads
        has = set(getattr(source, "hook_dict", {}))
    # the layers with a matrix state: a hybrid's delta-rule (and M²RNN) layers, not its attention layers
    layers = [l for l in range(n_layers) if f"blocks.{l}.attn.hook_state" in has]
    if isinstance(source, Capture) and not layers and "state" in (sites or ()):
        layers = source.recurrent_layers  # asked for, not captured: the refusal below names what is missing
    if sites is None:
        sites = ("resid", "state") if layers else ("resid",)
    out: list[tuple[str, str, int, int | None, str]] = []
    if "resid" in sites:
        site = "hook_hidden" if arch == "lstm" else "hook_resid_post"
        out.append(("embed", "resid", -1, None, "hook_embed"))
        out += [(f"L{layer}", "resid", layer, None, f"blocks.{layer}.{site}") for layer in range(n_layers)]
    if "state" in sites:
        if not layers:
            raise DeltalensError(f"{article_of(arch)} has no matrix state S_t to probe; use sites=('resid',).")
        out += [
            (f"L{layer}H{head}", "state", layer, head, f"blocks.{layer}.attn.hook_state")
            for layer in layers
            for head in range(n_heads)
        ]
    return out


def _fit_score(x_train, y_train, x_test, y_test, max_iter: int, seed: int) -> float:
    if len(np.unique(y_train)) < 2:  # one class only: the probe is the constant predictor
        return float((y_test == y_train[0]).mean())
    scaler = StandardScaler().fit(x_train)
    probe = LogisticRegression(max_iter=max_iter, C=1.0, random_state=seed)
    # one BLAS thread: these problems are tiny, and threads fighting over a shared CPU make a
    # 0.1 s fit take seconds
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")  # ConvergenceWarning with a small max_iter is expected
        probe.fit(scaler.transform(x_train), y_train)
        return float(probe.score(scaler.transform(x_test), y_test))


TARGETS = ("value", "source")


def probe_positions(cap, at: str | int | Sequence[int] = "readout") -> np.ndarray:
    """(N,) bool: the tokens `at` names (see the module docstring)."""
    if at == "all":
        return cap.mask(None).numpy()
    if at == "readout":
        kind, trace = cap.labels["kind"].numpy(), cap.labels["trace"].numpy()
        out = np.zeros(len(kind), dtype=bool)
        # rows are in (trace, position) order: row r + 1 is the next token of the same trace
        out[:-1] = (kind[1:] == int(TokenKind.REVEAL)) & (trace[1:] == trace[:-1])
        return out
    if isinstance(at, str):
        names = {kind.name.lower(): kind for kind in TokenKind}
        if at.lower() not in names:
            raise DeltalensError(
                f"unknown probe position {at!r}; use 'readout', 'all' or a token kind ({', '.join(names)})."
            )
        at = names[at.lower()]
    return cap.mask(at).numpy()


def probe_targets(cap, target: str) -> np.ndarray:
    """(N, n) labels: "value" s_t[i] (1..n), or "source" j with s_t[i] = s_0[j] (0..n-1)."""
    states = cap.states.numpy()
    if target == "value":
        return states
    if target != "source":
        raise DeltalensError(f"unknown probe target {target!r}; use 'value' or 'source'.")
    trace = cap.labels["trace"].numpy()
    first = np.zeros(cap.n_traces, dtype=np.int64)
    first[trace[::-1]] = np.arange(len(trace))[::-1]  # first row of each trace: s_0 is in force there
    initial = states[first[trace]]  # (N, n)
    # source[t, i] = j where initial[t, j] == states[t, i]
    return (initial[:, None, :] == states[:, :, None]).argmax(-1)


def _probe_capture(source, batch, names: list[str]) -> Capture:
    """`source` if it is a Capture holding every name, else a capture of the model on `batch`."""
    if isinstance(source, Capture):
        missing = [name for name in names if name not in source]
        if missing:
            raise DeltalensError(f"the capture lacks {', '.join(missing)}; capture with names=('resid', 'state').")
        return source
    if batch is None:
        raise DeltalensError("pass a Capture, or a model together with a batch of traces.")
    return capture(source, batch, names=names)


def _split_rows(cap, at, after_init: bool, test_fraction: float, max_tokens: int, rng) -> tuple:
    """(train rows, test rows, number of test traces): the probed tokens, split by trace."""
    n_traces = cap.n_traces
    order = rng.permutation(n_traces)
    n_test = max(1, int(round(test_fraction * n_traces)))
    test_traces = order[:n_test]
    trace = cap.labels["trace"].numpy()
    chosen = probe_positions(cap, at)
    if after_init:
        is_init = (cap.labels["kind"] == int(TokenKind.INIT)).numpy()
        position = cap.labels["position"].numpy()
        last_init = np.full(n_traces, -1)
        np.maximum.at(last_init, trace[is_init], position[is_init])
        chosen &= position > last_init[trace]
    is_test = np.isin(trace, test_traces)
    train_rows = np.nonzero(chosen & ~is_test)[0]
    test_rows = np.nonzero(chosen & is_test)[0]
    if len(train_rows) > max_tokens:
        train_rows = np.sort(rng.choice(train_rows, max_tokens, replace=False))
    if len(test_rows) > max_tokens:
        test_rows = np.sort(rng.choice(test_rows, max_tokens, replace=False))
    if len(train_rows) == 0 or len(test_rows) == 0:
        raise DeltalensError("no tokens of the requested kinds on one side of the trace split; use more traces.")
    return train_rows, test_rows, n_test


def linear_probes(
    source,
    batch: dict[str, torch.Tensor] | None = None,
    sites: Sequence[str] | None = None,
    targets: Sequence[str] = TARGETS,
    at: str | int | Sequence[int] = "readout",
    after_init: bool = True,
    test_fraction: float = 0.25,
    max_tokens: int = 1500,
    max_iter: int = 100,
    seed: int = 0,
    progress: bool = False,
) -> ProbeReport:
    """Probe every site for every variable's value and/or source (see the module docstring).

    at: "readout" (positions predicting a revealed value), "all", or TokenKind(s).
    after_init: only tokens after the last init line of their trace.
    max_tokens: at most this many training (and test) tokens, drawn at random.
    source: a model with `batch`, or a Capture holding the sites' hooks ('resid', 'state').
    sites: "resid" and/or "state"; None: resid, and state where the source has it (probe_sites).
    Works on every architecture: residual sites everywhere, state sites on the delta-rule layers.

    >>> report = dl.linear_probes(cap)                     # cap holds resid and state
    >>> isinstance(report, dl.ProbeReport)
    True
    """
    if not 0 < test_fraction < 1:
        raise DeltalensError(f"test_fraction must be between 0 and 1, got {test_fraction!r}.")
    _check_arguments(sites, targets, max_tokens, seed)
    plan = probe_sites(source, sites)
    cap = _probe_capture(source, batch, list(dict.fromkeys(name for *_, name in plan)))
    if cap.n_traces < 2:
        raise DeltalensError("probes split held-out data by trace: give a batch of at least 2 traces.")
    if cap.n_vars == 0:
        raise DeltalensError(
            "the probes read the true state of every variable, which bare token ids do not carry: pass REPL text "
            "or a batch of traces (model.checkpoint.batch(n))"
        )
    rng = np.random.default_rng(seed)  # one stream: the trace split, the token subsets, the controls
    train_rows, test_rows, n_test = _split_rows(cap, at, after_init, test_fraction, max_tokens, rng)
    labels = {target: probe_targets(cap, target) for target in targets}  # each (N, n)
    rows = []
    jobs = [(site, target, var) for site in plan for target in targets for var in range(cap.n_vars)]
    features_cache: dict[str, np.ndarray] = {}
    for (label, kind, layer, head, name), target, var in progress_bar(
        jobs, enabled=progress, desc="probes", leave=False
    ):
        key = f"{name}/{head}"
        if key not in features_cache:
            acts = cap[name] if head is None else cap[name][:, head]
            features_cache[key] = acts.flatten(1).numpy().astype(np.float64)
        x = features_cache[key]
        y_train, y_test = labels[target][train_rows, var], labels[target][test_rows, var]
        accuracy = _fit_score(x[train_rows], y_train, x[test_rows], y_test, max_iter, seed)
        control = _fit_score(x[train_rows], rng.permutation(y_train), x[test_rows], y_test, max_iter, seed)
        values, counts = np.unique(y_train, return_counts=True)
        rows.append(
            {
                "site": label,
                "kind": kind,
                "layer": layer,
                "head": head,
                "target": target,
                "variable": var,
                "accuracy": accuracy,
                "control_accuracy": control,
                "majority_rate": float((y_test == values[counts.argmax()]).mean()),
                "n_train": len(train_rows),
                "n_test": len(test_rows),
                "n_features": x.shape[1],
            }
        )
    return ProbeReport(results=pd.DataFrame(rows), n_train_traces=cap.n_traces - n_test, n_test_traces=n_test)


# ---- figures --------------------------------------------------------------------------------


def probe_accuracy_figure(report: ProbeReport):
    """Probe accuracy (and shuffled-label control) per site and target: residual stream by depth, then each
    head's state.

    >>> fig = dl.probe_accuracy_figure(dl.linear_probes(cap, sites=("resid",)))
    >>> len(fig.data) > 0
    True
    """
    summary = report.summary()
    fig = go.Figure()
    for target, part in summary.groupby("target", sort=False):
        fig.add_trace(go.Bar(x=part["site"], y=part["accuracy"], name=f"probe: {target}"))
    control = summary.groupby("site", sort=False)["control_accuracy"].mean()
    fig.add_trace(
        go.Scatter(
            x=control.index,
            y=control.values,
            mode="markers",
            name="shuffled-label control",
            marker={"symbol": "x", "size": 10, "color": "black"},
        )
    )
    fig.update_layout(
        barmode="group",
        title="linear probes for each variable's value / source (held-out traces)",
        xaxis_title="site (residual stream after layer; L<l>H<h>: that head's state)",
        yaxis_title="accuracy",
        yaxis={"range": [0, 1.05]},
    )
    return fig
