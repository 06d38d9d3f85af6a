"""The value-gated DeltaNet (models/lm/value_gated_deltanet.py): every kernel path against a loop written
here, S_t replayed from the hooks, a state edit that propagates, an edited gate, save / load, training."""

import pytest
import torch

from deltalens import models
from deltalens.models.layers.value_gated_mixer import ValueGatedDeltaNetMixer
from deltalens.models.ops.value_gated_delta_rule import (
    chunk_value_gated_delta_rule,
    value_gated_delta_rule_recurrence,
)

TINY = dict(vocab_size=24, hidden_size=16, num_heads=2)


def _tokens(T=11, B=2, seed=0):
    return torch.randint(3, 24, (B, T), generator=torch.Generator().manual_seed(seed))


def _loop(q, k, v, beta, gate, S0=None):
    """S_t = (I - beta k k^T) S_{t-1} Diag(gate) + beta k v^T, o_t = S_t^T q_t / sqrt(d_k): one sequence, head
    and step at a time, as matrices."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    o, states = torch.zeros(B, T, H, V), torch.zeros(B, T, H, K, V)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(K, V) if S0 is None else S0[b, h].clone()
            for t in range(T):
                kt = k[b, t, h]
                S = (torch.eye(K) - beta[b, t, h] * torch.outer(kt, kt)) @ S @ torch.diag(gate[b, t, h])
                S = S + beta[b, t, h] * torch.outer(kt, v[b, t, h])
                states[b, t, h] = S
                o[b, t, h] = S.T @ q[b, t, h] / K**0.5
    return o, states


def _inputs(B=2, T=13, H=3, K=4, V=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    beta = 2 * torch.rand(B, T, H, generator=gen)
    gate = torch.rand(B, T, H, V, generator=gen) * 0.9 + 0.05  # far from 1: the gate is at work
    return q, k, v, beta, gate


def _perturbed(model, seed=0):
    """Gates far from their start (~0.993), so the tests see the value side at work."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mixer in model.modules():
            if isinstance(mixer, ValueGatedDeltaNetMixer):
                mixer.vg_bias.copy_(torch.randn(mixer.vg_bias.shape, generator=gen))
                mixer.vg_proj.weight.mul_(20)
    return model.eval()


def test_the_reference_is_the_formula():
    q, k, v, beta, gate = _inputs()
    S0 = torch.randn(2, 3, 4, 5)
    o, final, states = value_gated_delta_rule_recurrence(
        q, k, v, beta, gate.log(), initial_state=S0, output_final_state=True
    )
    o_loop, states_loop = _loop(q, k, v, beta, gate, S0)
    torch.testing.assert_close(states, states_loop, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o, o_loop, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, states_loop[:, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("native", [True, False], ids=["c", "chunked"])
@pytest.mark.parametrize("chunk", [4, 64])
def test_the_fast_paths_equal_the_reference(native, chunk):
    from deltalens.models.ops.native import library

    if native and library("delta_rule") is None:
        pytest.skip("no C compiler: the C kernel does not build here")
    q, k, v, beta, gate = _inputs(seed=1)
    g = gate.log()
    S0 = torch.randn(2, 3, 4, 5)
    o_ref, final_ref, states_ref = value_gated_delta_rule_recurrence(
        q, k, v, beta, g, initial_state=S0, output_final_state=True
    )
    from deltalens.models.ops.kernel_select import select_kernel_for
    from deltalens.models.ops.value_gated_delta_rule import spread

    kernel = select_kernel_for(*spread(q, k, v, beta, g, S0), native=native, use_fla=False)
    with torch.no_grad():
        o, final, _ = chunk_value_gated_delta_rule(
            q, k, v, beta, g, initial_state=S0, output_final_state=True, chunk_size=chunk, kernel=kernel
        )
        states_kernel = select_kernel_for(
            *spread(q, k, v, beta, g, S0), native=native, use_fla=False, wants_states=True
        )
        o2, _, states = chunk_value_gated_delta_rule(
            q, k, v, beta, g, initial_state=S0, chunk_size=chunk, with_states=True, kernel=states_kernel
        )
        rows = (torch.tensor([0, 1, 1]), torch.tensor([3, 0, 12]))
        _, _, kept = chunk_value_gated_delta_rule(
            q, k, v, beta, g, initial_state=S0, chunk_size=chunk, with_states=True, kernel=states_kernel, rows=rows
        )
    assert kernel.path == ("c" if native else "chunked")
    for got, want in ((o, o_ref), (final, final_ref), (o2, o_ref), (states, states_ref), (kept, states_ref[rows])):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("native", [True, False], ids=["c", "chunked"])
def test_gradients_of_the_fast_paths_equal_the_reference(native):
    """Through o and the final state, to every input and the initial state: the C kernel's per-column decay
    backward and the chunked form's, against autograd through the reference."""
    from deltalens.models.ops.kernel_select import select_kernel_for
    from deltalens.models.ops.native import library

    if native and library("delta_rule") is None:
        pytest.skip("no C compiler: the C kernel does not build here")
    q, k, v, beta, gate = _inputs(seed=2)
    S0 = torch.randn(2, 3, 4, 5)
    inputs = [x.clone().requires_grad_() for x in (q, k, v, beta, gate.log(), S0)]
    twins = [x.detach().clone().requires_grad_() for x in inputs]
    weights, final_weights = torch.randn(2, 13, 3, 5), torch.randn(2, 3, 4, 5)
    kernel = select_kernel_for(*inputs, native=native, use_fla=False)
    o, final, _ = chunk_value_gated_delta_rule(
        *inputs[:5], initial_state=inputs[5], output_final_state=True, kernel=kernel
    )
    ((o * weights).sum() + (final * final_weights).sum()).backward()
    o_ref, final_ref, _ = value_gated_delta_rule_recurrence(*twins[:5], initial_state=twins[5], output_final_state=True)
    ((o_ref * weights).sum() + (final_ref * final_weights).sum()).backward()
    assert kernel.path == ("c" if native else "chunked")
    for fast, ref in zip(inputs, twins):
        torch.testing.assert_close(fast.grad, ref.grad, atol=1e-4, rtol=1e-4)


def test_hook_state_is_the_formula_on_the_hooked_inputs_and_replays_hook_z():
    model = _perturbed(models.build("value_gated_deltanet", num_hidden_layers=1, **TINY))
    _, cache = model.run_with_cache(_tokens())
    hook = "blocks.0.attn.hook_"
    q, k, v, beta, gate = (cache[hook + name] for name in ("q", "k", "v", "beta", "vgate"))
    assert gate.shape == v.shape and 0 < gate.min() and gate.max() < 1 and gate.std() > 0.1
    o, S = _loop(q, k, v, beta, gate)
    torch.testing.assert_close(cache[hook + "state"], S, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache[hook + "z"], o, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("in_place", [False, True])
def test_an_edited_state_is_what_the_layer_reads_and_continues_from(in_place):
    model = _perturbed(models.build("value_gated_deltanet", num_hidden_layers=1, **TINY))
    tokens, t0 = _tokens(), 4
    _, clean = model.run_with_cache(tokens)
    new = torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(3))

    def replace(states, hook):
        target = states if in_place else states.clone()
        target[:, t0] = new
        return None if in_place else target

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_state", replace)]):
        _, edited = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_z")
    z, z_clean = edited["blocks.0.attn.hook_z"], clean["blocks.0.attn.hook_z"]
    torch.testing.assert_close(z[:, :t0], z_clean[:, :t0], atol=1e-6, rtol=1e-5)  # read out of the states
    hook = "blocks.0.attn.hook_"
    q, k, v, beta, gate = (clean[hook + name][:, t0 + 1 :] for name in ("q", "k", "v", "beta", "vgate"))
    o, _ = _loop(q, k, v, beta, gate, S0=new)
    torch.testing.assert_close(z[:, t0 + 1 :], o, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(z[:, t0 + 1 :], z_clean[:, t0 + 1 :], atol=1e-3)


def test_a_state_edit_runs_the_reference_and_an_edited_gate_changes_what_follows():
    model = _perturbed(models.build("value_gated_deltanet", num_hidden_layers=1, **TINY))
    tokens = _tokens()
    plain = model(tokens)
    with model.state_edit(0, lambda t, S: S):
        same = model(tokens)
    assert model.blocks[0].attn.last_kernel.path == "reference"
    torch.testing.assert_close(same, plain, atol=1e-5, rtol=1e-5)

    def close_channel(gate, hook):
        gate = gate.clone()
        gate[:, 5:, :, 0] = 0.0  # forget value channel 0 from token 5 on
        return gate

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_vgate", close_channel)]):
        _, cache = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_state")
    states = cache["blocks.0.attn.hook_state"]
    # after a zero gate the column holds only the new write, beta k v[0]; the others keep their past
    _, clean = model.run_with_cache(tokens)
    k, v, beta = (clean["blocks.0.attn.hook_" + n] for n in ("k", "v", "beta"))
    write = beta[:, 5, :, None] * k[:, 5] * v[:, 5, :, 0:1]
    torch.testing.assert_close(states[:, 5, :, :, 0], write, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(states[:, 5, :, :, 1:], torch.zeros_like(states[:, 5, :, :, 1:]))


def test_save_load_and_a_fresh_model_start_near_deltanet(tmp_path):
    model = _perturbed(models.build("value_gated_deltanet", **TINY, value_gate_bias=3.0))
    path = models.save(model, tmp_path / "ckpt")
    loaded = models.load(path)
    assert type(loaded) is type(model) and loaded.model_config["value_gate_bias"] == 3.0
    tokens = _tokens(T=12)
    torch.testing.assert_close(loaded(tokens), model(tokens), atol=0, rtol=0)
    fresh = models.build("value_gated_deltanet", **TINY)
    _, cache = fresh.run_with_cache(tokens, names_filter="blocks.0.attn.hook_vgate")
    assert cache["blocks.0.attn.hook_vgate"].min() > 0.98  # sigmoid(5): about a plain DeltaNet


def test_a_few_training_steps_lower_the_loss():
    torch.manual_seed(0)
    model = models.build("value_gated_deltanet", **TINY)
    tokens = _tokens(T=12, B=4, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = model(tokens, return_type="loss")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    assert model.blocks[0].attn.vg_proj.weight.grad.abs().sum() > 0


def test_the_decay_gate_tools_point_at_the_value_gate():
    """capture('gate') and clamp_gate refuse in one sentence that names hook_vgate, which a capture of 'vgate' gives."""
    import deltalens as dl
    from deltalens.core.errors import DeltalensError

    model = models.build("value_gated_deltanet", vocab_size=32, hidden_size=32, num_hidden_layers=1, num_heads=2)
    toks = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(0))
    for refused in (lambda: dl.capture(model, toks, names=["gate"]), lambda: dl.clamp_gate(model, 0, 0)):
        with pytest.raises(DeltalensError, match="hook_vgate") as error:
            refused()
        assert "\n" not in str(error.value)
    gate = dl.capture(model, toks, names=["vgate"])["blocks.0.attn.hook_vgate"]
    assert gate.shape[:2] == (6, 2) and bool(((gate > 0) & (gate < 1)).all())  # (positions, heads, d_v)


def test_tools_that_read_a_head_through_its_transitions_alone_refuse_the_value_gate():
    """Effective attention and the state adjoint leave the value gate out (hook_z rebuilt to a relative error of
    0.05 at the gate's initial 0.99, 1.8 at 0.5): refused in one sentence; attribution keeps z and beta."""
    import deltalens as dl
    from deltalens.core.errors import DeltalensError

    checkpoint = dl.open_checkpoint("s3-deltanet-neg-statement")
    model = dl.build("value_gated_deltanet", vocab_size=32, hidden_size=24, num_hidden_layers=1, num_heads=3)
    clean, corrupt = dl.trace_pair(model, 4, checkpoint=checkpoint)
    with pytest.raises(DeltalensError, match="value gate that decays each value column"):
        dl.effective_attention(model, clean["tokens"], 0, 0)
    with pytest.raises(DeltalensError, match="value gate that decays each value column"):
        dl.attribution_patching(model, clean, corrupt, dl.reveal_metric(clean, corrupt), sites=("state",))
    assert dl.head_attribution(model, clean, corrupt).sites == ("z", "beta")
