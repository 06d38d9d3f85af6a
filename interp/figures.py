"""Every plotly figure of the interpretability tools, in one place for the dashboard.

Each figure function lives beside the data it draws (one file per idea); this module only
re-exports them. Every function takes the report dataclass and returns a `plotly.graph_objects.Figure`:

    beta_heatmap(EigenvalueReport)               layer x head, mean beta on action tokens
    eigenvalue_histogram(EigenvalueReport, l, h) eigenvalues 1 - beta ||k||^2 by token kind
    product_eigenvalue_figure(EigenvalueReport)  per-action transition products, complex plane
    singular_value_figure(SubspaceReport)        mean normalised singular values of S_t per head
    pca_figure(SubspaceReport)                   cumulative PCA variance of vec(S_t) per head
    probe_accuracy_figure(ProbeReport)           probe accuracy by layer / head, with the control
    sweep_figure(SweepResult)                    reveal accuracy per intervened head vs baseline
"""
from __future__ import annotations

from probes.eigenvalues import beta_heatmap, eigenvalue_histogram, product_eigenvalue_figure
from probes.linear_probes import probe_accuracy_figure
from probes.subspace import pca_figure, singular_value_figure
from interp.sweep import sweep_figure

__all__ = ["beta_heatmap", "eigenvalue_histogram", "product_eigenvalue_figure", "singular_value_figure",
           "pca_figure", "probe_accuracy_figure", "sweep_figure"]
