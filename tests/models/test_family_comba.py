"""fla's `comba` family (CombaForCausalLM: a scalar decay plus a low-rank correction) as HookedComba: state dicts
and config.json both ways, logits and gradients against fla's own model, our recurrence against fla's naive
chunked one, hooks, an edit that propagates, and the transition's exact eigenvalue in the census.

fla's Comba layer runs only on Triton; here fla's model code runs on a CPU with its two Comba entry points
(`chunk_comba`, `fused_recurrent_comba`) swapped for fla's torch reference `naive_chunk_comba` (the kernels'
order: the correction reads the state before the decay), and its norms, conv and SwiGLU as in
tests/fla_on_cpu.py. None of our code runs on the fla side.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from fla.models import CombaConfig, CombaForCausalLM
from fla.ops.comba.naive import naive_chunk_comba, naive_recurrent_comba
from fla_attention_on_cpu import fla_attention_on_cpu
from fla_on_cpu import fla_modules_on_cpu, l2, randomise

import deltalens as dl
from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import CombaSettings
from deltalens.models.lm.comba import HookedComba
from deltalens.models.ops.comba import chunk_comba, comba_recurrence
from deltalens.models.registry import family

BASE = dict(hidden_size=32, num_hidden_layers=2, vocab_size=29, head_dim=8, num_heads=2)
CONFIGS = {
    "default": {},
    "gva": dict(num_v_heads=4),  # grouped value heads: value head i reads q/k/p head i // 2, as fla's kernels index
    "no-gate+noconv+unfused+tied": dict(
        use_output_gate=False, use_short_conv=False, fuse_norm=False, fuse_swiglu=False, tie_word_embeddings=True
    ),
    "hybrid": dict(num_hidden_layers=3, attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2}),
}


def fla_model(name, seed=0):
    torch.manual_seed(seed)
    with fla_attention_on_cpu(), pytest.warns(UserWarning, match="correction_factor"):  # fla warns on every build
        return randomise(CombaForCausalLM(CombaConfig(**{**BASE, **CONFIGS[name]})), seed)


def _fla_comba(q, k, v, p, g, beta, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **unused):  # fmt: skip
    """fla's chunk_comba / fused_recurrent_comba as fla's torch reference (same arguments, same results)."""
    if use_qk_l2norm_in_kernel:
        q, k, p = l2(q), l2(k), l2(p)
    if v.shape[2] > q.shape[2]:  # grouped value heads: fla's kernels read q/k/p head i_hv // (HV // H)
        q, k, p = (x.repeat_interleave(v.shape[2] // q.shape[2], dim=2) for x in (q, k, p))
    o, S = naive_chunk_comba(q, k, v, p, g, beta, chunk_size=16, scale=scale, initial_state=initial_state,
                             output_final_state=output_final_state)  # fmt: skip
    return o.to(v.dtype), S


@contextlib.contextmanager
def fla_runs_on_cpu():
    import fla.layers.comba as comba_layer

    with contextlib.ExitStack() as stack:
        stack.enter_context(fla_modules_on_cpu())
        stack.enter_context(fla_attention_on_cpu())
        for name in ("chunk_comba", "fused_recurrent_comba"):
            stack.enter_context(mock.patch.object(comba_layer, name, _fla_comba))
        yield


def _tokens(T, B=2, vocab=BASE["vocab_size"], seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# ---- the format: state dicts and config.json ---------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_keys_shapes_and_dtypes_equal_fla(name):
    ours = models.build("comba", **{**BASE, **CONFIGS[name]}).state_dict()
    theirs = fla_model(name).state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key


def test_fla_s_default_comba_on_the_meta_device_has_our_tensors_and_count():
    with torch.device("meta"), pytest.warns(UserWarning, match="correction_factor"):
        theirs = CombaForCausalLM(CombaConfig())
    with torch.device("meta"):
        ours = models.build("comba", **CombaSettings.defaults)
    want = {key: tuple(p.shape) for key, p in theirs.state_dict().items()}
    assert {key: tuple(p.shape) for key, p in ours.state_dict().items()} == want
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters()) > 10**9
    assert 0.9 * count <= family("comba").weights(CombaConfig().to_dict()) <= count  # the memory bound


def test_the_fla_free_config_has_comba_config_s_fields_and_defaults():
    params = inspect.signature(CombaConfig.__init__).parameters.values()
    fla_defaults = {p.name: p.default for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}
    assert dict(CombaSettings.defaults) == fla_defaults
    settings = CombaSettings(**BASE, use_output_gate=False, correction_factor=0.02)
    theirs = CombaConfig(**{k: v for k, v in settings.to_dict().items() if k != "model_type"})
    assert theirs.model_type == settings.model_type == family("comba").model_types[0] == "comba"
    for key in fla_defaults:
        assert getattr(theirs, key) == getattr(settings, key), key


def test_save_pretrained_loads_in_fla_and_back(tmp_path):
    torch.manual_seed(0)
    ours = models.build("comba", **BASE)
    ours.save_pretrained(tmp_path, extra_config={"deltalens": {"task": "S3 full"}})
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architectures"] == ["CombaForCausalLM"] and raw["model_type"] == "comba"
    with pytest.warns(UserWarning, match="correction_factor"):
        theirs = CombaForCausalLM.from_pretrained(tmp_path)
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    again = HookedComba.from_pretrained(tmp_path)
    for key, value in again.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key


@pytest.mark.parametrize("name", ["default", "hybrid"])
def test_fla_save_pretrained_opens_as_comba(tmp_path, name):
    theirs = fla_model(name)
    theirs.save_pretrained(tmp_path)
    ours = models.load(tmp_path)  # a plain fla folder: no deltalens section
    assert ours.arch == "comba" and isinstance(ours, HookedComba)
    for key, value in theirs.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key


def test_what_deltalens_does_not_open_is_refused_by_name():
    with pytest.raises(DeltalensError, match="multiple of num_heads"):
        models.build("comba", **BASE, num_v_heads=3)
    with pytest.raises(DeltalensError, match="unknown comba config key"):
        models.build("comba", **BASE, allow_neg_eigval=True)
    with pytest.raises(DeltalensError, match="correction_factor must be a number >= 0"):
        models.build("comba", **BASE, correction_factor=-1.0)


# ---- the numbers: fla's model and fla's naive recurrence --------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_gradients_match_fla_model_run_on_its_naive_comba(name):
    theirs = fla_model(name)
    ours = HookedComba.from_fla(theirs)
    toks = _tokens(80)
    with torch.no_grad(), fla_runs_on_cpu():
        ref = theirs(toks, use_cache=False).logits
    with torch.no_grad():
        got = ours(toks)
    assert ref.abs().max() > 1.0  # not a degenerate near-zero comparison
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max()

    with fla_runs_on_cpu():
        logits = theirs(toks[:, :40], use_cache=False).logits
        F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), toks[:, 1:40].reshape(-1)).backward()
    ours(toks[:, :40], return_type="loss").backward()
    fla_grads = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        ref_grad = fla_grads[key].grad
        assert ref_grad is not None and p.grad is not None, key
        assert (p.grad - ref_grad).abs().max() <= 1e-4 * max(1.0, ref_grad.abs().max().item()), key

    ours.set_gate_range(None, None, 1.0, 1.0)  # negative control: no forgetting must show up
    with torch.no_grad():
        assert (ours(toks) - ref).abs().max() > 1e-3


def _random_comba(B=2, T=37, H=3, K=8, V=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, p = (l2(torch.randn(B, T, H, K, generator=g)) for _ in range(3))
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g)
    log_alpha = -F.softplus(torch.randn(B, T, H, generator=g) - 1.0)
    S0 = torch.randn(B, H, K, V, generator=g)
    return q, k, v, p, beta, log_alpha, S0


def test_our_recurrence_equals_fla_naive_chunk_comba_and_not_its_naive_recurrent_one():
    """fla has two references that disagree: naive_chunk_comba follows its kernels (the correction reads S_{t-1}
    before the decay), naive_recurrent_comba decays first. Ours, token by token and chunked, is the first."""
    q, k, v, p, beta, g, S0 = _random_comba()
    o_ref, S_ref = naive_chunk_comba(q, k, v, p, g, beta, chunk_size=16, initial_state=S0, output_final_state=True)
    o_rec, S_rec, states = comba_recurrence(q, k, v, p, beta, g, initial_state=S0)
    o_chk, S_chk, chunk_states = chunk_comba(q, k, v, p, beta, g, initial_state=S0, chunk_size=16, with_states=True)
    assert min(o_ref.abs().max(), S_ref.abs().max()) > 0.5  # values of order one: the bounds are not vacuous
    for o, S in ((o_rec, S_rec), (o_chk, S_chk)):
        assert (o - o_ref).abs().max() <= 1e-5 and (S - S_ref).abs().max() <= 1e-5
    assert (states - chunk_states).abs().max() <= 1e-5 and (states[:, -1] - S_ref).abs().max() <= 1e-5
    o_other, _ = naive_recurrent_comba(q, k, v, p, beta, g, initial_state=S0, output_final_state=True)
    assert (o_other - o_ref).abs().max() > 1e-2


def test_hooks_replay_the_recurrence_and_a_state_edit_propagates_exactly():
    ours = HookedComba.from_fla(fla_model("default"))
    toks = _tokens(50)
    with torch.no_grad():
        plain, cache = ours.run_with_cache(toks)
    for layer in range(ours.cfg.n_layers):
        q, k, v, p, beta, alpha = (cache[name, layer] for name in ("q", "k", "v", "p", "beta", "gate"))
        assert p.shape == q.shape == k.shape == (2, 50, 2, 8) and beta.max() <= 1.0
        cosine = (p * k).sum(-1) / (p.norm(dim=-1) * k.norm(dim=-1))
        assert cosine.min() > 1 - 1e-4  # fla's layer makes p parallel to k (a positive scale, then L2 norm)
        z, S, states = comba_recurrence(q, k, v, p, beta, alpha.log())
        assert (z - cache["z", layer]).abs().max() <= 1e-5
        assert (states - cache["state", layer]).abs().max() <= 1e-5

    layer, at = 1, 20
    edit = lambda S: -2.0 * S + 0.1  # noqa: E731
    with torch.no_grad(), ours.state_edit(layer, lambda t, S: edit(S) if t == at else S):
        edited, edited_cache = ours.run_with_cache(toks)
    q, k, v, p, beta, alpha = (cache[name, layer] for name in ("q", "k", "v", "p", "beta", "gate"))
    want, _, _ = comba_recurrence(q, k, v, p, beta, alpha.log(), edit=lambda t, S: edit(S) if t == at else S)
    assert (edited_cache["z", layer] - want).abs().max() <= 1e-5
    # before the edit only rounding moves (the edit runs token by token, the plain forward chunked); after it, a lot
    assert (edited[:, :at] - plain[:, :at]).abs().max() <= 1e-4 < (edited[:, at:] - plain[:, at:]).abs().max()

    def hook(states, hook):  # the same edit through hook_state: replayed from the edited step
        states = states.clone()
        states[:, at] = edit(states[:, at])
        return states

    with torch.no_grad():
        through_hook = ours.run_with_hooks(toks, fwd_hooks=[(f"blocks.{layer}.attn.hook_state", hook)])
    assert (through_hook - edited).abs().max() <= 1e-4


def test_the_census_eigenvalue_is_the_transition_s_exact_smallest():
    """A Comba transition alpha I - beta k p^T has eigenvalues alpha (d_k - 1 times) and alpha - beta p.k: the
    census's min_decayed_eigenvalue is that exact smallest one (checked against torch.linalg.eigvals of the
    matrix), not alpha (1 - beta), which a Gated DeltaNet's would be."""
    import numpy as np

    ours = HookedComba.from_fla(fla_model("default")).eval()
    toks = _tokens(30)
    result = dl.census(ours, toks)
    with torch.no_grad():
        _, cache = ours.run_with_cache(toks)
    for layer in range(ours.cfg.n_layers):
        k, p, beta, alpha = (cache[name, layer] for name in ("k", "p", "beta", "gate"))
        eye = torch.eye(k.shape[-1])
        A = alpha[..., None, None] * eye - beta[..., None, None] * k[..., :, None] * p[..., None, :]
        eig = torch.linalg.eigvals(A.double())
        assert eig.imag.abs().max() < 1e-6  # real: a scaled identity plus a rank-one term
        smallest = eig.real.amin(-1)  # (B, T, H)
        for head in range(ours.cfg.n_heads):
            row = result.heads.set_index(["layer", "head"]).loc[(layer, head)]
            assert row["min_decayed_eigenvalue"] == pytest.approx(float(smallest[..., head].min()), abs=1e-5)
            assert not np.isnan(row["min_eigenvalue"])


def test_a_long_sequence_in_chunks_equals_the_whole_and_the_householder_tools_refuse_by_name():
    from deltalens.models.lm.chunked import forward_in_chunks

    ours = HookedComba.from_fla(fla_model("default")).eval()
    with torch.no_grad():
        assert (forward_in_chunks(ours, _tokens(90), chunk_size=32) - ours(_tokens(90))).abs().max() <= 1e-5
    for call in (
        lambda: dl.eigenvalue_report(ours, _tokens(20)),
        lambda: dl.effective_attention(ours, _tokens(20), 0, 0),
        lambda: dl.clip_transition(ours, 0, 0),
    ):
        with pytest.raises(DeltalensError, match=r"alpha I - beta k p\^T"):
            call()


def test_bf16_logits_are_as_close_to_fla_s_bf16_model_as_fla_s_bf16_is_to_its_fp32():
    """bf16 parity: ours in bf16 against fla's model in bf16 (its torch reference inside), within twice fla's own
    bf16-vs-fp32 error (both recurrences run in fp32 inside, so only the roundings between them differ)."""
    theirs = fla_model("default")
    toks = _tokens(80)
    with torch.no_grad(), fla_runs_on_cpu():
        fp32 = theirs(toks, use_cache=False).logits
        theirs_bf16 = theirs.to(torch.bfloat16)
        ref = theirs_bf16(toks, use_cache=False).logits.float()
    ours = HookedComba.from_fla(theirs_bf16).eval()
    with torch.no_grad():
        got = ours(toks).float()
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    assert rel(ref, fp32) > 1e-4  # the bf16 model really rounds
    assert rel(got, ref) <= 2 * rel(ref, fp32), (rel(got, ref), rel(ref, fp32))


def test_loads_by_hub_id_offline_and_generates_fla_s_greedy_tokens(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from hub_cache import put_in_hub_cache

    tokenizer = Path(__file__).resolve().parents[2] / "checkpoints" / "s3-deltanet-bpe"
    vocab = json.loads((tokenizer / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    with fla_attention_on_cpu(), pytest.warns(UserWarning, match="correction_factor"):
        theirs = randomise(CombaForCausalLM(CombaConfig(**{**BASE, "vocab_size": vocab})), 0)
    theirs.save_pretrained(tmp_path / "src")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tokenizer / name, tmp_path / "src" / name)
    put_in_hub_cache(tmp_path / "src", tmp_path / "hf" / "hub", "org/comba-tiny")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours = dl.load("org/comba-tiny")
    assert isinstance(ours, HookedComba) and ours.tokenizer is not None
    prompt = ours.to_tokens(">>> a = 1\n>>> b = 2\n")
    want = prompt
    with torch.no_grad(), fla_runs_on_cpu():
        for _ in range(6):  # fla's model, greedy, token by token
            want = torch.cat([want, theirs(want, use_cache=False).logits[:, -1:].argmax(-1)], 1)
    assert torch.equal(ours.generate(prompt, max_new_tokens=6, stop_at_newline=False), want)
    assert len(dl.census(ours, prompt).heads) == 2 * 2
