"""fla's real chunk kernels under Triton's interpreter on a CPU (tests/triton_interpreter.py: three patches to
Triton, none to fla): the fla_rows path (models/ops/fla_state_rows.py) runs fla's own chunk forward piece by
piece and rebuilds S_t at kept rows; checked against the token-by-token recurrence, and its o against fla's
public entry point's (the same kernels: equal to the bit).

Slow (about a minute: the interpreter runs every kernel in numpy). Run as a script, the check prints one
JSON line; the test runs it in a fresh process with TRITON_INTERPRET=1 (triton.jit reads it at import)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check() -> dict:
    """Per case (plain / gated, bf16 / fp32): max |rows - reference| (and the rows' size), max |S_t^T q_t - fla's
    o_t| at the rows (the rows are the states fla's o read), max |o - reference o|, o == fla's entry point's."""
    import torch
    import torch.nn.functional as F

    from deltalens.models.ops.fla_state_rows import fla_state_rows
    from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule, gated_delta_rule_recurrence
    from deltalens.models.ops.kernel_select import KernelChoice

    out = {}
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 2, 80, 2, 16, 16  # two chunks of 64, the second one partial
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.randn(B, T, H, K, generator=g).to(dtype)
        k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1).to(dtype)
        v, beta = torch.randn(B, T, H, V, generator=g).to(dtype), torch.rand(B, T, H, generator=g).to(dtype) * 2
        h0 = torch.randn(B, H, K, V, generator=g) * 0.3
        for gated in (False, True):
            log_decay = -torch.rand(B, T, H, generator=g) * 0.3 if gated else None
            o_ref, S_ref, states = gated_delta_rule_recurrence(
                q, k, v, beta, log_decay, initial_state=h0, output_final_state=True
            )
            rows = (torch.tensor([0, 1, 1, 0, 1]), torch.tensor([0, 5, 63, 64, T - 1]))
            o, S, kept = fla_state_rows(q, k, v, beta, log_decay, None, h0, True, 64, rows)
            kernel = KernelChoice("fla_recurrent" if dtype == torch.float32 else "fla_chunk", "the plain forward")
            plain, _, _ = chunk_gated_delta_rule(q, k, v, beta, log_decay, initial_state=h0, kernel=kernel)
            read_out = torch.einsum("nhkv,nhk->nhv", kept, q[rows].float() * K**-0.5)  # o_t = S_t^T q_t / sqrt(K)
            out[f"{'gated' if gated else 'delta'}-{str(dtype).removeprefix('torch.')}"] = {
                "rows_max_error": float((kept - states[rows]).abs().max()),
                "rows_max_abs": float(states[rows].abs().max()),
                "o_from_rows_vs_fla_o": float((read_out - o[rows].float()).abs().max()),
                "o_max_error": float((o.float() - o_ref.float()).abs().max()),
                "final_state_max_error": float((S - S_ref).abs().max()),
                "o_equals_fla_entry_point": bool(torch.equal(o, plain)),
            }
    return out


@pytest.mark.slow
def test_fla_kernels_under_the_interpreter_give_the_reference_rows():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}"}
    run = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for case, r in result.items():  # bf16: fla keeps h, w, u (and o) in bf16; about 1% of the states' size
        bf16 = case.endswith("bfloat16")
        assert r["rows_max_error"] <= (2e-2 * r["rows_max_abs"] if bf16 else 1e-5), (case, r)
        assert r["final_state_max_error"] <= (2e-2 * r["rows_max_abs"] if bf16 else 1e-5), (case, r)
        assert r["o_from_rows_vs_fla_o"] <= (4e-2 if bf16 else 1e-5), (case, r)  # bf16: o's own rounding
        assert r["o_max_error"] <= (0.1 if bf16 else 1e-5) and r["o_equals_fla_entry_point"], (case, r)


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1", (
        "run with TRITON_INTERPRET=1 (fla's kernels under the interpreter)"
    )
    from triton_interpreter import patch_interpreter

    patch_interpreter()
    print(json.dumps(check()))
