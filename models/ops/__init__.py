"""Kernels: each fast path beside its readable reference, and the one selector that picks a path.

    kernel_select.py      the one kernel selector: which path runs (fla / C / chunked torch / reference /
                          replay, with or without states), as a KernelChoice; its docstring tables them all
    delta_rule.py         the delta rule: token-by-token reference and the entry points chunk_delta_rule,
                          chunk_delta_rule_with_states
    delta_rule_chunked.py the chunked WY/UT pure-torch kernel
    delta_rule_native.py  the C kernel of the delta rule and its gated form (csrc/delta_rule.c), autograd
    fla_kernels.py        fla's Triton kernels on CUDA (optional)
    replay.py             continue the recurrence from states a hook replaced
    gated_delta_rule.py   the same with a decay gate and per-token Householder products (DeltaProduct)
    common.py             what they share: StateEdit, input checks, the renormalisation step
    precision.py          the precision policy: bf16 matmuls, the recurrence and its state in fp32
    bf16_check.py         is bf16 faster than fp32 on this CPU? measured once, cached (--dtype auto)
    short_conv.py         the short causal convolution: reference and C kernel (csrc/short_conv.c)
    native.py             builds and caches the C kernels (csrc/) on first use

Nothing here knows about hooks or modules: tensors in, tensors out, fla's [B, T, H, D] layout.
"""
