"""Capture and interventions on trained models, and head sweeps.

capture.py             run a model with hooks and keep activations next to each token's labels
interventions.py       rescale a head's beta, ablate a head, patch activations or states
head_sweep.py          apply one intervention to every head in turn and rank the heads
intervention_names.py  the named interventions a head sweep knows
"""
