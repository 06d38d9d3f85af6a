"""The DeltaNet / M²RNN hybrid: DeltaNet layers (beta in [0, 2]) with every nonlinear_every-th layer an M²RNN
layer, the paper's "linear recurrence interleaved with periodic non-linear normalisation"; the model is
models/lm/m2rnn.py's HookedDeltaM2RNN."""

from __future__ import annotations

from deltalens.models.families import delta_rule, m2rnn
from deltalens.models.registry import Family, register

register(
    Family(
        arch="deltanet_m2rnn",
        display="DeltaNet–M²RNN hybrid",
        article="a DeltaNet–M²RNN hybrid",
        model="deltalens.models.lm.m2rnn:HookedDeltaM2RNN",
        class_name="HookedDeltaM2RNN",
        config="deltalens.models.lm.m2rnn:delta_m2rnn_config_from_dict",
        act_names=delta_rule.GATED_ACT_NAMES,  # beta on the DeltaNet layers, gate (f_t) on the M²RNN ones
        layers_field="num_hidden_layers",
        delta_rule=True,  # on its DeltaNet layers (model.delta_layers); the M²RNN layers are left out by the tools
        hooks=delta_rule.HOOKS + " on DeltaNet layers; q, k, v, gate, state, z on M²RNN layers",
        probes="linear probes; on the DeltaNet layers " + delta_rule.PROBES,
        interventions="beta range and state edits on the DeltaNet layers, head ablation, state patching",
        weights=m2rnn.weights,  # the DeltaNet layers' b_proj is not counted: a lower bound still
        capabilities=frozenset(
            {"residual", "lens", "delta", "keys", "householder", "one_pattern", "state", "heads", "gate"}
        ),
    )
)
