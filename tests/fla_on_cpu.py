"""fla's own model code on a CPU: its Triton modules swapped for torch stand-ins (shared by the fla
compatibility tests). fla's torch references where fla has them (`rms_norm_ref`, the gated
`rms_norm_ref`), two-line torch equivalents of the Triton causal conv and SwiGLU otherwise; none of
deltalens's code runs on the fla side. The delta-rule kernels are swapped per model by each test."""

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
    from fla.modules import FusedRMSNormGated, RMSNorm, ShortConvolution
    from fla.modules.norm.layernorm import rms_norm_ref
    from fla.modules.norm.layernorm_gated import rms_norm_ref as gated_rms_norm_ref

    def rms_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return rms_norm_ref(x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm, upcast=True)

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
        stack.enter_context(mock.patch.object(FusedRMSNormGated, "forward", gated_forward))
        stack.enter_context(mock.patch.object(ShortConvolution, "forward", conv_forward))
        stack.enter_context(
            mock.patch.object(fla_mlp, "swiglu_linear", lambda x, y, w, b: F.linear(F.silu(x) * y, w, b))
        )
        stack.enter_context(mock.patch.object(fla_mlp, "swiglu", lambda x, y: F.silu(x) * y))
        yield
