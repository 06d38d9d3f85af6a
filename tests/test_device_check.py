"""scripts/device_check.py: its dry run (automatic without CUDA) says, as JSON, what it would run and skip."""

import importlib.util
import json
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_check.py"


def test_dry_run_lists_the_cuda_tests_and_what_it_skips(capsys):
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True and set(report["skipped"]) == {"tests", "parity", "bench", "gpu"}
    gpu = report["gpu_plan"]  # benchmarks/gpu.py --dry-run, run by the check
    assert gpu["dry_run"] is True and set(gpu["would_run"]) == {"machine", "deltanet", "qwen3_5", "recipe"}
    assert report["facts"]["cuda"] == torch.cuda.is_available()
    ids = report["cuda_tests"]["ids"]
    assert report["cuda_tests"]["count"] == len(ids) >= 40
    assert any("shipped_checkpoints" in t for t in ids) and any("bf16_autocast" in t for t in ids)
