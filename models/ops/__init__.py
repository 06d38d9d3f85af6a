"""Kernels: each fast path beside its readable reference, and the one selector that picks a path.

    delta_rule.py         the delta rule: token-by-token reference, chunked WY/UT torch kernel, fla on CUDA
    gated_delta_rule.py   the same with a decay gate and per-token Householder products (DeltaProduct)
    delta_rule_native.py  the C kernel of both (csrc/delta_rule.c) as a torch autograd function
    short_conv.py         the short causal convolution: reference and C kernel (csrc/short_conv.c)
    native.py             builds and caches the C kernels (csrc/) on first use

Nothing here knows about hooks or modules: tensors in, tensors out, fla's [B, T, H, D] layout.
"""
