"""--dtype auto: bf16 only where this CPU's measured bf16 matmuls beat fp32; a warning where bf16 is forced
and slower; the measurement cached on disk; no bf16 matmul against an untransposed weight."""

import argparse
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from deltalens import models
from deltalens.cli.arguments import add_dtype
from deltalens.models.ops import bf16_check as check_module
from deltalens.models.ops.bf16_check import Bf16Check, bf16_check
from deltalens.models.ops.precision import auto_dtype, cast_model
from tests.conftest import build_tiny


def _measured(ratio: float) -> Bf16Check:
    return Bf16Check("test CPU", (), "AVX2", 1, (128, 32, 32), 10.0, 10.0 * ratio)


@pytest.fixture
def big(monkeypatch):
    """Every model counts as big (no 50M-parameter model is built in a unit test)."""
    monkeypatch.setattr(check_module, "AUTO_MIN_PARAMS", 0)


def _pretend(monkeypatch, ratio: float) -> None:
    monkeypatch.setattr(check_module, "bf16_check", lambda shape=None, refresh=False: _measured(ratio))


def test_auto_keeps_a_small_model_as_saved_without_timing(monkeypatch):
    def no_timing(*args, **kwargs):
        raise AssertionError("a small model must not trigger the bf16 timing")

    monkeypatch.setattr(check_module, "bf16_check", no_timing)
    model = build_tiny("deltanet")
    assert auto_dtype(model) is None
    assert next(cast_model(model, "auto").parameters()).dtype == torch.float32


@pytest.mark.parametrize("ratio, expected", [(3.0, torch.bfloat16), (0.3, torch.float32), (1.05, torch.float32)])
def test_auto_follows_the_measured_ratio(big, monkeypatch, ratio, expected):
    _pretend(monkeypatch, ratio)
    model = cast_model(build_tiny("deltanet"), "auto")
    assert next(model.parameters()).dtype == expected


def test_auto_upcasts_a_bf16_model_where_bf16_is_slow(big, monkeypatch):
    _pretend(monkeypatch, 0.3)
    with pytest.warns(RuntimeWarning):
        model = cast_model(build_tiny("deltanet"), "bf16")
    with torch.no_grad():
        model = cast_model(model, "auto")
    assert next(model.parameters()).dtype == torch.float32


def test_forcing_bf16_where_it_is_slower_warns_with_the_ratio(big, monkeypatch):
    _pretend(monkeypatch, 0.25)
    with pytest.warns(RuntimeWarning, match=r"0\.25x fp32"):
        model = cast_model(build_tiny("deltanet"), "bf16")
    assert next(model.parameters()).dtype == torch.bfloat16  # done as asked, only warned


def test_forcing_bf16_where_it_is_faster_is_silent(big, monkeypatch, recwarn):
    _pretend(monkeypatch, 3.0)
    cast_model(build_tiny("deltanet"), "bf16")
    assert not [w for w in recwarn if "bf16" in str(w.message)]


def test_the_check_is_measured_once_and_cached_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path))
    first = bf16_check((8, 32, 32))
    assert first.fp32_gflops > 0 and first.bf16_gflops > 0
    stored = json.loads((tmp_path / "bf16_check.json").read_text())
    assert len(stored) == 1 and "(8, 32, 32)" in next(iter(stored))

    def no_timing(*args, **kwargs):
        raise AssertionError("a cached check must not time again")

    monkeypatch.setattr(check_module, "matmul_gflops", no_timing)
    again = bf16_check((8, 32, 32))
    assert again.ratio == pytest.approx(first.ratio, rel=1e-2)


def test_the_cli_defaults_to_auto():
    parser = argparse.ArgumentParser()
    add_dtype(parser)
    assert parser.parse_args([]).dtype == "auto"
    assert parser.parse_args(["--dtype", "bf16"]).dtype == "bf16"


_MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


class _UntransposedWeights(TorchDispatchMode):
    """Records bf16 matmuls that read a parameter's storage in its stored (row-major) layout: `x @ w` with
    w (in, out). F.linear reads w (out, in) through a transposed view, the fast bf16 path."""

    def __init__(self, model):
        super().__init__()
        self.storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _MATMULS:
            for operand in args[-2:]:
                if (
                    isinstance(operand, torch.Tensor)
                    and operand.dtype == torch.bfloat16
                    and operand.untyped_storage().data_ptr() in self.storages
                    and operand.stride(-1) == 1
                ):
                    self.found.append((str(func), tuple(operand.shape)))
        return func(*args, **(kwargs or {}))


def test_the_recorder_sees_an_untransposed_weight():
    weight = torch.nn.Linear(8, 16).to(torch.bfloat16)
    recorder = _UntransposedWeights(weight)
    with recorder, torch.no_grad():
        torch.ones(3, 16, dtype=torch.bfloat16) @ weight.weight
    assert recorder.found


@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet", "deltaproduct", "lstm", "transformer"])
def test_no_bf16_forward_multiplies_by_an_untransposed_weight(arch):
    if arch == "lstm":
        model = models.build("lstm", vocab_size=23, d_model=16, n_layers=2).eval()
    elif arch == "transformer":
        model = models.build("transformer", vocab_size=23, d_model=16, n_layers=1, n_heads=2, n_ctx=40).eval()
    else:
        model = build_tiny(arch)
    model = cast_model(model, "bf16")
    recorder = _UntransposedWeights(model)
    with recorder, torch.no_grad():
        model(torch.randint(1, 23, (2, 9)))
    assert recorder.found == []
