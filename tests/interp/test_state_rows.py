"""A capture that keeps S_t at some positions writes only those rows: the C kernel's row slots, and a
capture of the reveal positions that never allocates the layer's (B, T, H, d_k, d_v) states."""

import pytest
import torch
from handset import swap_model
from torch.utils._python_dispatch import TorchDispatchMode

from deltalens.interp.capture import capture
from deltalens.interp.interventions import rescale_beta
from deltalens.models.ops.delta_rule_native import native_delta_rule_with_states
from deltalens.tasks import TokenKind, TraceSpec
from deltalens.tasks.dataset import make_batch


def _inputs(B=3, T=10, H=2, K=8, V=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (
        torch.randn(B, T, H, K, generator=g),
        torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g), dim=-1),
    )
    v, beta = torch.randn(B, T, H, V, generator=g), 2 * torch.rand(B, T, H, generator=g)  # fmt: skip
    return q, k, v, beta


@pytest.mark.parametrize("stride, gated", [(1, False), (1, True), (2, False)])
def test_the_c_kernel_writes_only_the_named_rows(stride, gated):
    q, k, v, beta = _inputs()
    alpha = torch.rand(3, 10, 2) if gated else None
    with torch.no_grad():
        o, S, full = native_delta_rule_with_states(q, k, v, beta, None, alpha=alpha, stride=stride)
        b = torch.tensor([2, 0, 0, 1])
        t = torch.tensor([4, 0, 3, 4]) // stride
        o_rows, S_rows, rows = native_delta_rule_with_states(
            q, k, v, beta, None, alpha=alpha, stride=stride, rows=(b, t)
        )
    assert rows.shape == (4, 2, 8, 8)
    assert torch.equal(rows, full[b, t])  # the same arithmetic, copied out at other addresses
    assert torch.equal(o_rows, o) and torch.equal(S_rows, S)
    with pytest.raises(ValueError, match="each"):
        native_delta_rule_with_states(q, k, v, beta, None, rows=(torch.tensor([0, 0]), torch.tensor([1, 1])))


class _Shapes(TorchDispatchMode):
    """Every tensor shape an op produced."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.shapes.append(tuple(x.shape))
        return out


@pytest.fixture(scope="module")
def model_and_batch():
    hand = swap_model()
    batch = make_batch(TraceSpec(group="S3", action_set="swaps", actions=(6, 14), spacing=3), hand.tokenizer, 5, seed=1)
    return hand.model, batch


def test_a_reveal_capture_never_builds_every_position_s_state(model_and_batch):
    model, batch = model_and_batch
    B, T = batch["tokens"].shape
    H, K, V = model.cfg.n_heads, model.cfg.d_k, model.cfg.d_v
    recorder = _Shapes()
    with recorder:
        kept = capture(model, batch, names="state", layers=[1], kinds=TokenKind.REVEAL)
    full_states = [s for s in recorder.shapes if len(s) == 5 and s[1:] == (T, H, K, V)]
    assert full_states == []
    assert 0 < len(kept) < int(batch["lengths"].sum())
    everything = capture(model, batch, names="state", layers=[1])  # the reference: every position, then rows
    rows = everything.labels["kind"] == int(TokenKind.REVEAL)
    assert torch.allclose(kept["blocks.1.attn.hook_state"], everything["blocks.1.attn.hook_state"][rows], atol=1e-6)
    assert model.blocks[1].attn.state_tap is None  # the tap is removed after the capture


def test_the_tapped_capture_keeps_its_logits_and_follows_interventions(model_and_batch):
    model, batch = model_and_batch
    names = ("state", "beta")
    plain = capture(model, batch, names=names, kinds=TokenKind.REVEAL, with_logits=True)
    with torch.no_grad():
        reference = model(batch["tokens"])
    trace, position = plain.labels["trace"], plain.labels["position"]
    assert torch.allclose(plain.logits, reference[trace, position], atol=1e-5)
    # an edit upstream of the state (beta of the same layer) changes the kept rows through the tap
    edit = rescale_beta(model, 1, None, scale=0.5)
    edited = capture(model, batch, names=names, kinds=TokenKind.REVEAL, hooks=list(edit))
    assert not torch.allclose(edited["blocks.1.attn.hook_state"], plain["blocks.1.attn.hook_state"])
    # a hook on hook_state itself: the kept rows are the states it returned (what o read)
    zeroed = capture(
        model, batch, names=names, kinds=TokenKind.REVEAL, hooks=[("blocks.1.attn.hook_state", lambda s, hook: s * 0)]
    )
    assert not zeroed["blocks.1.attn.hook_state"].any()
    assert torch.equal(zeroed["blocks.0.attn.hook_state"], plain["blocks.0.attn.hook_state"])


@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet", "deltaproduct"])
def test_every_delta_rule_family_keeps_only_the_tapped_rows(arch):
    from tests.conftest import build_tiny

    model = build_tiny(arch)
    tokens = torch.randint(1, 23, (3, 12), generator=torch.Generator().manual_seed(2))
    batch = {"tokens": tokens, "lengths": torch.tensor([12, 9, 12])}
    positions = torch.zeros(3, 12, dtype=torch.bool)
    positions[:, 3::4] = True
    recorder = _Shapes()
    with recorder:
        kept = capture(model, batch, names="state", positions=positions)
    H, K, V = model.cfg.n_heads, model.cfg.d_k, model.cfg.d_v
    assert [s for s in recorder.shapes if len(s) == 5 and s[2:] == (H, K, V) and s[1] >= 9] == []
    everything = capture(model, batch, names="state")
    rows = positions[everything.labels["trace"], everything.labels["position"]]
    for layer in range(model.cfg.n_layers):
        name = f"blocks.{layer}.attn.hook_state"
        assert torch.allclose(kept[name], everything[name][rows], atol=1e-6), name
