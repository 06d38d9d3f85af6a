"""The production families on fla's kernels, the CUDA glue on a CPU (tests/fla_on_cpu.py: `emulated_cuda`).

Every registered production family (tests/production_standin.py's tiny stand-ins, opened offline through
`dl.load`): its delta-rule layers call fla's Gated DeltaNet or KDA entry points when the tensors are on
CUDA, give the CPU's logits, and say in `last_kernel` which path ran and which backend fla's dispatch
offers (issue 56). Kimi Linear's cache and decode step on fla: tests/models/test_emulated_cuda_kda.py.
"""

import pytest
import torch
from fla_on_cpu import emulated_cuda
from production_standin import kinds, put_standin

from deltalens.models.ops.fla_kernels import fla_backend
from deltalens.models.ops.kernel_select import FLA_CHUNK, FLA_RECURRENT

ONE_KIND_PER_FAMILY = sorted({arch: kind for kind, arch in sorted(kinds().items(), reverse=True)}.values())
ENTRY_POINT = {"gated_delta_rule": "gated_delta_rule", "kda": "kda"}  # fla_operation -> fla's function suffix


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


def _open(kind, hub):
    import deltalens as dl

    repo, _ = put_standin(kind, hub / "hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(hub))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        return dl.load(repo)


@pytest.mark.parametrize("kind", ONE_KIND_PER_FAMILY)
def test_production_delta_layers_run_fla_and_name_its_dispatch(kind, hub):
    model = _open(kind, hub)
    layers = [m for m in model.hf.modules() if getattr(m, "fla_operation", None) and hasattr(m, "last_kernel")]
    assert layers, f"{kind}: no delta-rule layer found"
    operations = {m.fla_operation for m in layers}
    assert len(operations) == 1 and operations <= set(ENTRY_POINT)
    operation = operations.pop()
    toks = torch.randint(0, model.cfg.d_vocab, (2, 19), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = model(toks)
        with emulated_cuda() as calls:
            got = model(toks)
        assert (got - ref).abs().max() <= 1e-4
        assert {m.last_kernel.path for m in layers} == {FLA_RECURRENT}  # fp32, T <= 64, no gradient
        assert calls.names() == [f"fused_recurrent_{ENTRY_POINT[operation]}"] * len(layers)
        long = torch.randint(0, model.cfg.d_vocab, (1, 70), generator=torch.Generator().manual_seed(6))
        ref = model(long)
        with emulated_cuda() as calls, torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(long)  # KDA, as fla's layer, keeps T <= 64 on the recurrent kernel
    assert {m.last_kernel.path for m in layers} == {FLA_CHUNK}  # bf16: fla's chunk kernels
    assert calls.names() == [f"chunk_{ENTRY_POINT[operation]}"] * len(layers)
    assert (low.float() - ref).abs().max() <= 0.1 * ref.abs().max()
    assert all(m.last_kernel.reason.endswith(f"; fla dispatch: {fla_backend(operation)}") for m in layers)
