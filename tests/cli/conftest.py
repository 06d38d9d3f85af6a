"""Checkpoints the CLI tests open: the hand-set swap tracker and a tiny Transformer with its task."""

import pytest
from handset import swap_model

from deltalens import models


@pytest.fixture(scope="module")
def hand_path(tmp_path_factory):
    return str(swap_model().save(tmp_path_factory.mktemp("ckpt") / "hand"))


@pytest.fixture(scope="module")
def transformer_path(tmp_path_factory):
    hand = swap_model()  # for its tokenizer and task metadata
    model = models.build(
        "transformer", vocab_size=hand.tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=2, n_ctx=128
    )
    path = tmp_path_factory.mktemp("ckpt") / "transformer"
    models.save(model, path, extra={"tokenizer": hand.tokenizer.to_spec(), "task": hand.task})
    return str(path)
