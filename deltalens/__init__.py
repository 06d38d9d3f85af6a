"""deltalens: a mechanistic-interpretability workbench for state tracking in linear RNNs.

The notebook API, TransformerLens style::

    import deltalens as dl
    model = dl.load("s3-deltanet-neg-statement")          # shipped name, folder, or fla DeltaNet folder
    logits, cache = model.run_with_cache(model.to_tokens(text))
    cache[dl.act_name("beta", 0)]                         # (batch, pos, head)
    batch = model.checkpoint.batch(64)                     # held-out traces with their labels
    report = dl.eigenvalue_report(dl.capture(model, batch, names=("beta", "k")))
    dl.sweep(model, batch, "beta-range")                   # the paper's head test
    dl.product_report(dl.capture(model, batch, names=("beta", "k")))   # per-token products = permutations?
    dl.build("deltaproduct", vocab_size=32, hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=16,
             num_householder=3, allow_neg_eigval=True)    # any architecture of the family (dl.FAMILY)

The names below load on first use: importing everything takes seconds (torch ~1.6 s,
TransformerLens ~3 s, fla ~6 s on a 2-core CPU), and `import deltalens` should not.

The rooms are top-level folders of the repository, mapped under this name by pyproject.toml,
each importing only the rooms before it: deltalens.tasks, .models, .training, .loading, .grids, .interp, .probes,
.reports, .cli, .app.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# the rooms, lowest first (a room imports only rooms before it; cli and app import every room below them):
# the one list that scripts/import_graph.py, the layout tests and the symlinks under deltalens/ are checked against
ROOMS = ("core", "tasks", "models", "training", "loading", "grids", "interp", "probes", "reports", "cli", "app")

# THE list of public names: one import per name, eager for static tools (Pyright, jedi, IDEs) and read
# by `_public_names` below for the lazy table (add a public name here, and to docs/api.md's table)
if TYPE_CHECKING:
    from deltalens.core.display import set_progress
    from deltalens.core.errors import DeltalensError
    from deltalens.interp.attribution_patching import (
        AttributionResult,
        attribution_of_intervention,
        attribution_patching,
    )
    from deltalens.interp.capture import Capture, capture
    from deltalens.interp.capture_disk import open_capture
    from deltalens.interp.circuit import HeadAttribution, head_attribution, patch_grid
    from deltalens.interp.dictionary_splice import SpliceReport, fact_latents, splice_report, splice_sae
    from deltalens.interp.effective_attention import (
        effective_attention,
        effective_attention_figure,
        run_with_effective_pattern,
    )
    from deltalens.interp.head_sweep import SweepResult, sweep, sweep_figure
    from deltalens.interp.interventions import (
        Intervention,
        ablate_head,
        accuracy_under,
        clamp_gate,
        clip_beta,
        head_means,
        patch_activation,
        patch_state,
        reflect_beta,
        rescale_beta,
        reveal_accuracy,
    )
    from deltalens.interp.logit_attribution import LogitAttribution, dla_figure, logit_attribution, reveal_rows
    from deltalens.interp.patching import PatchGrid, patch_grid_figure, patch_heads, path_patch
    from deltalens.interp.split_interventions import (
        abs_eigenvalue,
        clip_transition,
        clip_write,
        rescale_transition,
        scale_write,
    )
    from deltalens.interp.trace_pairs import relabel_values, reveal_metric, trace_pair
    from deltalens.loading.evaluate_checkpoint import evaluate_checkpoint
    from deltalens.loading.opened import Checkpoint, list_checkpoints, load, open_checkpoint
    from deltalens.models.architecture import ARCHITECTURES, FAMILY
    from deltalens.models.build import build
    from deltalens.models.lm.hook_names import ACT_NAMES, act_name
    from deltalens.probes.automaton import Automaton, automaton_figure, extract_automaton
    from deltalens.probes.automaton_intervention import centroid_intervention
    from deltalens.probes.census import Census, census, census_figure
    from deltalens.probes.dictionary_scores import DictionaryScore, score_sae
    from deltalens.probes.eigenvalues import (
        EigenvalueReport,
        beta_heatmap,
        eigenvalue_histogram,
        eigenvalue_report,
        product_eigenvalue_figure,
    )
    from deltalens.probes.linear_probes import ProbeReport, linear_probes, probe_accuracy_figure
    from deltalens.probes.products import ProductReport, product_decoding_figure, product_report
    from deltalens.probes.sparse_dictionary import Dictionary, load_sae, train_sae
    from deltalens.probes.subspace import SubspaceReport, pca_figure, singular_value_figure, subspace_report
    from deltalens.probes.summary import ProbeSummary, probe_summary
    from deltalens.tasks.dataset import make_batch
    from deltalens.tasks.pfsa import joint_filter, marginal_filter
    from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, parse_prob_trace
    from deltalens.tasks.tokenizers import make_tokenizer
    from deltalens.tasks.traces import TraceSpec, generate_trace
    from deltalens.training.belief_kl import BeliefKL, belief_kl, kl_figure
    from deltalens.training.evaluate import evaluate


def _public_names() -> dict[str, str]:
    """public name -> the module that defines it, read from the TYPE_CHECKING imports above (about 2 ms)."""
    import ast
    from pathlib import Path

    names = {}
    for node in ast.parse(Path(__file__).read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imported in node.body:
                if isinstance(imported, ast.ImportFrom) and imported.module:
                    names.update({alias.name: imported.module for alias in imported.names})
    return names


_API = _public_names()
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        if name not in ("FAMILY", "ARCHITECTURES", "ACT_NAMES"):  # read from the registry each time
            globals()[name] = value  # once loaded, a plain attribute
        return value
    raise AttributeError(f"module 'deltalens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
