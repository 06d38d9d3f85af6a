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
each importing only the rooms before it: deltalens.tasks, .models, .training, .interp, .probes,
.reports, .cli, .app.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> the module that defines it
_API = {
    **dict.fromkeys(("load", "list_checkpoints", "open_checkpoint", "Checkpoint"), "deltalens.training.opened"),
    **dict.fromkeys(("act_name", "ACT_NAMES"), "deltalens.models.lm.hook_names"),
    **dict.fromkeys(("capture", "Capture"), "deltalens.interp.capture"),
    **dict.fromkeys(
        (
            "Intervention",
            "rescale_beta",
            "clip_beta",
            "reflect_beta",
            "clamp_gate",
            "ablate_head",
            "patch_activation",
            "patch_state",
            "head_means",
            "reveal_accuracy",
            "accuracy_under",
        ),
        "deltalens.interp.interventions",
    ),
    **dict.fromkeys(("sweep", "sweep_figure", "SweepResult"), "deltalens.interp.head_sweep"),
    **dict.fromkeys(
        ("effective_attention", "run_with_effective_pattern", "effective_attention_figure"),
        "deltalens.interp.effective_attention",
    ),
    **dict.fromkeys(
        ("logit_attribution", "LogitAttribution", "reveal_rows", "dla_figure"), "deltalens.interp.logit_attribution"
    ),
    **dict.fromkeys(("patch_heads", "path_patch", "PatchGrid", "patch_grid_figure"), "deltalens.interp.patching"),
    **dict.fromkeys(("trace_pair", "reveal_metric", "relabel_values"), "deltalens.interp.trace_pairs"),
    **dict.fromkeys(("head_attribution", "HeadAttribution", "patch_grid"), "deltalens.interp.circuit"),
    **dict.fromkeys(
        ("attribution_patching", "AttributionResult", "attribution_of_intervention"),
        "deltalens.interp.attribution_patching",
    ),
    **dict.fromkeys(
        ("extract_automaton", "Automaton", "centroid_intervention", "automaton_figure"), "deltalens.probes.automaton"
    ),
    **dict.fromkeys(
        ("eigenvalue_report", "EigenvalueReport", "beta_heatmap", "eigenvalue_histogram", "product_eigenvalue_figure"),
        "deltalens.probes.eigenvalues",
    ),
    **dict.fromkeys(
        ("subspace_report", "SubspaceReport", "singular_value_figure", "pca_figure"), "deltalens.probes.subspace"
    ),
    **dict.fromkeys(("linear_probes", "ProbeReport", "probe_accuracy_figure"), "deltalens.probes.linear_probes"),
    **dict.fromkeys(("probe_summary", "ProbeSummary"), "deltalens.probes.summary"),
    **dict.fromkeys(("product_report", "ProductReport", "product_decoding_figure"), "deltalens.probes.products"),
    **dict.fromkeys(("build",), "deltalens.models.build"),
    **dict.fromkeys(("FAMILY", "ARCHITECTURES"), "deltalens.models.architecture"),
    **dict.fromkeys(("belief_kl", "BeliefKL", "kl_figure"), "deltalens.training.belief_kl"),
    **dict.fromkeys(("evaluate", "evaluate_checkpoint"), "deltalens.training.evaluate"),
    **dict.fromkeys(("make_batch",), "deltalens.tasks.dataset"),
    **dict.fromkeys(("TraceSpec", "generate_trace"), "deltalens.tasks.traces"),
    **dict.fromkeys(("make_tokenizer",), "deltalens.tasks.tokenizers"),
    **dict.fromkeys(("ProbTraceSpec", "generate_prob_trace", "parse_prob_trace"), "deltalens.tasks.probabilistic"),
    **dict.fromkeys(("joint_filter", "marginal_filter"), "deltalens.tasks.pfsa"),
    **dict.fromkeys(("set_progress",), "deltalens.core.display"),
    **dict.fromkeys(("DeltalensError",), "deltalens.core.errors"),
}

if TYPE_CHECKING:  # the same names, eagerly, for static tools (Pyright, jedi, IDEs); tests keep both in step
    from deltalens.core.display import set_progress
    from deltalens.core.errors import DeltalensError
    from deltalens.interp.attribution_patching import (
        AttributionResult,
        attribution_of_intervention,
        attribution_patching,
    )
    from deltalens.interp.capture import Capture, capture
    from deltalens.interp.circuit import HeadAttribution, head_attribution, patch_grid
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
    from deltalens.interp.trace_pairs import relabel_values, reveal_metric, trace_pair
    from deltalens.models.architecture import ARCHITECTURES, FAMILY
    from deltalens.models.build import build
    from deltalens.models.lm.hook_names import ACT_NAMES, act_name
    from deltalens.probes.automaton import Automaton, automaton_figure, centroid_intervention, extract_automaton
    from deltalens.probes.eigenvalues import (
        EigenvalueReport,
        beta_heatmap,
        eigenvalue_histogram,
        eigenvalue_report,
        product_eigenvalue_figure,
    )
    from deltalens.probes.linear_probes import ProbeReport, linear_probes, probe_accuracy_figure
    from deltalens.probes.products import ProductReport, product_decoding_figure, product_report
    from deltalens.probes.subspace import SubspaceReport, pca_figure, singular_value_figure, subspace_report
    from deltalens.probes.summary import ProbeSummary, probe_summary
    from deltalens.tasks.dataset import make_batch
    from deltalens.tasks.pfsa import joint_filter, marginal_filter
    from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace, parse_prob_trace
    from deltalens.tasks.tokenizers import make_tokenizer
    from deltalens.tasks.traces import TraceSpec, generate_trace
    from deltalens.training.belief_kl import BeliefKL, belief_kl, kl_figure
    from deltalens.training.evaluate import evaluate, evaluate_checkpoint
    from deltalens.training.opened import Checkpoint, list_checkpoints, load, open_checkpoint

__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value  # once loaded, a plain attribute
        return value
    raise AttributeError(f"module 'deltalens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
