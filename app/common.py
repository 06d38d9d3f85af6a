"""What every page of the dashboard shares: the checkpoint folder, cached models and computations,
the trace view, and one sentence on the page for any error (the server never goes down).

Models are cached with st.cache_resource (one copy per checkpoint); heavy results (captures,
reports) too, keyed by the checkpoint's path and the controls that made them; small frames with
st.cache_data. The computations themselves are the library's.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from deltalens.core.atomic import write_json_atomic
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.interp.head_sweep import SweepResult, sweep
from deltalens.models.architecture import ARTICLE
from deltalens.probes.eigenvalues import eigenvalue_report
from deltalens.probes.linear_probes import linear_probes
from deltalens.probes.products import product_report
from deltalens.probes.subspace import subspace_report
from deltalens.tasks.groups import VARIABLE_NAMES
from deltalens.training.opened import SHIPPED, Checkpoint, list_checkpoints, open_checkpoint

ENV_DIR = "DELTALENS_APP_CHECKPOINTS"  # set by `deltalens app --checkpoints DIR`
SWEEP_CACHE = Path(os.environ.get("DELTALENS_CACHE", Path.home() / ".cache" / "deltalens")) / "sweeps"


def checkpoint_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or SHIPPED)


def attempt(fn: Callable, *args: Any, **kwargs: Any):
    """fn(*args, **kwargs), or None after one st.error sentence (the page goes on)."""
    try:
        return fn(*args, **kwargs)
    except DeltalensError as err:
        st.error(str(err))
    except Exception as err:  # an unforeseen input: still one sentence, and the server lives on
        first = (str(err).strip().splitlines() or [""])[0]
        st.error(f"unexpected {type(err).__name__}: {first}")
    return None


def locked(checkpoint: Checkpoint, fn: Callable, *args: Any, **kwargs: Any):
    """`attempt(fn, ...)` holding the checkpoint's model lock (for anything that runs its model)."""
    with model_lock(str(checkpoint.path)):
        return attempt(fn, *args, **kwargs)


@st.cache_data(show_spinner=False)
def checkpoint_table(directory: str) -> pd.DataFrame:
    path = Path(directory)
    if not path.is_dir():
        raise DeltalensError(f"checkpoint folder {path} does not exist; start the app with --checkpoints DIR.")
    table = list_checkpoints(path, skip_unreadable=True)
    if table.empty and table.attrs["skipped"]:
        raise DeltalensError(next(iter(table.attrs["skipped"].values())))
    if table.empty:
        raise DeltalensError(
            f"{path} holds no checkpoints (folders with config.json and model.safetensors); "
            "start the app with --checkpoints DIR."
        )
    return table


@st.cache_resource(show_spinner="loading the checkpoint ...", max_entries=8)
def opened(path: str) -> Checkpoint:
    return open_checkpoint(path)


def pick_checkpoint(
    key: str, label: str = "checkpoint", where: Callable[[pd.Series], bool] | None = None, default: str | None = None
) -> Checkpoint | None:
    """A selectbox over the folder's checkpoints (optionally filtered), then the opened checkpoint."""
    table = attempt(checkpoint_table, str(checkpoint_dir()))
    if table is None:
        return None
    for sentence in table.attrs.get("skipped", {}).values():
        st.error(sentence)
    if where is not None:
        table = table[table.apply(where, axis=1)]
        if table.empty:
            st.error(f"no checkpoint in {checkpoint_dir()} fits this page.")
            return None
    names = list(table["name"])
    index = names.index(default) if default in names else 0
    name = st.selectbox(label, names, index=index, key=key)
    return attempt(opened, str(checkpoint_dir() / name))


@st.cache_resource(max_entries=8)
def model_lock(path: str) -> threading.Lock:
    """One lock per cached model: sessions share it (st.cache_resource) and run in their own
    threads, so every forward that attaches hooks holds this lock."""
    return threading.Lock()


@st.cache_resource(show_spinner="running the model on held-out traces ...", max_entries=16)
def head_measurements(path: str, n_traces: int, seed: int) -> dict[str, Any]:
    """Capture, eigenvalue, product, subspace and probe reports of a delta-rule checkpoint on held-out traces
    (products: None when the traces carry no action permutations, e.g. probabilistic ones; products_readout,
    the products between read-outs: None when the traces have fewer than two reveals with distinct values)."""
    checkpoint = opened(path)
    batch = checkpoint.batch(n_traces, seed=seed)
    with model_lock(path):
        cap = capture(checkpoint.model, batch, names=("beta", "k", "state", "resid"))
    products = {}
    for span in ("action", "readout"):
        try:
            products[span] = product_report(cap, seed=seed, span=span)
        except DeltalensError:
            products[span] = None
    return {
        "batch": batch,
        "capture": cap,
        "eigenvalues": eigenvalue_report(cap),
        "products": products["action"],
        "products_readout": products["readout"],
        "subspace": subspace_report(cap, seed=seed),
        "probes": linear_probes(cap, seed=seed),
    }


def cached_sweep(checkpoint: Checkpoint, n_traces: int, intervention: str = "beta-range") -> SweepResult:
    """The head sweep, computed once per checkpoint (weights) and kept in a cache folder the user can delete."""
    weights = (checkpoint.path / "model.safetensors").read_bytes()
    key = hashlib.sha1(weights + f"{intervention}/{n_traces}".encode()).hexdigest()[:16]
    file = SWEEP_CACHE / f"{checkpoint.path.name}-{key}.json"
    try:
        data = json.loads(file.read_text())
        return SweepResult(
            baseline=data["baseline"],
            frame=pd.DataFrame(data["heads"]),
            intervention=data["intervention"],
            n_traces=data["n_traces"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not cached yet, or unreadable: compute it again
    with model_lock(str(checkpoint.path)):
        result = sweep(checkpoint.model, checkpoint.batch(n_traces, seed=0), intervention, progress=False)
    write_json_atomic(file, result.to_dict())
    return result


def describe(checkpoint: Checkpoint) -> str:
    spec = checkpoint.spec
    task = f"{spec.group} {spec.action_set}, {checkpoint.task.tokenizer} tokenizer" if spec is not None else "no task"
    return f"{ARTICLE.get(checkpoint.arch, checkpoint.arch)} ({task})"


def state_text(state: tuple[int, ...]) -> str:
    return " ".join(f"{VARIABLE_NAMES[i]}={v}" for i, v in enumerate(state))


def trace_html(rows: pd.DataFrame) -> str:
    """The REPL transcript with every revealed value coloured (green: the model's argmax is right,
    red: wrong), its probability on hover and below it, and the true state after each action."""
    lines: dict[int, list[str]] = {}
    states: dict[int, tuple] = {}
    for row in rows.itertuples():
        piece = html.escape(row.token.rstrip("\n"))
        if row.is_reveal:
            colour = "#c8f7c5" if row.correct else "#ffc9c9"
            tip = html.escape(f"p = {row.p_token:.3f}; top: " + ", ".join(row.top))
            piece = (
                f'<span style="background:{colour};padding:0 2px;border-radius:3px" title="{tip}">'
                f"{piece}<sub>{row.p_token:.2f}</sub></span>"
            )
        lines.setdefault(row.line, []).append(piece)
        if row.kind == "action":
            states[row.line] = row.state
    out = []
    for line in sorted(lines):
        text = "".join(lines[line])
        if line in states:
            text += f'<span style="color:#888">    # {state_text(states[line])}</span>'
        out.append(text)
    body = "\n".join(out)
    return f'<pre style="font-size:0.85rem;line-height:1.35;background:#fafafa;padding:0.6rem">{body}</pre>'
