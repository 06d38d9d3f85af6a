"""The named per-head interventions a head sweep applies (interp/head_sweep.py builds them).

A module of its own so that the CLI can offer them as choices without importing torch (~1.6 s).

    beta-range    rescale_beta(model, l, h, to=(0, 1))      DeltaNet only
    beta-clip     clip_beta(model, l, h, hi=1)               beta > 1 set to 1, the rest untouched
    beta-reflect  reflect_beta(model, l, h)                  beta -> 2 - beta: eigenvalue 1 - beta -> beta - 1
    transition-clip   clip_transition(model, l, h, hi=1)     beta > 1 set to 1 in the transition only, write kept
    transition-range  rescale_transition(model, l, h)        the transition's beta [0, 2] -> [0, 1], write kept
    write-clip        clip_write(model, l, h, hi=1)          the write's beta > 1 set to 1, transition kept
    write-half        scale_write(model, l, h, scale=0.5)    the write beta k v^T halved, transition kept
    eigen-abs         abs_eigenvalue(model, l, h)            eigenvalue 1 - beta -> |1 - beta|, write kept
                      (these five: interp/split_interventions.py)
    zero-z        ablate_head(..., "zero", site="z")         DeltaNet and Transformer
    mean-z        ablate_head(..., "mean", site="z")         mean over the batch's real tokens
    zero-state    ablate_head(..., "zero", site="state")     DeltaNet only
    mean-state    ablate_head(..., "mean", site="state")
"""

SPLIT_INTERVENTIONS = ("transition-clip", "transition-range", "write-clip", "write-half", "eigen-abs")
INTERVENTIONS = (
    "beta-range",
    "beta-clip",
    "beta-reflect",
    *SPLIT_INTERVENTIONS,
    "zero-z",
    "mean-z",
    "zero-state",
    "mean-state",
)
