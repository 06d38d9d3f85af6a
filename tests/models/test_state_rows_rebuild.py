"""S_t at kept rows rebuilt from chunk-start states and WY factors (models/ops/state_rows.py), against the
token-by-token recurrence: fp32 exact, bf16 within the rounding of factors stored as fla stores them; no
(B, T, H, K, V) tensor while rebuilding a few rows.

The numbers quoted for it come from `max_error` (python3 tests/models/test_state_rows_rebuild.py prints them)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from deltalens.models.ops.gated_delta_rule import gated_delta_rule_recurrence
from deltalens.models.ops.state_rows import chunk_state_factors, rebuild_state_rows


def _inputs(B=2, T=77, H=3, K=16, V=12, seed=0, gated=True, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g).to(dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1).to(dtype)
    v = torch.randn(B, T, H, V, generator=g).to(dtype)
    beta = (torch.rand(B, T, H, generator=g) * 2).to(dtype)  # [0, 2]: negative eigenvalues too
    log_decay = -torch.rand(B, T, H, generator=g) * 0.3 if gated else None
    h0 = torch.randn(B, H, K, V, generator=g) * 0.3
    return q, k, v, beta, log_decay, h0


def _rows(B, T, n=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    t = torch.randperm(T, generator=g)[:n]
    t[0], t[1] = 0, T - 1  # the first and the last position: a chunk's first row and a padded chunk's last
    return torch.randint(0, B, (n,), generator=g), t


def max_error(gated: bool, dtype: torch.dtype, chunk_size: int, stored=None) -> float:
    """Max |rebuilt - reference| over the kept rows; `stored` rounds h, w, u to that dtype first (fla keeps
    them in the inputs' dtype)."""
    q, k, v, beta, g, h0 = _inputs(gated=gated, dtype=dtype)
    _, final_ref, states = gated_delta_rule_recurrence(q, k, v, beta, g, initial_state=h0, output_final_state=True)
    h, w, u, G, final = chunk_state_factors(k, v, beta, g, h0, chunk_size)
    assert (final - final_ref).abs().max() <= 1e-4  # the factors carry the same recurrence to its end
    if stored is not None:
        h, w, u = (x.to(stored) for x in (h, w, u))
    rows = _rows(*k.shape[:2])
    return float((rebuild_state_rows(k, w, u, h, rows, chunk_size, G) - states[rows]).abs().max())


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
@pytest.mark.parametrize("chunk_size", [16, 64, 7])
def test_rebuild_is_exact_in_fp32(gated, chunk_size):
    assert max_error(gated, torch.float32, chunk_size) <= 1e-5


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_rebuild_in_bf16(gated):
    """bf16 inputs: exact against the recurrence on the same inputs when the factors stay fp32; with h, w, u
    stored in bf16 (fla's chunk forward) within bf16's rounding of states of size ~1."""
    assert max_error(gated, torch.bfloat16, 64) <= 1e-5
    assert max_error(gated, torch.bfloat16, 64, stored=torch.bfloat16) <= 5e-2


class _Largest(TorchDispatchMode):
    """The largest tensor any op produced inside the block (numel)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.largest = max(self.largest, x.numel())
        return out


def test_no_full_state_tensor_for_a_few_rows():
    q, k, v, beta, g, h0 = _inputs(T=256, H=2, K=16, V=16)
    B, T, H, K = k.shape
    rows = _rows(B, T, n=4)
    with _Largest() as seen:
        h, w, u, G, _ = chunk_state_factors(k, v, beta, g, h0, 64)
        kept = rebuild_state_rows(k, w, u, h, rows, 64, G)
    assert kept.shape == (4, H, K, 16)
    assert seen.largest * 4 <= B * T * H * K * 16  # a quarter of the (B, T, H, K, V) states at most


def test_rows_outside_the_batch_are_refused():
    q, k, v, beta, g, h0 = _inputs(T=20)
    h, w, u, G, _ = chunk_state_factors(k, v, beta, g, h0, 16)
    with pytest.raises(ValueError, match="positions in"):
        rebuild_state_rows(k, w, u, h, (torch.tensor([0]), torch.tensor([20])), 16, G)
    with pytest.raises(ValueError, match="h must be"):
        rebuild_state_rows(k, w, u, h[:, :1], (torch.tensor([0]), torch.tensor([3])), 16, G)


if __name__ == "__main__":  # the numbers quoted in the report
    for gated in (False, True):
        name = "gated" if gated else "delta"
        print(name, "fp32 C=64:", max_error(gated, torch.float32, 64))
        print(name, "bf16 inputs, fp32 factors:", max_error(gated, torch.bfloat16, 64))
        print(name, "bf16 inputs, h/w/u stored bf16:", max_error(gated, torch.bfloat16, 64, stored=torch.bfloat16))
