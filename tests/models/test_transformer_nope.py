"""The Transformer baseline without positions (NoPE, models/lm/transformer.py)."""


def test_nope_transformer_sees_positions_only_through_the_causal_mask():
    """One layer without positions: the last token's output is a function of the set of earlier tokens,
    so permuting them leaves it unchanged; with rotary positions it does not."""
    import torch

    from deltalens import models

    tokens = torch.tensor([[3, 5, 7, 9, 11, 2]])
    shuffled = torch.tensor([[9, 3, 11, 5, 7, 2]])
    kinds = {}
    for kind in ("none", "rotary"):
        model = models.build(
            "transformer",
            d_vocab=16,
            d_model=16,
            n_layers=1,
            n_heads=2,
            n_ctx=32,
            positional_embedding_type=kind,
            seed=0,
        )
        kinds[kind] = (model(tokens)[0, -1] - model(shuffled)[0, -1]).abs().max().item()
        assert model.model_config["positional_embedding_type"] == kind  # a checkpoint rebuilds it as it was
    assert kinds["none"] < 1e-5 < kinds["rotary"]
    assert (
        models.build("transformer", d_vocab=16, d_model=16, positional_embedding_type="nope").model_config[
            "positional_embedding_type"
        ]
        == "none"
    )
