"""fla's own model code on a CPU: its Triton modules swapped for torch stand-ins (shared by the fla
compatibility tests). fla's torch references where fla has them (`rms_norm_ref`, the gated
`rms_norm_ref`), two-line torch equivalents of the Triton causal conv and SwiGLU otherwise; none of
deltalens's code runs on the fla side. The delta-rule kernels are swapped per model by each test.

Also the emulated-CUDA mode (`emulated_cuda`): fla's Triton delta-rule entry points replaced by fla's own
naive torch recurrences behind fla's argument checks (`fla_kernels_on_cpu`), and deltalens's dispatch
told that every tensor is on CUDA, so the whole CUDA glue (argument binding, dtypes, layouts, renorm,
gated, product, hooks, edits, capture, training) runs on a CPU (tests/models/test_emulated_cuda.py)."""

import contextlib
from unittest import mock

import torch
import torch.nn as nn
import torch.nn.functional as F


def l2(x):
    """fla's l2norm (eps inside the square root)."""
    return x / torch.sqrt(x.float().square().sum(-1, keepdim=True) + 1e-6)


def randomise(model, seed=0):
    """Weights large enough that every part of a layer moves the output (fla's init is tiny)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias")):  # the decay: alpha = exp(-exp(A_log) softplus(.)) not ~0
                p.copy_(torch.randn_like(p) * 0.5 - 1.0)
            elif p.ndim == 1:  # norm weights
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.25)
    return model.eval()


@contextlib.contextmanager
def fla_modules_on_cpu():
    """fla's norms, short convolution and SwiGLU as torch code, for the duration of the block."""
    import fla.modules.mlp as fla_mlp
    from fla.modules import FusedRMSNormGated, GroupNorm, LayerNorm, RMSNorm, ShortConvolution
    from fla.modules.norm.layernorm import group_norm_ref, layer_norm_ref, rms_norm_ref
    from fla.modules.norm.layernorm_gated import rms_norm_ref as gated_rms_norm_ref

    def rms_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        out = rms_norm_ref(x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm, upcast=True)
        if prenorm:  # (normalised, residual): the residual in fp32 only when asked
            return out[0].to(x.dtype), out[1] if residual_in_fp32 else out[1].to(x.dtype)
        return out.to(x.dtype)  # fla's Triton norm returns the input's dtype (the reference, fp32 when upcast)

    def layer_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):  # RWKV-7's norms
        out = layer_norm_ref(x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm, upcast=True)
        if prenorm:
            return out[0].to(x.dtype), out[1] if residual_in_fp32 else out[1].to(x.dtype)
        return out.to(x.dtype)

    def group_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):  # one group per head
        out = group_norm_ref(x, self.weight, self.bias, self.num_groups, eps=self.eps, upcast=True)
        return out.to(x.dtype)

    def gated_forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
        if getattr(self, "activation", "swish") == "sigmoid":  # fla's reference covers the SiLU gate only
            y = rms_norm_ref(x, self.weight, self.bias, eps=self.eps, upcast=True).float()
            return (y * torch.sigmoid(g.float())).to(x.dtype)
        return gated_rms_norm_ref(x, self.weight, self.bias, z=g, eps=self.eps, norm_before_gate=True)

    def conv_forward(self, x, residual=None, mask=None, cache=None, output_final_state=False, **unused):
        y = nn.Conv1d.forward(self, x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
        return (F.silu(y) if self.activation else y), None

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(RMSNorm, "forward", rms_forward))
        stack.enter_context(mock.patch.object(LayerNorm, "forward", layer_forward))
        stack.enter_context(mock.patch.object(GroupNorm, "forward", group_forward))
        stack.enter_context(mock.patch.object(FusedRMSNormGated, "forward", gated_forward))
        stack.enter_context(mock.patch.object(ShortConvolution, "forward", conv_forward))
        stack.enter_context(
            mock.patch.object(fla_mlp, "swiglu_linear", lambda x, y, w, b: F.linear(F.silu(x) * y, w, b))
        )
        stack.enter_context(mock.patch.object(fla_mlp, "swiglu", lambda x, y: F.silu(x) * y))
        yield


# ----------------------------------------------------------------------------------------------------
# fla's Triton delta-rule kernels as fla's naive recurrences, behind the checks fla's entry points make
# ----------------------------------------------------------------------------------------------------


class FlaCalls(list):
    """The stand-in calls made inside `fla_kernels_on_cpu` / `emulated_cuda`: (kernel name, q dtype, T)."""

    def names(self):
        return [name for name, _, _ in self]


def _check_like_fla(name, q, k, v, beta, initial_state, chunk, chunk_size=64):
    """What fla 0.6 asserts (chunk.py: `assert q.dtype == k.dtype == v.dtype`, fp32 refused by the delta
    rule's chunk kernel, chunk_size 16/32/64) plus the layouts its kernels index by: [B, T, H, K]."""
    assert q.dtype == k.dtype == v.dtype, f"{name}: q, k, v must share a dtype (got {q.dtype}, {k.dtype}, {v.dtype})"
    if chunk == "delta":
        assert q.dtype != torch.float32, "ChunkDeltaRuleFunction does not support float32. Please use bfloat16."
    if chunk:
        assert chunk_size in (16, 32, 64), f"`chunk_size` must be 16, 32, or 64, got {chunk_size}."
    B, T, H, K = q.shape
    assert k.shape == q.shape and v.shape[:3] == (B, T, H), f"{name}: layouts {q.shape}, {k.shape}, {v.shape}"
    assert beta.shape == (B, T, H), f"{name}: beta must be [B, T, H] = {(B, T, H)}, got {tuple(beta.shape)}"
    if initial_state is not None:
        assert initial_state.shape == (B, H, K, v.shape[-1]), f"{name}: initial_state {tuple(initial_state.shape)}"


def _naive_delta(q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel):
    from fla.ops.delta_rule.naive import delta_rule_recurrence  # head-first [B, H, T, D]; scales q by K^-0.5

    if use_qk_l2norm_in_kernel:
        q, k = l2(q).to(q.dtype), l2(k).to(k.dtype)
    K = q.shape[-1]
    if scale is not None:
        q = q * (scale * K**0.5)
    o, S = delta_rule_recurrence(
        *(x.transpose(1, 2) for x in (q, k, v, beta)), initial_state=initial_state, output_final_state=True
    )
    return o.transpose(1, 2).to(q.dtype), (S if output_final_state else None)


class _NoBackward(torch.autograd.Function):
    """fla's fused recurrent gated kernel: a forward and no backward (its FusedRecurrentFunction)."""

    @staticmethod
    def forward(ctx, o):
        return o.view_as(o)

    @staticmethod
    def backward(ctx, do):
        raise NotImplementedError("Backward pass is not implemented (fla's fused recurrent gated / KDA kernels).")


def _kda_stand_ins(calls):
    """fla.ops.kda's chunk_kda / fused_recurrent_kda as fla's naive_recurrent_kda, behind what fla 0.6 checks
    (kda/chunk.py: chunk_size 32 / 64, K <= 256, g [B, T, HV, K], beta [B, T, HV], an fp32 initial state for
    the chunk kernel; allow_neg_eigval only with the in-kernel sigmoid). The fused recurrent kernel is no
    autograd Function: a gradient through it fails here loudly instead of stopping silently as on a GPU."""
    from fla.ops.kda.naive import naive_recurrent_kda

    def kda(name, q, k, v, g, beta, scale, initial_state, output_final_state, kwargs, chunk):
        _check_like_fla(name, q, k, v, beta, initial_state, chunk=None)
        assert q.shape[-1] <= 256 and g.shape == k.shape, f"{name}: K <= 256 and g [B, T, HV, K]"
        assert not kwargs.get("use_gate_in_kernel") and not kwargs.get("use_qk_l2norm_in_kernel"), name
        assert not kwargs.get("allow_neg_eigval") or kwargs.get("use_beta_sigmoid_in_kernel"), name
        if chunk:
            assert kwargs.get("chunk_size", 64) in (32, 64), f"{name}: chunk_size must be 32 or 64"
            assert initial_state is None or initial_state.dtype == torch.float32, "initial_state must be in float32."
        calls.append((name, q.dtype, q.shape[1]))
        o, S = naive_recurrent_kda(q, k, v, g, beta, scale, initial_state, output_final_state)
        return o.to(q.dtype), S

    def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
        return kda("chunk_kda", q, k, v, g, beta, scale, initial_state, output_final_state, kwargs, chunk=True)

    def fused_recurrent_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
        o, S = kda("fused_recurrent_kda", q, k, v, g, beta, scale, initial_state, output_final_state, kwargs, False)
        return _NoBackward.apply(o), S

    return chunk_kda, fused_recurrent_kda


@contextlib.contextmanager
def fla_kernels_on_cpu():
    """fla.ops.delta_rule / gated_delta_rule / kda's chunk and fused recurrent entry points as fla's naive
    torch recurrences, with fla's dtype, chunk-size and layout checks; yields the list of calls made."""
    import fla.ops.delta_rule as fla_delta
    import fla.ops.gated_delta_rule as fla_gated
    import fla.ops.kda as fla_kda
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    calls = FlaCalls()

    def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, **kwargs):  # fmt: skip
        _check_like_fla("chunk_delta_rule", q, k, v, beta, initial_state, chunk="delta", chunk_size=chunk_size)
        calls.append(("chunk_delta_rule", q.dtype, q.shape[1]))
        return _naive_delta(q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel)

    def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
                                   use_qk_l2norm_in_kernel=False, cu_seqlens=None):  # fmt: skip
        beta = torch.ones_like(q[..., 0]) if beta is None else beta
        _check_like_fla("fused_recurrent_delta_rule", q, k, v, beta, initial_state, chunk=None)
        calls.append(("fused_recurrent_delta_rule", q.dtype, q.shape[1]))
        return _naive_delta(q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel)

    def gated(name, q, k, v, g, beta, scale, initial_state, output_final_state, chunk_size=64, chunk=True):
        _check_like_fla(name, q, k, v, beta, initial_state, chunk="gated" if chunk else None, chunk_size=chunk_size)
        assert g is not None and g.shape == beta.shape, f"{name}: g must be [B, T, H] like beta"
        calls.append((name, q.dtype, q.shape[1]))
        o, S = naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state)
        return o.to(q.dtype), S

    def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                               cu_seqlens=None, chunk_size=64, **kwargs):  # fmt: skip
        assert not kwargs.get("use_qk_l2norm_in_kernel"), "deltalens normalises q and k outside the kernel"
        return gated("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state, chunk_size)

    def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None,
                                         initial_state=None, output_final_state=False, **kwargs):  # fmt: skip
        o, S = gated("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                     chunk=False)  # fmt: skip
        return _NoBackward.apply(o), S

    with contextlib.ExitStack() as stack:
        for module, function in (
            (fla_delta, chunk_delta_rule),
            (fla_delta, fused_recurrent_delta_rule),
            (fla_gated, chunk_gated_delta_rule),
            (fla_gated, fused_recurrent_gated_delta_rule),
            *((fla_kda, function) for function in _kda_stand_ins(calls)),
        ):
            stack.enter_context(mock.patch.object(module, function.__name__, function))
        yield calls


@contextlib.contextmanager
def emulated_cuda():
    """CPU tensors dispatched as if on CUDA with fla's kernels: the kernel selector reads every device as
    "cuda" and fla as available (so no C kernel of the recurrence runs, as on a GPU), the short convolution
    takes torch's conv1d (its C kernel is CPU-only), and fla's kernels are `fla_kernels_on_cpu`'s stand-ins.
    Yields the list of fla calls made."""
    from deltalens.models.ops import kernel_select, short_conv

    with contextlib.ExitStack() as stack:
        calls = stack.enter_context(fla_kernels_on_cpu())
        real = kernel_select.select_kernel

        def as_on_cuda(**facts):  # every device the rules read is CUDA
            facts["device"] = "cuda"
            facts["state_device"] = facts.get("state_device") and "cuda"
            return real(**facts)

        stack.enter_context(mock.patch.object(kernel_select, "select_kernel", as_on_cuda))
        stack.enter_context(mock.patch.object(kernel_select, "fla_kernels_available", lambda: True))
        stack.enter_context(mock.patch.object(short_conv, "_kernels", lambda: None))
        yield calls
