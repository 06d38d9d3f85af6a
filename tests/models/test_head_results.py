"""Per-head writes and weight views on every family with heads (models/layers/head_results.py): the heads'
writes add up to the mixer's output, stack_head_results is them, and W_Q / W_K / W_V / W_O have
TransformerLens's shapes and reproduce the hooked projections where the mixer has them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance_zoo import ROWS, make_folder  # noqa: E402

import deltalens as dl  # noqa: E402
from deltalens.core.errors import DeltalensError  # noqa: E402
from deltalens.models.capabilities import capabilities_of  # noqa: E402
from deltalens.models.layers.head_results import has_read_out, head_results, head_weights, read_out_bias  # noqa: E402

LENS_ROWS = [row for row, (arch, _) in ROWS.items() if arch not in ("transformer", "lstm")]


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    out = {}
    for row in LENS_ROWS:
        model = dl.load(str(make_folder(row, root)))
        tokens = model.checkpoint.batch(2)["tokens"]
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens)
        out[row] = (model, cache)
    return out


@pytest.mark.parametrize("row", LENS_ROWS)
def test_the_heads_writes_add_up_to_the_mixers_output(opened, row):
    model, cache = opened[row]
    if "lens" not in capabilities_of(model):  # several residual streams (GLM-5 Next): no one mixer input to read
        with pytest.raises(DeltalensError, match="needs one residual stream"):
            model.mixer_input(0, cache["blocks.0.hook_resid_pre"])
        return
    for layer in range(model.cfg.n_layers):
        mixer = model.blocks[layer].attn
        if not has_read_out(mixer):  # a transformers attention layer: its output gate is inside transformers
            continue
        z = cache[f"blocks.{layer}.attn.hook_z"].flatten(0, 1)
        x = model.mixer_input(layer, cache[f"blocks.{layer}.hook_resid_pre"]).flatten(0, 1)
        total = head_results(mixer, z, x).sum(1) + read_out_bias(mixer, z, x)
        out = cache[f"blocks.{layer}.hook_attn_out"].flatten(0, 1)
        torch.testing.assert_close(total.float(), out.float(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("row", LENS_ROWS)
def test_stack_head_results_are_the_heads_writes(opened, row):
    model, cache = opened[row]
    if "residual" not in capabilities_of(model):  # several residual streams: the heads' writes sum to none of them
        with pytest.raises(DeltalensError, match="needs one residual stream"):
            cache.stack_head_results()
        return
    stacked, labels = cache.stack_head_results(return_labels=True)
    assert stacked.shape[0] == len(labels) and stacked.shape[-1] == model.cfg.d_model
    split = [l for l in range(model.cfg.n_layers) if l not in cache.unsplit_layers]
    first = split[0]
    heads = [i for i, label in enumerate(labels) if label.startswith(f"L{first}H")]
    out = cache[f"blocks.{first}.hook_attn_out"]
    torch.testing.assert_close(stacked[heads].sum(0), out, atol=1e-5, rtol=1e-4)  # no projection bias here
    with_rest, names = cache.stack_head_results(return_labels=True, incl_remainder=True)
    assert names[-1] == "remainder"
    torch.testing.assert_close(with_rest.sum(0), cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"])


@pytest.mark.parametrize("row", LENS_ROWS)
def test_weight_views_have_transformer_lens_shapes(opened, row):
    model, _ = opened[row]
    for layer in range(model.cfg.n_layers):
        mixer = model.blocks[layer].attn
        weights = head_weights(mixer)
        if not weights:  # a transformers attention layer
            continue
        H = weights["W_O"].shape[0]
        d_model = model.cfg.d_model
        assert weights["W_Q"].shape[:2] == (H, d_model) and weights["W_O"].shape[0] == H
        assert weights["W_O"].shape[-1] == d_model and weights["W_V"].shape[0] == H
        torch.testing.assert_close(mixer.W_Q, weights["W_Q"])


def test_w_q_reproduces_the_projection_before_the_convolution():
    """On an fla DeltaNet: x @ W_Q[h] is head h of q_proj(x) (what the short conv then reads)."""
    model = dl.build("deltanet", vocab_size=20, hidden_size=16, num_hidden_layers=1, num_heads=2)
    mixer = model.blocks[0].attn
    x = torch.randn(5, 16)
    q = mixer.q_proj(x).reshape(5, 2, 8)
    torch.testing.assert_close(torch.einsum("nm,hmd->nhd", x, mixer.W_Q), q)
    o = torch.randn(5, 2, 8)
    torch.testing.assert_close(torch.einsum("nhd,hdm->nm", o, mixer.W_O), mixer.o_proj(o.reshape(5, 16)))


def test_a_production_layer_reads_its_fused_projection_off_exactly():
    """Qwen3.5's in_proj_qkv: W_Q, W_K, W_V read off on the unit vectors reproduce q, k, v before the conv."""
    from production_standin import tiny_config

    model = dl.build("qwen3_5", **tiny_config("qwen3_5_text").to_dict())
    mixer = model.blocks[model.delta_layers[0]].attn
    x = torch.randn(3, model.cfg.d_model)
    mixed = mixer.in_proj_qkv(x)
    q = mixed[:, : mixer.key_dim].reshape(3, mixer.num_k_heads, mixer.head_k_dim)
    got = torch.einsum("nm,hmd->nhd", x, mixer.W_Q)  # value heads: key heads repeated
    torch.testing.assert_close(got[:, :: mixer.num_v_heads // mixer.num_k_heads], q, atol=1e-5, rtol=1e-5)
