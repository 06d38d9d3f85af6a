"""The Heads page's measurements of one checkpoint, computed only when a section of the page shows
them, each kept in memory and on disk (app/disk_cache.py), with a progress bar naming each step.

A head change only slices what is already measured; a new checkpoint, trace count or seed measures
the open section again: one capture of the held-out traces (only what its steps read: beta and k
for the transitions, S_t and the residual stream for the subspace and probes), then that section's
reports. Only that section: the probes, the slowest, wait for their own tab and a click (then disk).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st
import torch

from deltalens.app.common import model_lock, opened
from deltalens.app.disk_cache import MISSING, cached_result, read_result
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.loading.opened import Checkpoint
from deltalens.models.architecture import is_delta_rule
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.tasks.traces import Trace, generate_trace

STEPS = {  # what each step measures, as the progress bar names it
    "eigenvalues": "beta and the transition eigenvalues of every head",
    "products": "products of reflections, one per action",
    "products_readout": "products of transitions between read-outs",
    "subspace": "the state's singular values and PCA",
    "probes": "linear probes of the residual stream and of every head's state",
    "resid_probes": "linear probes of the residual stream",
}
# what each step's capture holds: the transitions' steps skip S_t and the residual stream (the
# bulk of a capture), so a seed change on the first tab runs the model for beta and k only
STEP_NAMES = {"eigenvalues": ("beta", "k"), "products": ("beta", "k"), "products_readout": ("beta", "k")}
FULL_NAMES = ("beta", "k", "state", "resid")
MEMORY_ENTRIES = 48  # reports kept in memory (a few MB each at most)


@st.cache_resource
def _memory() -> dict[str, Any]:
    return {"reports": OrderedDict(), "captures": OrderedDict(), "lock": threading.Lock()}


def _remember(table: OrderedDict, key: tuple, value: Any, limit: int) -> Any:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)
    return value


def _report(step: str, cap, seed: int):
    from deltalens.probes.eigenvalues import eigenvalue_report
    from deltalens.probes.linear_probes import linear_probes  # scikit-learn: imported when a probe is fitted
    from deltalens.probes.products import product_report
    from deltalens.probes.subspace import subspace_report

    if step == "eigenvalues":
        return eigenvalue_report(cap)
    if step in ("products", "products_readout"):
        try:  # None: traces without permutations (probabilistic ones) or too few read-outs
            return product_report(cap, seed=seed, span="action" if step == "products" else "readout")
        except DeltalensError:
            return None
    if step == "subspace":
        return subspace_report(cap, seed=seed)
    if step == "probes":
        return linear_probes(cap, seed=seed)
    if step == "resid_probes":
        return linear_probes(cap, seed=seed, sites=("resid",))
    raise KeyError(step)


class _Bar:
    """A progress bar drawn only once something is computed (a cached page shows none)."""

    def __init__(self, name: str, total: int):
        self.name, self.total, self.done = name, total, 0
        self.bar: Any | None = None  # st.progress's bar, made on the first step

    def step(self, text: str) -> None:
        if self.bar is None:
            self.bar = st.progress(0.0)
        self.bar.progress(self.done / self.total, text=f"{self.name}: step {self.done + 1} of {self.total}, {text} ...")
        self.done += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.empty()


def measure(checkpoint: Checkpoint, n_traces: int, seed: int, steps: Sequence[str]) -> dict[str, Any]:
    """The reports of `steps` (STEPS) on `n_traces` held-out traces of batch seed `seed`."""
    memory, path = _memory(), str(checkpoint.path)
    out = {}
    todo = [s for s in steps if (path, n_traces, seed, s) not in memory["reports"]]
    for step in steps:
        if step not in todo:
            out[step] = memory["reports"][(path, n_traces, seed, step)]
    if not todo:
        return out
    delta_rule = is_delta_rule(checkpoint.arch)
    names_of = {s: STEP_NAMES.get(s, FULL_NAMES) if delta_rule else ("resid",) for s in todo}
    captures = {names_of[s] for s in todo if _held_capture(path, n_traces, seed, names_of[s]) is None}
    bar = _Bar(checkpoint.path.name, len(todo) + len(captures))
    try:
        for step in todo:

            def compute(step=step):
                cap = held_out_capture(checkpoint, n_traces, seed, bar.step, names_of[step])
                bar.step(STEPS[step])
                return _report(step, cap, seed)

            value = cached_result(step, checkpoint.path, f"{n_traces}/{seed}", compute)
            with memory["lock"]:
                out[step] = _remember(memory["reports"], (path, n_traces, seed, step), value, MEMORY_ENTRIES)
    finally:
        bar.close()
    return out


def is_measured(checkpoint: Checkpoint, n_traces: int, seed: int, step: str) -> bool:
    """Whether measure() has this report in memory or on disk (then it takes no computing)."""
    memory, key = _memory(), (str(checkpoint.path), n_traces, seed, step)
    if key in memory["reports"]:
        return True
    value = read_result(step, checkpoint.path, f"{n_traces}/{seed}")
    if value is MISSING:
        return False
    with memory["lock"]:
        _remember(memory["reports"], key, value, MEMORY_ENTRIES)
    return True


def _held_capture(path: str, n_traces: int, seed: int, names: tuple[str, ...]):
    """A capture in memory of this batch holding at least `names`, else None."""
    for (p, n, s, held), cap in list(_memory()["captures"].items()):
        if (p, n, s) == (path, n_traces, seed) and set(names) <= set(held):
            return cap
    return None


def held_out_capture(
    checkpoint: Checkpoint,
    n_traces: int,
    seed: int,
    announce: Callable[[str], None] | None = None,
    names: tuple[str, ...] | None = None,
):
    """The capture the reports read, with `names` (default: everything any report reads); the last
    three are kept in memory."""
    if names is None:
        names = FULL_NAMES if is_delta_rule(checkpoint.arch) else ("resid",)
    path = str(checkpoint.path)
    found = _held_capture(path, n_traces, seed, names)
    if found is not None:
        return found
    if announce is not None:
        announce(f"running the model on {n_traces} held-out traces")
    key = (path, n_traces, seed, tuple(names))
    batch = checkpoint.batch(n_traces, seed=seed)
    with model_lock(str(checkpoint.path)):
        cap = capture(checkpoint.model, batch, names=names)
    memory = _memory()
    with memory["lock"]:
        return _remember(memory["captures"], key, cap, 3)


def head_points(checkpoint: Checkpoint, n_traces: int, seed: int, layer: int, head: int, variable: int):
    """probes.subspace.state_points of one head (first two PCs of vec(S_t), coloured by a variable)."""
    memory, key = _memory(), (str(checkpoint.path), n_traces, seed, "points", layer, head, variable)
    if key not in memory["reports"]:
        from deltalens.probes.subspace import state_points

        cap = held_out_capture(checkpoint, n_traces, seed, names=("state",))
        points = state_points(cap, layer, head, variable)
        with memory["lock"]:
            _remember(memory["reports"], key, points, MEMORY_ENTRIES)
    return memory["reports"][key]


@st.cache_resource(max_entries=16, show_spinner=False)
def one_trace_beta(path: str, seed: int) -> tuple[list[str], dict[int, Any]]:
    """(token pieces, layer -> beta (T, H[, n_h])) on the held-out trace of `seed`."""
    checkpoint = opened(path)
    spec = checkpoint.spec
    trace: Trace[Any] = (
        generate_prob_trace(spec, seed, posteriors=False)
        if isinstance(spec, ProbTraceSpec)
        else generate_trace(spec, seed)
    )
    model = checkpoint.model
    tokens = model.to_tokens(trace.text)
    with torch.no_grad(), model_lock(path):
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("attn.hook_beta"))
    betas = {int(name.split(".")[1]): value[0].detach().float().cpu().numpy() for name, value in cache.items()}
    return model.to_str_tokens(tokens), betas
