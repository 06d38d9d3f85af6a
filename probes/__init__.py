"""Measurements on captured activations.

Re-exports (loaded on first use, so `import probes` stays cheap)::

    eigenvalue_report, EigenvalueReport, transition_eigenvalues, transition_products   probes.eigenvalues
    subspace_report, SubspaceReport, effective_rank, pca_dims, numerical_rank         probes.subspace
    linear_probes, ProbeReport                                                       probes.linear_probes

Each takes a `interp.capture.Capture` (or a model and a batch) and returns a dataclass of pandas
frames; the plotly figure for it sits in the same module (interp.sweep has the sweep figure).
probes.belief_decay (belief mass without renormalisation) is imported directly.
"""
from __future__ import annotations

import importlib

_LAZY = {
    **dict.fromkeys(("eigenvalue_report", "EigenvalueReport", "transition_eigenvalues", "transition_products"),
                    "probes.eigenvalues"),
    **dict.fromkeys(("subspace_report", "SubspaceReport", "effective_rank", "pca_dims", "numerical_rank"),
                    "probes.subspace"),
    **dict.fromkeys(("linear_probes", "ProbeReport"), "probes.linear_probes"),
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'probes' has no attribute {name!r}")


__all__ = sorted(_LAZY)
