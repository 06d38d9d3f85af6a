"""KDA on fla's Triton kernels, the CUDA glue on a CPU (tests/fla_on_cpu.py: `emulated_cuda`, fla's chunk_kda /
fused_recurrent_kda replaced by fla's naive_recurrent_kda behind fla's checks).

Which kernel a KDA layer picks on "CUDA" (`select_kda_kernel`), the arguments fla's KDA receives (natural-log
decay per key channel, beta as computed, fp32 states), and that fla's kernels give our chunked torch kernel's
read-out and final state: for fla's `kda` family (models/layers/kda_mixer.py) and for Kimi Linear's layers
(models/production/hooked_kda.py) through transformers' cache. State hooks, edits and replays stay on our
kernels; the plain forward's o comes from fla's (tests/models/test_emulated_cuda.py runs those for `kda` with
the rest of the family).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from fla_on_cpu import emulated_cuda

from deltalens.models.layers.kda_mixer import select_kda_kernel
from deltalens.models.lm.chunked import forward_in_chunks
from deltalens.models.ops.fla_kernels import fla_kda
from deltalens.models.ops.kda import chunk_kda
from deltalens.models.ops.kernel_select import CHUNKED, CHUNKED_STATES, FLA_CHUNK, FLA_RECURRENT
from deltalens.models.production.hooked_kda import HookedKimiDeltaAttention
from tests.conftest import build_tiny


def _inputs(B=2, T=21, H=2, K=8, V=8, seed=0, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g) * 2  # [0, 2]: allow_neg_eigval's range
    decay = -torch.rand(B, T, H, K, generator=g) * 0.5  # natural-log decay per key channel
    h0 = torch.randn(B, H, K, V, generator=g) * 0.3
    return [x.to(dtype).requires_grad_(grad) for x in (q, k, v)] + [x.requires_grad_(grad) for x in (beta, decay, h0)]


# (dtype, gradient wanted, T) -> path: fla's KDA layer's rule (fused recurrent for inference on T <= 64)
# and fla's (chunk kernel for training; the fused recurrent one has no backward)
TABLE = [
    (torch.bfloat16, False, 100, FLA_CHUNK),
    (torch.bfloat16, True, 100, FLA_CHUNK),
    (torch.bfloat16, True, 20, FLA_CHUNK),
    (torch.bfloat16, False, 64, FLA_RECURRENT),
    (torch.float16, False, 100, FLA_CHUNK),
    (torch.float32, False, 100, FLA_RECURRENT),
    (torch.float32, False, 20, FLA_RECURRENT),
    (torch.float32, True, 100, FLA_CHUNK),
]


@pytest.mark.parametrize("dtype, grad, T, path", TABLE)
def test_kernel_choice_on_cuda(dtype, grad, T, path):
    q, k, v, beta, g, h0 = _inputs(T=T, dtype=dtype, grad=grad)
    with emulated_cuda():
        assert select_kda_kernel(q, k, v, beta, g, h0).path == path
        assert select_kda_kernel(q, k, v, beta, g, h0, use_fla=False).path == CHUNKED
        assert select_kda_kernel(q, k, v, beta, g, h0, wants_states=True).path == CHUNKED_STATES
    assert select_kda_kernel(q, k, v, beta, g, h0).path == CHUNKED  # a CPU: our torch kernel
    with pytest.raises(RuntimeError, match="use_fla=True needs CUDA"):
        select_kda_kernel(q, k, v, beta, g, h0, use_fla=True)


@pytest.mark.parametrize("dtype, recurrent", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False)])
def test_fla_kda_matches_the_torch_kernel_with_its_final_state(dtype, recurrent):
    q, k, v, beta, g, h0 = _inputs(T=37, dtype=dtype)
    o_ref, S_ref, _ = chunk_kda(q, k, v, beta, g, initial_state=h0, chunk_size=16)
    with emulated_cuda() as calls:
        o, S = fla_kda(q, k, v, beta, g, q.shape[-1] ** -0.5, h0, True, chunk_size=16, recurrent=recurrent)
    assert calls.names() == ["fused_recurrent_kda" if recurrent else "chunk_kda"]
    assert o.dtype == dtype and S.dtype == torch.float32 and calls[0][1] == dtype
    tol = 1e-5 if dtype == torch.float32 else 3e-2  # bf16: q, k, v, beta rounded before the call
    assert (o.float() - o_ref.float()).abs().max() <= tol and (S - S_ref).abs().max() <= tol


@pytest.mark.parametrize("dtype, T, kernel", [(torch.float32, 23, FLA_RECURRENT), (torch.bfloat16, 80, FLA_CHUNK)])
def test_kda_model_on_fla_matches_cpu(dtype, T, kernel):
    model = build_tiny("kda")
    model.set_beta_range(0, 0, 0.0, 2.0)  # an intervened range reaches fla's beta
    toks = torch.randint(0, 23, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(toks)
        m = copy.deepcopy(model).to(dtype)
        with emulated_cuda() as calls:
            got = m(toks)
            kernels = {mixer.last_kernel.path for mixer in m.blocks.modules() if getattr(mixer, "last_kernel", None)}
            chunks = forward_in_chunks(m, toks, chunk_size=T // 2 + 1)  # the final state carried between calls
    assert kernels == {kernel} and {dtype} == {d for _, d, _ in calls}
    tol = 1e-4 if dtype == torch.float32 else 0.15
    assert (got.float() - ref).abs().max() <= tol and (chunks.float() - ref).abs().max() <= tol


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    """tests/production_standin.py's tiny Kimi Linear (KDA on layers 0, 1, 3), opened offline."""
    from production_standin import put_standin

    import deltalens as dl

    home = tmp_path_factory.mktemp("hf")
    repo, _ = put_standin("kimi_linear", home / "hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(home))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        return dl.load(repo)


def test_kimi_linear_forward_and_cache_on_fla_match_cpu(kimi):
    vocab = kimi.hf.config.vocab_size
    toks = torch.randint(0, vocab, (2, 21), generator=torch.Generator().manual_seed(3))

    def run():  # logits, a prefill into transformers' cache, its KDA states, one decode step from it
        plain = kimi(toks)
        out = kimi.hf(toks[:, :-1], use_cache=True)
        states = [out.past_key_values.get_recurrent_state(i, state_idx=0) for i in kimi.delta_layers]
        step = kimi.hf(toks[:, -1:], past_key_values=out.past_key_values, use_cache=True).logits
        return plain, torch.stack(states), step

    with torch.no_grad():
        ref = run()
        with emulated_cuda() as calls:
            got = run()
    layers = [m for m in kimi.hf.modules() if isinstance(m, HookedKimiDeltaAttention)]
    assert len(layers) == len(kimi.delta_layers)
    assert {m.last_kernel.path for m in layers} == {FLA_RECURRENT}  # fp32, T <= 64, no gradient
    assert calls.names() == ["fused_recurrent_kda"] * 3 * len(layers)  # plain, prefill, one decode step
    assert got[1].dtype == torch.float32
    for want, have in zip(ref, got):
        assert (have - want).abs().max() <= 1e-4
