"""fla's `kda` family (KDAForCausalLM: Kimi Delta Attention, a decay per key channel) as HookedKDA: state dicts
and config.json both ways, logits and gradients against fla's own model, our recurrence against fla's naive
one, hooks, edits, census, and loading by Hub id offline.

fla's KDA layer runs only on Triton; here fla's model code runs on a CPU with its two KDA entry points
(`chunk_kda`, `fused_recurrent_kda`) swapped for fla's torch references (`naive_recurrent_kda`, `naive_kda_gate`,
`naive_kda_lowerbound_gate`), and its norms, conv and SwiGLU as in tests/fla_on_cpu.py. None of our code runs
on the fla side.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import shutil
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from fla.models import KDAConfig, KDAForCausalLM
from fla.ops.kda.naive import naive_chunk_kda, naive_recurrent_kda
from fla_attention_on_cpu import fla_attention_on_cpu
from fla_on_cpu import fla_modules_on_cpu, l2, randomise
from hub_cache import put_in_hub_cache

import deltalens as dl
from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.models.io.configs import KDASettings
from deltalens.models.lm.kda import HookedKDA
from deltalens.models.ops.kda import chunk_kda, kda_recurrence
from deltalens.models.registry import family

BASE = dict(hidden_size=32, num_hidden_layers=2, vocab_size=29, head_dim=8, num_heads=2)
CONFIGS = {
    "default": {},
    "gva+neg": dict(num_v_heads=4, expand_v=2.0, allow_neg_eigval=True),
    "lower-bound+safe": dict(safe_gate=True, lower_bound=-5.0, allow_neg_eigval=True),
    "noconv+unfused+tied": dict(
        use_short_conv=False, fuse_norm=False, fuse_swiglu=False, tie_word_embeddings=True, conv_size=2
    ),
    "hybrid": dict(num_hidden_layers=3, attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2}),
}
TOKENIZER = Path(__file__).resolve().parents[2] / "checkpoints" / "s3-deltanet-bpe"


def fla_model(name, seed=0, **extra):
    torch.manual_seed(seed)
    with fla_attention_on_cpu():  # fla builds a hybrid's Attention only when flash-attn "imports"
        return randomise(KDAForCausalLM(KDAConfig(**{**BASE, **CONFIGS[name], **extra})), seed)


def fla_fields(config_cls):
    return [p for p in inspect.signature(config_cls.__init__).parameters if p not in ("self", "kwargs")]


def _fla_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None, output_final_state=False,
             use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
             allow_neg_eigval=False, lower_bound=None, state_v_first=False, **unused):  # fmt: skip
    """fla's chunk_kda / fused_recurrent_kda as fla's torch references (same arguments, same results)."""
    from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate

    if use_qk_l2norm_in_kernel:
        q, k = l2(q), l2(k)
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if use_gate_in_kernel:
        gate = naive_kda_gate if lower_bound is None else lambda *a: naive_kda_lowerbound_gate(*a, lower_bound)
        g = gate(g, A_log, dt_bias)
    if initial_state is not None and state_v_first:
        initial_state = initial_state.transpose(-1, -2)
    o, S = naive_recurrent_kda(q, k, v, g, beta, scale, initial_state, output_final_state)
    return o.to(v.dtype), (S.transpose(-1, -2) if S is not None and state_v_first else S)


@contextlib.contextmanager
def fla_runs_on_cpu():
    import fla.layers.kda as kda_layer

    with contextlib.ExitStack() as stack:
        stack.enter_context(fla_modules_on_cpu())
        stack.enter_context(fla_attention_on_cpu())
        for name in ("chunk_kda", "fused_recurrent_kda"):
            stack.enter_context(mock.patch.object(kda_layer, name, _fla_kda))
        yield


def _tokens(T, B=2, vocab=BASE["vocab_size"], seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# ---- the format: state dicts and config.json ---------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_keys_shapes_and_dtypes_equal_fla(name):
    ours = models.build("kda", **{**BASE, **CONFIGS[name]}).state_dict()
    theirs = fla_model(name).state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key


def test_fla_s_default_kda_on_the_meta_device_has_our_tensors_and_count():
    """fla's KDAConfig() (2048 wide, 24 layers) built by fla and by us on the meta device: same names, shapes."""
    with torch.device("meta"):
        theirs = KDAForCausalLM(KDAConfig())
        ours = models.build("kda", **KDASettings.defaults)
    want = {key: tuple(p.shape) for key, p in theirs.state_dict().items()}
    assert {key: tuple(p.shape) for key, p in ours.state_dict().items()} == want
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters()) > 10**9
    assert 0.9 * count <= family("kda").weights(KDAConfig().to_dict()) <= count  # the memory bound, from config


def test_the_fla_free_config_has_kda_config_s_fields_and_defaults():
    params = inspect.signature(KDAConfig.__init__).parameters.values()
    fla_defaults = {p.name: p.default for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}
    ours = dict(KDASettings.defaults)
    # every family's settings carry fuse_linear_cross_entropy; KDAConfig keeps it as an extra attribute
    assert ours.pop("fuse_linear_cross_entropy") is False
    assert ours == fla_defaults
    settings = KDASettings(**BASE, lower_bound=-5, safe_gate=True, num_v_heads=4)
    theirs = KDAConfig(**{k: v for k, v in settings.to_dict().items() if k != "model_type"})
    assert theirs.model_type == settings.model_type == family("kda").model_types[0] == "kda"
    for key in fla_defaults:
        assert getattr(theirs, key) == getattr(settings, key), key


@pytest.mark.parametrize("name", ["gva+neg", "lower-bound+safe", "noconv+unfused+tied"])
def test_save_pretrained_loads_in_fla_and_back(tmp_path, name):
    torch.manual_seed(0)
    ours = models.build("kda", **{**BASE, **CONFIGS[name]})
    ours.save_pretrained(tmp_path, extra_config={"deltalens": {"task": "S3 full"}})
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architectures"] == ["KDAForCausalLM"] and raw["model_type"] == "kda"
    theirs = KDAForCausalLM.from_pretrained(tmp_path)
    assert theirs.config.deltalens == {"task": "S3 full"}
    for key in fla_fields(KDAConfig):
        assert getattr(theirs.config, key) == getattr(ours.config, key), key
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    again = HookedKDA.from_pretrained(tmp_path)
    for key, value in again.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key


@pytest.mark.parametrize("name", ["default", "lower-bound+safe", "hybrid"])
def test_fla_save_pretrained_opens_as_kda(tmp_path, name):
    theirs = fla_model(name)
    theirs.save_pretrained(tmp_path)
    ours = models.load(tmp_path)  # a plain fla folder: no deltalens section
    assert ours.arch == "kda" and isinstance(ours, HookedKDA)
    assert models.read_checkpoint_meta(tmp_path)["architecture"] == "kda"
    for key, value in theirs.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key
    with fla_attention_on_cpu():
        assert type(ours.to_fla()) is KDAForCausalLM


def test_what_deltalens_does_not_open_is_refused_by_name():
    with pytest.raises(DeltalensError, match="safe_gate=True needs lower_bound"):
        models.build("kda", **BASE, safe_gate=True)
    with pytest.raises(DeltalensError, match="below 0"):
        models.build("kda", **BASE, lower_bound=2.0)
    with pytest.raises(DeltalensError, match="lower_bound must be a number"):
        models.build("kda", **BASE, lower_bound="-5")
    with pytest.raises(DeltalensError, match="multiple of num_heads"):
        models.build("kda", **BASE, num_v_heads=3)
    with pytest.raises(DeltalensError, match="unknown kda config key"):
        models.build("kda", **BASE, num_householder=2)
    with pytest.raises(NotImplementedError, match="attnres_block_size"):
        models.build("kda", **BASE, attnres_block_size=2)


# ---- the numbers: fla's model and fla's naive recurrence --------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_gradients_match_fla_model_run_on_its_naive_kda(name):
    theirs = fla_model(name)
    ours = HookedKDA.from_fla(theirs)
    toks = _tokens(80)
    with torch.no_grad(), fla_runs_on_cpu():
        ref_long = theirs(toks, use_cache=False).logits  # fla's "chunk" mode (T > 64)
        ref_short = theirs(toks[:, :30], use_cache=False).logits  # "fused_recurrent" (T <= 64)
    with torch.no_grad():
        got = ours(toks)
    assert ref_long.abs().max() > 1.0  # not a degenerate near-zero comparison
    assert (got - ref_long).abs().max() <= 1e-4
    assert (got[:, :30] - ref_short).abs().max() <= 1e-4

    with fla_runs_on_cpu():
        logits = theirs(toks[:, :40], use_cache=False).logits
        F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), toks[:, 1:40].reshape(-1)).backward()
    ours(toks[:, :40], return_type="loss").backward()
    fla_grads = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        ref = fla_grads[key].grad
        assert ref is not None and p.grad is not None, key
        assert (p.grad - ref).abs().max() <= 1e-4 * max(1.0, ref.abs().max().item()), key

    ours.set_gate_range(None, None, 1.0, 1.0)  # negative control: no forgetting must show up
    with torch.no_grad():
        assert (ours(toks) - ref_long).abs().max() > 1e-3


def _random_kda(B=2, T=37, H=3, K=8, V=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = l2(torch.randn(B, T, H, K, generator=g))
    k = l2(torch.randn(B, T, H, K, generator=g))
    v = torch.randn(B, T, H, V, generator=g)
    beta = 2 * torch.rand(B, T, H, generator=g)  # [0, 2]: negative eigenvalues too
    log_alpha = -F.softplus(torch.randn(B, T, H, K, generator=g) - 1.0)  # per channel, spread over (0, 1)
    S0 = torch.randn(B, H, K, V, generator=g)
    return q, k, v, beta, log_alpha, S0


def kda_errors():
    """Max |ours - fla's naive| (fp32) of o and the final state: the reference and the chunked kernel against
    naive_recurrent_kda (T = 37, chunks of 16, with an initial state), and the chunked kernel against
    naive_chunk_kda (T = 32)."""
    q, k, v, beta, g, S0 = _random_kda()
    o_ref, S_ref = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    o_rec, S_rec, states = kda_recurrence(q, k, v, beta, g, initial_state=S0)
    o_chk, S_chk, _ = chunk_kda(q, k, v, beta, g, initial_state=S0, chunk_size=16)
    q, k, v, beta, g = (x[:, :32] for x in (q, k, v, beta, g))
    o_nc, S_nc = naive_chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True, chunk_size=16)
    o_c2, S_c2, _ = chunk_kda(q, k, v, beta, g, initial_state=S0, chunk_size=16)
    err = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    return {
        "reference vs naive_recurrent_kda": (err(o_rec, o_ref), err(S_rec, S_ref), err(states[:, -1], S_ref)),
        "chunked vs naive_recurrent_kda": (err(o_chk, o_ref), err(S_chk, S_ref)),
        "chunked vs naive_chunk_kda": (err(o_c2, o_nc), err(S_c2, S_nc)),
        "scale": (o_ref.abs().max().item(), S_ref.abs().max().item()),
    }


def test_our_recurrence_equals_fla_naive_kda_in_fp32():
    errors = kda_errors()
    assert min(errors["scale"]) > 1.0  # values of order one: the bound below is not vacuous
    for what, values in errors.items():
        if what != "scale":
            assert max(values) <= 1e-5, (what, values)


def test_every_layer_s_hooks_replay_fla_naive_kda_and_an_edit_propagates_exactly():
    ours = HookedKDA.from_fla(fla_model("gva+neg"))
    toks = _tokens(50)
    with torch.no_grad():
        plain, cache = ours.run_with_cache(toks)
    for layer in range(ours.cfg.n_layers):
        q, k, v, beta, alpha = (cache[name, layer] for name in ("q", "k", "v", "beta", "gate"))
        assert q.shape == (2, 50, 4, 8) and alpha.shape == (2, 50, 4, 8) and v.shape == (2, 50, 4, 16)
        assert alpha.std(-1).max() > 1e-3 and beta.max() > 1.0  # per-channel decay; beta beyond 1
        z, S = naive_recurrent_kda(q, k, v, alpha.log(), beta, output_final_state=True)
        assert (z - cache["z", layer]).abs().max() <= 1e-5
        assert (S - cache["state", layer][:, -1]).abs().max() <= 1e-5

    layer, at = 1, 20
    edit = lambda S: -2.0 * S + 0.1  # noqa: E731
    q, k, v, beta, alpha = (cache[name, layer] for name in ("q", "k", "v", "beta", "gate"))
    with torch.no_grad():
        with ours.state_edit(layer, lambda t, S: S):  # the token-by-token reference path, no edit
            unedited = ours(toks)
        with ours.state_edit(layer, lambda t, S: edit(S) if t == at else S):
            edited, edited_cache = ours.run_with_cache(toks)

        def hook(states, hook):  # the same edit through hook_state: the replay path
            states = states.clone()
            states[:, at] = edit(states[:, at])
            return states

        hooked = ours.run_with_hooks(toks, fwd_hooks=[(f"blocks.{layer}.attn.hook_state", hook)])
    # fla's naive recurrence up to the edit, the edit, then fla's naive recurrence from the edited state
    cut = lambda x, a, b: x[:, a:b]  # noqa: E731
    z0, S_at = naive_recurrent_kda(*(cut(x, 0, at + 1) for x in (q, k, v, alpha.log(), beta)), output_final_state=True)
    z1, _ = naive_recurrent_kda(*(cut(x, at + 1, None) for x in (q, k, v)), cut(alpha.log(), at + 1, None),
                                cut(beta, at + 1, None), initial_state=edit(S_at))  # fmt: skip
    want = torch.cat([z0[:, :at], torch.einsum("bhkv,bhk->bhv", edit(S_at), q[:, at] * 8**-0.5)[:, None], z1], 1)
    assert (edited_cache["z", layer] - want).abs().max() <= 1e-5
    assert torch.equal(edited[:, :at], unedited[:, :at])  # nothing before the edit moves
    assert (unedited - plain).abs().max() <= 1e-5 and (edited[:, at:] - plain[:, at:]).abs().amax() > 1e-3
    assert (hooked - edited).abs().max() <= 1e-5


# ---- the workbench: hooks, interventions, census, effective attention, chunks --------------------------


def test_the_hooks_are_gated_deltanet_s_names_with_the_gate_per_key_channel():
    ours = randomise(models.build("kda", **BASE, allow_neg_eigval=True))  # weights that move the output
    gdn = models.build("gated_deltanet", **BASE)
    assert set(ours.hook_dict) == set(gdn.hook_dict)
    assert family("kda").act_names == family("gated_deltanet").act_names
    toks = _tokens(12)
    ones = lambda alpha, hook: torch.ones_like(alpha)  # noqa: E731  no forgetting in any channel
    with torch.no_grad():
        _, cache = ours.run_with_cache(toks)
        with ours.gate_range(0, None, 1.0, 1.0):
            _, clamped = ours.run_with_cache(toks)
        ours.add_hook("blocks.0.attn.hook_gate", ones)
        try:
            _, hooked_cache = ours.run_with_cache(toks)
        finally:
            ours.reset_hooks()
    assert cache["gate", 0].shape == (2, 12, 2, 8) and cache["gate", 0].max() < 1
    assert torch.equal(clamped["gate", 0], torch.ones_like(clamped["gate", 0]))
    assert (clamped["z", 0] - cache["z", 0]).abs().max() > 1e-4
    assert (hooked_cache["z", 0] - clamped["z", 0]).abs().max() <= 1e-6  # the hook's edit reached the recurrence


def test_census_effective_attention_and_chunks_run_on_it():
    ours = HookedKDA.from_fla(fla_model("gva+neg"))
    toks = _tokens(40)
    ours.set_beta_range(0, 0, 1.5, 2.0)  # head 0 of layer 0 reflects on every token, head 1 never
    ours.set_beta_range(0, 1, 0.0, 1.0)
    result = dl.census(ours, toks)
    assert result.architecture == "kda" and len(result.heads) == 2 * 4
    row = lambda l, h: result.heads.set_index(["layer", "head"]).loc[(l, h)]  # noqa: E731
    assert row(0, 0)["beta_gt1"] == 1.0 and row(0, 1)["beta_gt1"] == 0.0
    with torch.no_grad():
        _, cache = ours.run_with_cache(toks)
    alpha, beta, k = cache["gate", 1][:, :, 2], cache["beta", 1][:, :, 2], cache["k", 1][:, :, 2]  # (B, T, d_k)
    eye = torch.eye(8, dtype=torch.float64)
    A = (eye - beta.double()[..., None, None] * k.double()[..., :, None] * k.double()[..., None, :]) @ torch.diag_embed(
        alpha.double()
    )  # the transition matrices themselves
    smallest = torch.linalg.eigvals(A).real.min(-1).values.min().item()  # over the tokens, the decay in
    assert row(1, 2)["min_decayed_eigenvalue"] == pytest.approx(smallest, abs=1e-5)
    factor = (1 - beta.double() * k.double().square().sum(-1)).min().item()  # the delta factor's, no decay
    assert row(1, 2)["min_eigenvalue"] == pytest.approx(factor, abs=1e-5)
    assert result.heads["effective_rank"].between(1, 8).all()

    for layer in range(ours.cfg.n_layers):
        A_eff = dl.effective_attention(ours, toks, layer, cache=cache)  # (B, H, query, key)
        z = cache["z", layer]
        rebuilt = torch.einsum("bhqk,bkhd->bqhd", A_eff, cache["v", layer])
        assert (rebuilt - z).norm() / z.norm() < 1e-5

    from deltalens.models.lm.chunked import forward_in_chunks

    with torch.no_grad():
        assert (forward_in_chunks(ours, _tokens(90), chunk_size=32) - ours(_tokens(90))).abs().max() <= 1e-5


@pytest.fixture(scope="module")
def hub_kda(tmp_path_factory):
    """fla's own KDA model (fla's files alone) with the BPE stand-in's tokenizer, in a Hub-layout cache."""
    root = tmp_path_factory.mktemp("kda-hub")
    theirs = fla_model("gva+neg", vocab_size=json.loads((TOKENIZER / "config.json").read_text())["vocab_size"])
    theirs.save_pretrained(root / "src")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(TOKENIZER / name, root / "src" / name)
    snapshot = put_in_hub_cache(root / "src", root / "hf" / "hub", "org/kda-tiny")
    return root / "hf", snapshot, theirs


def test_loads_by_hub_id_offline_and_generates_fla_s_greedy_tokens(hub_kda, monkeypatch):
    home, snapshot, theirs = hub_kda
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours = dl.load("org/kda-tiny")
    assert isinstance(ours, HookedKDA) and ours.tokenizer is not None
    assert Path(ours.checkpoint.path).resolve() == Path(snapshot).resolve()
    assert isinstance(dl.load(str(snapshot)), HookedKDA)
    for key, value in theirs.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key
    prompt = ours.to_tokens(">>> a = 1\n>>> b = 2\n")
    want = prompt
    with torch.no_grad(), fla_runs_on_cpu():
        for _ in range(6):  # fla's model, greedy, token by token (its KDA has no cache on a CPU)
            want = torch.cat([want, theirs(want, use_cache=False).logits[:, -1:].argmax(-1)], 1)
        assert (ours(want) - theirs(want, use_cache=False).logits).abs().max() <= 1e-4
    assert torch.equal(ours.generate(prompt, max_new_tokens=6, stop_at_newline=False), want)
    assert len(dl.census(ours, prompt).heads) == 2 * 4
