"""Shared test set-up: one intra-op thread, and fixtures that tests of several rooms build alike.

    tiny_models       session: {arch: a small random model} for each delta-rule architecture (read-only)
    tiny_model        a private deep copy of one of them, for a test that edits it: tiny_model("deltaproduct")
    shipped_s3        session: the shipped S3 DeltaNet, deltalens.load("s3-deltanet-neg-statement") (read-only)
    shipped_s3_batch  session: 16 held-out (eval-split) traces of its task, shipped_s3.checkpoint.batch(16)

Session fixtures are shared by every test that asks for them: a test that changes one (set_beta_range,
a backward pass that leaves .grad, hooks it does not remove) takes a copy instead.
"""

import copy

import pytest
import torch

# Two shared cores: one intra-op thread avoids OpenMP oversubscription, which makes small LSTM and
# delta-rule ops up to 100x slower when another process holds the other core.
torch.set_num_threads(1)

TINY = dict(vocab_size=23, hidden_size=32, num_hidden_layers=2, num_heads=2, allow_neg_eigval=True)
TINY_OVERRIDES = {  # DeltaNet's head size is hidden_size / num_heads (fla's DeltaNetConfig has no head_dim)
    "deltanet": {},
    "gated_deltanet": {"head_dim": 8},
    "deltaproduct": {"head_dim": 8, "num_householder": 3, "use_forget_gate": True},
    "kda": {"head_dim": 8},
}
DELTA_RULE_ARCHS = tuple(TINY_OVERRIDES)


def build_tiny(arch: str, seed: int = 0, **overrides):
    """A small random delta-rule model in eval mode, the same weights for the same seed; the global RNG is
    left as it was."""
    from deltalens import models

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return models.build(arch, **{**TINY, **TINY_OVERRIDES[arch], **overrides}).eval()


@pytest.fixture(scope="session")
def tiny_models():
    return {arch: build_tiny(arch) for arch in DELTA_RULE_ARCHS}


@pytest.fixture
def tiny_model(tiny_models):
    return lambda arch: copy.deepcopy(tiny_models[arch])


@pytest.fixture(scope="session")
def shipped_s3():
    import deltalens

    return deltalens.load("s3-deltanet-neg-statement")


@pytest.fixture(scope="session")
def shipped_s3_batch(shipped_s3):
    return shipped_s3.checkpoint.batch(16)
