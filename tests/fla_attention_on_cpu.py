"""fla's softmax-attention layer (`fla.layers.attn.Attention`, a hybrid's `attn` layers) on a CPU.

fla builds that layer only when flash-attn imports (its __init__ raises ImportError otherwise) and
runs its rotary embedding as a Triton kernel. For the duration of `fla_attention_on_cpu()`:

* `fla.layers.attn.flash_attn_func` is a torch stand-in with flash-attn's contract: q (B, T, H, D),
  k and v (B, T, H_kv, D) with H a multiple of H_kv, scale 1/sqrt(D), `causal=True`, and
  `window_size=(left, right)`: query i reads keys j with i - left <= j <= i + right (-1: unbounded),
  and with causal also j <= i;
* fla's `rotary_embedding` is fla's own torch reference `rotary_embedding_ref` on the rows of its
  cos/sin tables for these positions (offset 0, no packed sequences).

None of deltalens's code runs on the fla side.
"""

import contextlib
from unittest import mock

import torch


def flash_attn_func_ref(q, k, v, causal=False, window_size=(-1, -1), softmax_scale=None, **unused):
    B, T, H, D = q.shape
    groups = H // k.shape[2]
    k, v = k.repeat_interleave(groups, dim=2), v.repeat_interleave(groups, dim=2)
    scale = D**-0.5 if softmax_scale is None else softmax_scale
    scores = torch.einsum("bihd,bjhd->bhij", q.float(), k.float()) * scale
    i = torch.arange(T)[:, None]
    j = torch.arange(k.shape[1])[None, :]
    ok = torch.ones(T, k.shape[1], dtype=torch.bool)
    left, right = window_size
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    if causal:
        ok &= j <= i
    weights = torch.softmax(scores.masked_fill(~ok, float("-inf")), dim=-1)
    return torch.einsum("bhij,bjhd->bihd", weights, v.float()).to(q.dtype)


@contextlib.contextmanager
def fla_attention_on_cpu():
    import fla.layers.attn as fla_attn
    import fla.modules.rotary.ops as fla_rotary

    def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, **unused):
        assert seqlen_offsets == 0 and cu_seqlens is None, "the stand-in covers whole sequences from position 0"
        T = x.shape[1]
        return fla_rotary.rotary_embedding_ref(x, cos[:T], sin[:T], interleaved)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(fla_attn, "flash_attn_func", flash_attn_func_ref))
        stack.enter_context(mock.patch.object(fla_rotary, "rotary_embedding", rotary_embedding))
        yield
