"""A tiny model of every registered family, saved as a folder the CLI, the dashboard and dl.load open: the
conformance matrix's rows (tests/test_conformance.py).

Our families and fla's are built small (hidden 16, 2 heads) and saved with the shipped S3 statement
checkpoint's tokenizer and task, so `checkpoint.batch` gives REPL traces; each fla family also as a hybrid
(softmax attention at layer 1, fla's `attn`). The transformers families are their offline hub
stand-ins (tests/production_standin.py: transformers' own classes, 4 layers, a BPE tokenizer). RWKV-7 has
no hybrid row: fla's RWKV7Block cannot hold an attention layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from deltalens.models import families  # noqa: F401  (registers the built-in families)
from deltalens.models.families.production_shared import PRODUCTION
from deltalens.models.registry import family

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "checkpoints" / "s3-deltanet-neg-statement"
SMALL = dict(vocab_size=28, hidden_size=16, num_hidden_layers=2, num_heads=2)
HYBRID = dict(num_hidden_layers=3, attn={"layers": [1], "num_heads": 2})

# row id -> (arch, build keyword arguments); None: a transformers stand-in of that model type
ROWS: dict[str, tuple[str, dict | None]] = {
    "deltanet": ("deltanet", {**SMALL, "allow_neg_eigval": True}),
    "deltanet-hybrid": ("deltanet", {**SMALL, **HYBRID, "allow_neg_eigval": True}),
    "gated_deltanet": ("gated_deltanet", {**SMALL, "head_dim": 8, "allow_neg_eigval": True}),
    "gated_deltanet-hybrid": ("gated_deltanet", {**SMALL, **HYBRID, "head_dim": 8, "allow_neg_eigval": True}),
    "deltaproduct": (
        "deltaproduct",
        {**SMALL, "head_dim": 8, "num_householder": 2, "use_forget_gate": True, "allow_neg_eigval": True},
    ),
    "deltaproduct-hybrid": (
        "deltaproduct",
        {**SMALL, **HYBRID, "head_dim": 8, "num_householder": 2, "use_forget_gate": True, "allow_neg_eigval": True},
    ),
    "kda": ("kda", {**SMALL, "head_dim": 8, "allow_neg_eigval": True}),
    "kda-hybrid": ("kda", {**SMALL, **HYBRID, "head_dim": 8, "allow_neg_eigval": True}),
    "transformer": ("transformer", {"d_vocab": 28, "d_model": 16, "n_layers": 2, "n_heads": 2, "n_ctx": 512}),
    "lstm": ("lstm", {"vocab_size": 28, "d_model": 16, "n_layers": 2}),
    "m2rnn": ("m2rnn", dict(SMALL)),
    "deltanet_m2rnn": ("deltanet_m2rnn", dict(SMALL)),
    "value_gated_deltanet": ("value_gated_deltanet", dict(SMALL)),
    "comba": ("comba", {**SMALL, "head_dim": 8}),
    "comba-hybrid": ("comba", {**SMALL, **HYBRID, "head_dim": 8}),
    "rwkv7": ("rwkv7", {**SMALL, "head_dim": 8}),  # no hybrid: fla's RWKV7Block cannot hold attention
    # every registered transformers family: a new one joins the matrix by registering
    **{arch: (arch, None) for arch in PRODUCTION},
}


def shipped_sections() -> dict:
    """The shipped S3 statement checkpoint's tokenizer and task sections."""
    section = json.loads((SHIPPED / "config.json").read_text())["deltalens"]
    return {"tokenizer": section["tokenizer"], "task": section["task"]}


def make_folder(row: str, root: Path) -> Path:
    """The row's model folder under `root` (built once per root)."""
    arch, kwargs = ROWS[row]
    if kwargs is None:
        from production_standin import put_standin

        _, snapshot = put_standin(family(arch).model_types[0], root / "hf")  # its text model's type
        return Path(snapshot)
    from deltalens import models

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = models.build(arch, **kwargs).eval()
    return models.save(model, root / row, extra=shipped_sections())
