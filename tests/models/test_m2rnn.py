"""M²RNN and the DeltaNet / M²RNN hybrid (models/lm/m2rnn.py): the recurrence against a loop written here,
hook_state read back and edited, save / load, training, and the hybrid's layers."""

import pytest
import torch

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.models.layers.deltanet_mixer import DeltaNetMixer
from deltalens.models.layers.m2rnn_mixer import M2RNNMixer
from deltalens.models.registry import family
from deltalens.tasks import TraceSpec
from deltalens.tasks.dataset import make_batch
from deltalens.tasks.tokenizers import make_tokenizer

TINY = dict(vocab_size=24, hidden_size=16, num_heads=2)


def _tokens(T=10, B=2, seed=0):
    return torch.randint(3, 24, (B, T), generator=torch.Generator().manual_seed(seed))


def _perturbed(model, seed=0):
    """A model whose W and forget gate are far from their initial values, so the test sees both at work."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mixer in model.modules():
            if isinstance(mixer, M2RNNMixer):
                mixer.W.add_(0.5 * torch.randn(mixer.W.shape, generator=gen))
                mixer.f_bias.copy_(torch.randn(mixer.f_bias.shape, generator=gen))
    return model.eval()


def _reference(q, k, v, f, W):
    """S_t = f S_{t-1} + (1 - f) tanh(S_{t-1} W + k v^T), o_t = S_t^T q_t / sqrt(d_k): one sequence, one head
    and one step at a time. Returns (o (B, T, H, d_v), S (B, T, H, d_k, d_v))."""
    B, T, H, d_k = k.shape
    o, S_all = torch.zeros(B, T, H, v.shape[-1]), torch.zeros(B, T, H, d_k, v.shape[-1])
    for b in range(B):
        for h in range(H):
            S = torch.zeros(d_k, v.shape[-1])
            for t in range(T):
                S = f[b, t, h] * S + (1 - f[b, t, h]) * torch.tanh(S @ W[h] + torch.outer(k[b, t, h], v[b, t, h]))
                S_all[b, t, h] = S
                o[b, t, h] = S.T @ q[b, t, h] / d_k**0.5
    return o, S_all


def test_the_recurrence_is_the_formula_and_hook_state_replays_hook_z():
    model = _perturbed(models.build("m2rnn", num_hidden_layers=1, **TINY))
    _, cache = model.run_with_cache(_tokens())
    hook = "blocks.0.attn.hook_"
    q, k, v, f = (cache[hook + name] for name in ("q", "k", "v", "gate"))
    assert f.shape == q.shape[:3] and 0 < f.min() and f.max() < 1
    o, S = _reference(q, k, v, f, model.blocks[0].attn.W.detach())
    assert cache[hook + "state"].shape == (2, 10, 2, 8, 8)  # (batch, pos, head, d_k, d_v)
    torch.testing.assert_close(cache[hook + "state"], S, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache[hook + "z"], o, atol=1e-5, rtol=1e-5)
    # the cached states, read with the cached queries, give the layer's output
    replay = torch.einsum("bthkv,bthk->bthv", cache[hook + "state"], cache[hook + "q"]) / 8**0.5
    torch.testing.assert_close(replay, cache[hook + "z"], atol=1e-5, rtol=1e-5)


def test_states_are_kept_only_when_hooked_and_caching_changes_nothing():
    model = _perturbed(models.build("m2rnn", **TINY))
    tokens = _tokens()
    plain = model(tokens)
    logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_state"))
    torch.testing.assert_close(logits, plain, atol=0, rtol=0)
    assert sorted(cache.keys()) == ["blocks.0.attn.hook_state", "blocks.1.attn.hook_state"]


@pytest.mark.parametrize("in_place", [False, True])
def test_an_edited_state_is_what_the_layer_reads_and_continues_from(in_place):
    model = _perturbed(models.build("m2rnn", num_hidden_layers=1, **TINY))
    tokens, t0 = _tokens(), 4
    _, clean = model.run_with_cache(tokens)

    def zero_step(states, hook):
        if in_place:
            states[:, t0] = 0
            return None
        edited = states.clone()
        edited[:, t0] = 0
        return edited

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_state", zero_step)]):
        _, edited = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_z")
    z, z_clean = edited["blocks.0.attn.hook_z"], clean["blocks.0.attn.hook_z"]
    torch.testing.assert_close(z[:, :t0], z_clean[:, :t0], atol=0, rtol=0)  # before the edit: untouched
    assert torch.all(z[:, t0] == 0)  # the read-out of a zero state
    # after it: the formula continued from S = 0 at t0
    hook = "blocks.0.attn.hook_"
    q, k, v, f = (clean[hook + name][:, t0 + 1 :] for name in ("q", "k", "v", "gate"))
    o, _ = _reference(q, k, v, f, model.blocks[0].attn.W.detach())
    torch.testing.assert_close(z[:, t0 + 1 :], o, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(z[:, t0 + 1 :], z_clean[:, t0 + 1 :], atol=1e-3)


@pytest.mark.parametrize("arch", ["m2rnn", "deltanet_m2rnn"])
def test_save_and_load_give_the_same_model(arch, tmp_path):
    model = _perturbed(models.build(arch, **TINY, forget_bias=0.5))
    path = models.save(model, tmp_path / "ckpt")
    loaded = models.load(path)
    assert type(loaded) is type(model) and loaded.arch == arch
    assert loaded.model_config == model.model_config and loaded.model_config["forget_bias"] == 0.5
    assert models.read_checkpoint_meta(path)["architecture"] == arch
    tokens = _tokens(T=12)
    torch.testing.assert_close(loaded(tokens), model(tokens), atol=0, rtol=0)


@pytest.mark.parametrize("arch", ["m2rnn", "deltanet_m2rnn"])
def test_a_few_training_steps_lower_the_loss(arch):
    torch.manual_seed(0)
    model = models.build(arch, **TINY)
    tokens = _tokens(T=12, B=4, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = model(tokens, return_type="loss")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    # every parameter of the recurrence gets a gradient (W and the gate's bias included)
    mixer = next(m for m in model.modules() if isinstance(m, M2RNNMixer))
    assert mixer.W.grad.abs().sum() > 0 and mixer.f_bias.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "layers, every, kinds",
    [(2, 2, "DM"), (4, 2, "DMDM"), (3, 3, "DDM"), (2, 1, "MM")],
)
def test_the_hybrid_layers_are_what_the_config_says(layers, every, kinds):
    model = models.build("deltanet_m2rnn", num_hidden_layers=layers, nonlinear_every=every, **TINY)
    mixers = {"D": DeltaNetMixer, "M": M2RNNMixer}
    assert [type(block.attn) for block in model.blocks] == [mixers[kind] for kind in kinds]
    assert model.delta_layers == [i for i, kind in enumerate(kinds) if kind == "D"]
    assert model.nonlinear_layers == [i for i, kind in enumerate(kinds) if kind == "M"]
    beta_hooks = {name.split(".")[1] for name in model.hook_dict if name.endswith("hook_beta")}
    assert beta_hooks == {str(i) for i, kind in enumerate(kinds) if kind == "D"}


def test_the_hybrids_deltanet_layer_is_deltanets_own():
    hybrid = models.build("deltanet_m2rnn", **TINY, allow_neg_eigval=True).eval()
    plain = models.build("deltanet", num_hidden_layers=1, allow_neg_eigval=True, **TINY).eval()
    assert plain.model.layers[0].attn.beta_hi.max() == 2  # beta in [0, 2] on both
    weights = {k: v for k, v in hybrid.state_dict().items() if not k.startswith(("model.layers.1", "model.norm"))}
    plain.load_state_dict(weights, strict=False)
    names = ["blocks.0.attn.hook_z", "blocks.0.attn.hook_beta"]
    _, mine = hybrid.run_with_cache(_tokens(), names_filter=names)
    _, theirs = plain.run_with_cache(_tokens(), names_filter=names)
    for name in names:
        torch.testing.assert_close(mine[name], theirs[name], atol=1e-6, rtol=1e-6)


def test_beta_tools_act_on_the_deltanet_layers_and_refuse_the_m2rnn_ones():
    hybrid = models.build("deltanet_m2rnn", num_hidden_layers=4, **TINY)
    hybrid.set_beta_range(None, None, 0.0, 1.0)  # all DeltaNet layers
    assert all(hybrid.beta_range(layer)[1].max() == 1 for layer in hybrid.delta_layers)
    with pytest.raises(DeltalensError, match="M²RNN layer"):
        hybrid.set_beta_range(1, 0, 0.0, 1.0)
    with pytest.raises(DeltalensError, match="no write strength beta"):
        models.build("m2rnn", **TINY).set_beta_range(0, 0, 0.0, 1.0)


def test_both_are_registered_and_capture_reads_their_hooks():
    assert family("m2rnn").class_name == "HookedM2RNN" and not family("m2rnn").delta_rule
    assert family("deltanet_m2rnn").class_name == "HookedDeltaM2RNN"
    spec = TraceSpec(group="S3", action_set="swaps", actions=(3, 6), spacing=2)
    tokenizer = make_tokenizer("statement", "S3", action_set="swaps")
    batch = make_batch(spec, tokenizer, 3, seed=0)
    m2rnn = models.build("m2rnn", **{**TINY, "vocab_size": tokenizer.vocab_size})
    cap = capture(m2rnn, batch, names=("state", "gate", "resid"))
    assert cap["blocks.1.attn.hook_state"].shape == (len(cap), 2, 8, 8)
    assert cap["blocks.0.attn.hook_gate"].shape == (len(cap), 2)
    hybrid = models.build("deltanet_m2rnn", **{**TINY, "vocab_size": tokenizer.vocab_size})
    cap = capture(hybrid, batch, names=("beta",))
    assert cap.names == ["blocks.0.attn.hook_beta"]  # the DeltaNet layer only


def test_a_bad_config_is_one_sentence():
    with pytest.raises(DeltalensError, match="nonlinear_every"):
        models.build("deltanet_m2rnn", nonlinear_every=0)
    with pytest.raises(DeltalensError, match="unknown m2rnn config key"):
        models.build("m2rnn", allow_neg_eigval=True)
