"""Capture and interventions on trained models; evaluation; the `deltalens` CLI.

Re-exports (loaded on first use, so `import interp` stays cheap)::

    capture, Capture, open_checkpoint, Checkpoint, checkpoint_batch     interp.capture
    Intervention, rescale_beta, ablate_head, patch_activation,
        patch_state, reveal_accuracy, accuracy_under                     interp.interventions
    sweep, SweepResult, INTERVENTIONS                                    interp.sweep
    probe_summary, ProbeSummary                                          interp.commands.probe
"""
from __future__ import annotations

import importlib

_LAZY = {
    **dict.fromkeys(("capture", "Capture", "open_checkpoint", "Checkpoint", "checkpoint_batch"), "interp.capture"),
    **dict.fromkeys(("Intervention", "rescale_beta", "ablate_head", "patch_activation", "patch_state",
                     "reveal_accuracy", "accuracy_under", "head_means"), "interp.interventions"),
    **dict.fromkeys(("sweep", "SweepResult", "INTERVENTIONS"), "interp.sweep"),
    **dict.fromkeys(("probe_summary", "ProbeSummary"), "interp.commands.probe"),
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = sorted(_LAZY)
