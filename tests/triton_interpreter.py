"""fla's real Triton kernels on a CPU, under Triton's interpreter (TRITON_INTERPRET=1), with three patches to
Triton 3.9 applied from outside fla (nothing of fla is changed):

1. The autotuner benchmarks each config with the GPU driver ("0 active drivers" on a CPU): keep the first
   config only (`Autotuner.prune_configs`), so nothing is benchmarked.
2. `InterpreterError: AttributeError("'int' object has no attribute 'to'")`, raised at
   fla/ops/common/chunk_delta_h.py:176, `i_t_int64 = i_t.to(tl.int64)` in
   `chunk_gated_delta_rule_fwd_kernel_h_blockdim64` (the chunk-state kernel every chunk forward of the
   delta-rule family calls): the interpreter runs `for i_t in range(NT)` with Python ints, where compiled
   Triton gives the loop variable as a tl tensor. The interpreter already rewrites a kernel's AST
   (`triton.runtime.interpreter.ASTTransformer`: comparisons, assignments); one more rule wraps the loop
   variable of a `range` / `tl.range` loop with `interpreter_semantic.to_tensor`, as its assignments are.
3. Silent, not raised: the interpreter keeps bf16 as raw uint16 bits and its `binary_op`, `unary_op` and
   `create_dot` compute on those bits (only casts convert), so any bf16 kernel returns garbage (fla's
   chunk_scaled_dot_kkt: errors of 2e10). bf16 operands are widened to fp32 for the operation and the
   result rounded back to bf16; and the interpreter's fp32 -> bf16 cast truncates where compiled Triton
   rounds to nearest even (its own RTNE mode overflows the mantissa into the exponent with an OR), so that
   cast rounds to nearest even here.

`patch_interpreter()` applies them; import fla only after TRITON_INTERPRET=1 is set (triton.jit decides at
decoration time), i.e. in a fresh process (tests/models/test_fla_interpreter.py).
"""

import ast

_APPLIED = []


def _is_loop_range(node: ast.expr) -> bool:
    """`range(...)` or `tl.range(...)`: loops whose variable compiled Triton gives as a tensor."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "range") or (isinstance(f, ast.Attribute) and f.attr == "range")


def _visit_for(self, node):
    node = self.generic_visit(node)
    if _is_loop_range(node.iter) and isinstance(node.target, ast.Name):
        name = node.target.id
        semantic = ast.Name(id="interpreter_semantic", ctx=ast.Load())
        to_tensor = ast.Attribute(value=semantic, attr="to_tensor", ctx=ast.Load())
        wrap = ast.Assign(
            targets=[ast.Name(id=name, ctx=ast.Store())],
            value=ast.Call(func=to_tensor, args=[ast.Name(id=name, ctx=ast.Load()), ast.Constant(False)], keywords=[]),
        )
        node.body.insert(0, ast.copy_location(wrap, node))
    return node


def patch_interpreter() -> None:
    """The three patches of the module docstring (once per process)."""
    if _APPLIED:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import autotuner, interpreter

    first_only = autotuner.Autotuner.prune_configs
    autotuner.Autotuner.prune_configs = lambda self, kwargs: first_only(self, kwargs)[:1]
    interpreter.ASTTransformer.visit_For = _visit_for

    builder = interpreter.InterpreterBuilder
    binary, unary, dot, cast = builder.binary_op, builder.unary_op, builder.create_dot, builder.cast_impl

    def cast_impl(self, src, dst_type):  # fp32 -> bf16 rounds to nearest even, as compiled Triton does
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # (finite values)
            return interpreter.TensorHandle(rounded.reshape(src.data.shape), tl.bfloat16)
        return cast(self, src, dst_type)

    def wide(self, x):
        return self.cast_impl(x, tl.float32) if x.dtype.scalar == tl.bfloat16 else x

    def binary_op(self, lhs, rhs, op):
        if tl.bfloat16 not in (lhs.dtype.scalar, rhs.dtype.scalar):
            return binary(self, lhs, rhs, op)
        out = binary(self, wide(self, lhs), wide(self, rhs), op)
        return self.cast_impl(out, tl.bfloat16) if out.dtype.scalar == tl.float32 else out  # comparisons stay bool

    def unary_op(self, x, op):
        if x.dtype.scalar != tl.bfloat16:
            return unary(self, x, op)
        return self.cast_impl(unary(self, wide(self, x), op), tl.bfloat16)

    def create_dot(self, a, b, d, *args):
        return dot(self, wide(self, a), wide(self, b), d, *args)

    builder.binary_op, builder.unary_op, builder.create_dot = binary_op, unary_op, create_dot
    builder.cast_impl = cast_impl
    _APPLIED.append(True)
