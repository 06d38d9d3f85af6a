"""The CUDA capture of S_t at kept rows (the selector's fla_rows path) on a CPU: fla's public entry points
replaced by fla's naive recurrences (tests/fla_on_cpu.py: `emulated_cuda`) and the chunk-forward pieces
models/ops/fla_state_rows.py calls by torch stand-ins (tests/fla_pieces_on_cpu.py).

What runs here is the CUDA glue: the selector's choice, the StateTap wiring in
models/layers/hooked_recurrence.py, the entry points' fla_rows branches, the DeltaProduct sub-token
mapping, the carry's final state, and the capture API on top; the rows are checked against the CPU
reference's states. fla's real kernels run in the slow test under Triton's interpreter
(tests/models/test_fla_interpreter.py) and on a GPU (pytest -m cuda).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from fla_on_cpu import emulated_cuda
from fla_pieces_on_cpu import fla_pieces_on_cpu

from deltalens.models.layers.hooked_recurrence import StateTap
from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule, gated_delta_rule_recurrence
from deltalens.models.ops.kernel_select import FLA_ROWS, select_kernel_for
from tests.conftest import build_tiny

ARCHS = ["deltanet", "gated_deltanet", "deltaproduct", "deltaproduct-no-gate"]
DTYPES = [torch.float32, torch.bfloat16]
STATE_TOL = {torch.float32: 1e-4, torch.bfloat16: 0.1}  # bf16: the model's own bf16 rounding (precision.py)


def _model(name, dtype=torch.float32):
    if name == "deltaproduct-no-gate":
        return build_tiny("deltaproduct", use_forget_gate=False).to(dtype)
    return build_tiny(name).to(dtype)


def _tokens(B=3, T=70, seed=1):  # T > 64: two chunks of fla's 64
    return torch.randint(1, 23, (B, T), generator=torch.Generator().manual_seed(seed))


def _rows(B, T):
    return torch.tensor([0, 1, 2, 2, 0]), torch.tensor([0, 63, 64, T - 1, 37])


def _mixers(model):
    return [block.attn for block in model.blocks]


def _tapped_run(model, tokens, rows, layer=1):
    """(logits, the kept rows of layer `layer`'s S_t) with a StateTap, as interp/capture.py sets it."""
    got = []
    mixer = _mixers(model)[layer]
    mixer.state_tap = StateTap(rows, got.append)
    try:
        logits = model(tokens)
    finally:
        mixer.state_tap = None
    return logits, got[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_entry_point_rows_match_the_reference(gated, dtype):
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 2, 45, 2, 8, 8
    q, k, v = torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, V)
    q, k, v = q.to(dtype), F.normalize(k, dim=-1).to(dtype), v.to(dtype)
    beta, h0 = torch.rand(B, T, H, generator=g) * 2, torch.randn(B, H, K, V, generator=g) * 0.3
    log_decay = -torch.rand(B, T, H, generator=g) * 0.5 if gated else None
    ref = gated_delta_rule_recurrence(q, k, v, beta, log_decay, initial_state=h0, output_final_state=True)
    _, final_ref, states = ref
    rows = (torch.tensor([0, 1, 1, 0]), torch.tensor([0, 16, 31, 44]))
    with torch.no_grad(), emulated_cuda(), fla_pieces_on_cpu() as pieces:
        kernel = select_kernel_for(q, k, v, beta, log_decay, h0, wants_states=True, rows_only=True)
        o, final, kept = chunk_gated_delta_rule(
            q, k, v, beta, log_decay, initial_state=h0, output_final_state=True, with_states=True, kernel=kernel,
            rows=rows, chunk_size=16,
        )  # fmt: skip
        plain, _, _ = chunk_gated_delta_rule(q, k, v, beta, log_decay, initial_state=h0)
    assert kernel.path == FLA_ROWS and kept.shape == (4, H, K, V) and o.dtype == dtype
    assert bool(pieces) == (dtype == torch.bfloat16)  # bf16: fla's chunk forward; fp32: its recurrent kernel
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert (kept - states[rows]).abs().max() <= tol and (final - final_ref).abs().max() <= tol
    if dtype == torch.float32:
        assert torch.equal(o, plain)  # the same fla call the plain forward makes


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ARCHS)
def test_a_tapped_layer_runs_fla_rows_and_keeps_the_reference_rows(name, dtype):
    model, tokens = _model(name), _tokens()
    rows = _rows(*tokens.shape)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n == "blocks.1.attn.hook_state")
        reference = cache["blocks.1.attn.hook_state"][rows]
        m = copy.deepcopy(model).to(dtype)
        with emulated_cuda(), fla_pieces_on_cpu():
            plain = m(tokens)
            logits, kept = _tapped_run(m, tokens, rows)
    assert _mixers(m)[1].last_kernel.path == FLA_ROWS and kept.dtype == torch.float32
    assert (kept - reference).abs().max() <= STATE_TOL[dtype]
    if dtype == torch.float32:  # o from the plain forward's fla call: the same logits, bit for bit
        assert torch.equal(logits, plain)
    else:  # bf16: fla's chunk pieces (stand-ins here) against its naive recurrence (the stand-in plain call)
        assert (logits.float() - plain.float()).abs().max() <= 0.1


def test_capture_at_positions_on_the_fla_path():
    """dl.capture(..., positions=) taps hook_state; on (emulated) CUDA the rows come from fla_rows."""
    from deltalens.interp.capture import capture

    model, tokens = _model("gated_deltanet"), _tokens()
    keep = torch.zeros(tokens.shape, dtype=torch.bool)
    keep[:, [5, 64, 69]] = True
    with torch.no_grad():
        ref = capture(model, tokens, names=("state",), positions=keep)
        with emulated_cuda(), fla_pieces_on_cpu() as pieces:
            got = capture(copy.deepcopy(model).to(torch.bfloat16), tokens, names=("state",), positions=keep)
    assert {m.last_kernel.path for m in _mixers(model)} != {FLA_ROWS}  # the CPU run took the C / chunked path
    assert "chunk_gated_delta_rule_fwd_h" in pieces.names()
    for name in ref.acts:
        assert got[name].shape == ref[name].shape and (got[name] - ref[name]).abs().max() <= 0.1, name


def test_state_edit_with_a_tap_continues_from_the_edited_state():
    """A state_edit keeps the token-by-token reference on CUDA too: the tap shows the edited trajectory and
    every later step (and the logits) continue from it."""
    model, tokens = _model("deltanet"), _tokens(T=20)
    rows = (torch.tensor([0, 0]), torch.tensor([4, 12]))

    def zero_at_4(t, S):
        return S * 0 if t == 4 else S

    with torch.no_grad(), emulated_cuda(), fla_pieces_on_cpu():
        plain_logits, plain_rows = _tapped_run(model, tokens, rows)
        with model.state_edit(1, zero_at_4):
            logits, kept = _tapped_run(model, tokens, rows)
    assert _mixers(model)[1].last_kernel.path == "reference"
    assert kept[0].abs().max() == 0  # the edited state itself
    assert (kept[1] - plain_rows[1]).abs().max() > 1e-3 and (logits - plain_logits).abs().max() > 1e-3


def test_a_tap_that_wants_gradients_stays_off_fla_rows():
    model, tokens = _model("deltanet"), _tokens(T=20)
    rows = (torch.tensor([1]), torch.tensor([9]))
    with emulated_cuda():
        _, kept = _tapped_run(model, tokens, rows)
    assert _mixers(model)[1].last_kernel.path == "chunked_states" and kept.requires_grad
