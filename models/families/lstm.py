"""The LSTM baseline: a stacked LSTM language model with hooks on each layer's h and c
(models/lm/lstm.py's HookedLSTM)."""

from __future__ import annotations

from typing import Any

from deltalens.models.io.footprint import number
from deltalens.models.registry import Family, register


def _weights(config: dict[str, Any]) -> float:
    """Embed and unembed, then per layer the four gates' W_ih and W_hh."""
    d, vocab = number(config, "d_model", 64), number(config, "d_vocab", 64)
    return 2 * vocab * d + number(config, "n_layers", 2) * 8 * d * d


register(
    Family(
        arch="lstm",
        display="LSTM",
        article="an LSTM",
        model="deltalens.models.lm.lstm:HookedLSTM",
        class_name="HookedLSTM",
        config="deltalens.models.lm.lstm:lstm_config_from_dict",
        act_names=("embed", "hidden", "cell", "scale", "normalized"),
        layers_field="n_layers",
        hooks="hidden, cell",
        probes="linear probes",
        interventions="unit ablation",
        vocab_field="d_vocab",
        weights=_weights,
        capabilities=frozenset(),
    )
)
