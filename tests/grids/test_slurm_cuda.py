"""A Slurm job on a GPU trains with fla's CUDA kernels (`pytest -m cuda`, on a machine with a GPU).

The job (training.slurm_job.CellJob) is run here in-process, as `--gpus-per-run 1` runs it on a
node: the training moves the model to CUDA and the DeltaNet mixer calls fla's Triton kernels.
"""

from __future__ import annotations

import pytest
import torch
from tiny_runs import tiny_sweep

from deltalens.grids.grid import load_grid
from deltalens.grids.slurm_job import CellJob

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_a_gpu_job_trains_a_deltanet_cell_with_flas_kernels(tmp_path, monkeypatch):
    import fla.ops.delta_rule as fla_delta

    calls = []
    for name in ("chunk_delta_rule", "fused_recurrent_delta_rule"):
        kernel = getattr(fla_delta, name)

        def counted(*args, _kernel=kernel, _name=name, **kwargs):
            calls.append((_name, args[0].device.type))
            return _kernel(*args, **kwargs)

        monkeypatch.setattr(fla_delta, name, counted)
    sweep = load_grid(tiny_sweep(tmp_path, steps=3))
    cell = next(c for c in sweep.cells if c.arch == "deltanet-neg")
    summary = CellJob(cell, sweep, tmp_path / "runs", tmp_path / "res")()
    assert summary["steps"] == 3
    assert calls and {device for _, device in calls} == {"cuda"}
    assert (tmp_path / "res" / f"{cell.name}.json").is_file()
