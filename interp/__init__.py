"""Capture and interventions on trained models, and head sweeps.

capture.py             run a model with hooks and keep activations next to each token's labels
interventions.py       rescale a head's beta, ablate a head, patch activations or states
split_interventions.py change a head's transition I - beta k k^T or its write beta k v^T alone
head_sweep.py          apply one intervention to every head in turn and rank the heads
intervention_kinds.py  every kind of per-head intervention, one record each (API, CLI, sweep and page read it)
effective_attention.py  the exact read-out weights A[t, s] of a delta-rule head (z = A v)
logit_attribution.py   direct logit attribution per head (and factor) through the frozen final norm
trace_pairs.py         clean / corrupted trace pairs (values relabelled) and their logit-difference metric
patching.py            activation patching over layers x heads (x positions), path patching
attribution_patching.py  gradient x difference estimates of every patch from one forward and backward
circuit.py             one table of heads: direct logit attribution beside attribution patching; the patching grid
dictionary_splice.py   a sparse dictionary spliced into the forward (a state edit that propagates), its accuracy
"""
