"""The one kernel selector (models/ops/kernel_select.py): every path, the inputs that choose it, and the
choice a mixer records as `last_kernel` after a real forward (the CUDA-only fla paths: the choice only)."""

import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F

from deltalens import models
from deltalens.models.ops.delta_rule import chunk_delta_rule, chunk_delta_rule_with_states
from deltalens.models.ops.delta_rule_native import native_kernel_available
from deltalens.models.ops.gated_delta_rule import chunk_gated_delta_rule
from deltalens.models.ops.kernel_select import PATHS, KernelChoice, select_kernel, select_kernel_for
from deltalens.models.ops.native import native_kernels

needs_c = pytest.mark.skipif(not native_kernel_available(), reason="the C kernel does not build here")

ARCHS = {
    "deltanet": dict(num_heads=2),
    "gated_deltanet": dict(num_heads=2, head_dim=8),
    "deltaproduct": dict(num_heads=2, head_dim=8, num_householder=2, use_forget_gate=True),
    "deltaproduct-no-gate": dict(num_heads=2, head_dim=8, num_householder=3, use_forget_gate=False),
}
TOKENS = torch.randint(1, 23, (2, 11), generator=torch.Generator().manual_seed(3))


def tiny(arch: str, **overrides):
    torch.manual_seed(0)
    config = dict(vocab_size=23, hidden_size=32, num_hidden_layers=2, allow_neg_eigval=True, **ARCHS[arch])
    return models.build(arch.removesuffix("-no-gate"), **config, **overrides).eval()


def paths(model) -> list[str]:
    return [block.attn.last_kernel.path for block in model.model.layers]


# ---- the rules, as facts -> path (the module docstring's table) ------------------------------------

CPU_C = dict(native_available=True)
CUDA_FLA = dict(device="cuda", fla_available=True)
RULES = [
    # reference: a state_edit wins over everything else
    ("reference", dict(state_edit=True, wants_states=True, hook_edited=True, **CUDA_FLA)),
    ("reference", dict(state_edit=True, gated=True, renorm_every=3)),
    # replay: a hook on hook_state changed states
    ("replay", dict(wants_states=True, hook_edited=True, **CPU_C)),
    ("replay", dict(wants_states=True, hook_edited=True, gated=True, **CUDA_FLA)),
    # c_states: states, CPU, no gradient (or native=True), the C kernel here
    ("c_states", dict(wants_states=True, **CPU_C)),
    ("c_states", dict(wants_states=True, gated=True, **CPU_C)),
    ("c_states", dict(wants_states=True, needs_grad=True, native=True, **CPU_C)),  # C_STATES then refuses grads
    ("c_states", dict(wants_states=True, use_fla=True, **CPU_C)),  # use_fla does not apply to states
    # chunked_states: states otherwise
    ("chunked_states", dict(wants_states=True, needs_grad=True, **CPU_C)),
    ("chunked_states", dict(wants_states=True, native_available=False)),
    ("chunked_states", dict(wants_states=True, native=False, **CPU_C)),
    ("chunked_states", dict(wants_states=True, renorm_every=4, **CPU_C)),
    ("chunked_states", dict(wants_states=True, state_device="cuda", **CPU_C)),
    ("chunked_states", dict(wants_states=True, use_fla=True, **CUDA_FLA)),  # fla gives no states
    ("chunked_states", dict(wants_states=True, gated=True, length=0, native=True, native_available=False)),
    # fla_rows: a StateTap's rows only, CUDA with fla, no gradient, no renormalisation, T > 0
    ("fla_rows", dict(wants_states=True, rows_only=True, **CUDA_FLA)),
    ("fla_rows", dict(wants_states=True, rows_only=True, dtype=torch.bfloat16, gated=True, **CUDA_FLA)),
    ("chunked_states", dict(wants_states=True, rows_only=True, needs_grad=True, **CUDA_FLA)),
    ("chunked_states", dict(wants_states=True, rows_only=True, renorm_every=3, **CUDA_FLA)),
    ("chunked_states", dict(wants_states=True, rows_only=True, use_fla=False, **CUDA_FLA)),
    ("c_states", dict(wants_states=True, rows_only=True, fla_available=True, **CPU_C)),  # fla_rows: CUDA only
    # fla_recurrent: CUDA, fla importable, fp32 (gated: without gradients)
    ("fla_recurrent", dict(**CUDA_FLA)),
    ("fla_recurrent", dict(needs_grad=True, **CUDA_FLA)),
    ("fla_recurrent", dict(gated=True, **CUDA_FLA)),
    ("fla_recurrent", dict(renorm_every=5, **CUDA_FLA)),
    ("fla_recurrent", dict(use_fla=True, **CUDA_FLA)),
    # fla_chunk: CUDA, fla importable, half precision, or gated fp32 with gradients
    ("fla_chunk", dict(dtype=torch.bfloat16, **CUDA_FLA)),
    ("fla_chunk", dict(dtype=torch.float16, gated=True, **CUDA_FLA)),
    ("fla_chunk", dict(gated=True, needs_grad=True, **CUDA_FLA)),
    ("fla_chunk", dict(dtype=torch.bfloat16, renorm_every=5, **CUDA_FLA)),
    # c: CPU, no states, no renormalisation, the C kernel here (or native=True)
    ("c", dict(**CPU_C)),
    ("c", dict(needs_grad=True, **CPU_C)),  # the C kernel has a backward
    ("c", dict(gated=True, use_fla=False, **CPU_C)),
    ("c", dict(native=True, **CPU_C)),
    ("c", dict(gated=True, devices_agree=False, **CPU_C)),  # only the plain delta rule checks devices
    # chunked: otherwise
    ("chunked", dict(native_available=False)),
    ("chunked", dict(native=False, **CPU_C)),
    ("chunked", dict(renorm_every=3, **CPU_C)),
    ("chunked", dict(length=0, **CPU_C)),
    ("chunked", dict(gated=True, length=0, native=True, native_available=False)),
    ("chunked", dict(devices_agree=False, **CPU_C)),
    ("chunked", dict(state_device="cuda", **CPU_C)),
    ("chunked", dict(use_fla=False, **CUDA_FLA)),
    ("chunked", dict(device="cuda", fla_available=False)),
    ("chunked", dict(device="mps")),
]


@pytest.mark.parametrize("path, facts", RULES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(RULES)])
def test_rules(path, facts):
    choice = select_kernel(**facts)
    assert choice.path == path and choice.reason
    assert choice.gives_states == (path in ("c_states", "chunked_states"))


def test_every_path_has_a_rule():
    assert {path for path, _ in RULES} == set(PATHS)


@pytest.mark.parametrize(
    "facts, message",
    [
        (dict(use_fla=True), "use_fla=True needs CUDA tensors and an importable fla"),
        (dict(use_fla=True, device="cuda", fla_available=False), "use_fla=True"),
        (dict(use_fla=True, gated=True), "with_states=False"),
        (dict(native=True, renorm_every=2, native_available=True), "native=True"),
        (dict(native=True, device="cuda"), "native=True"),
        (dict(native=True, length=0, native_available=True), "native=True"),
        (dict(native=True, wants_states=True, native_available=False), "native=True"),
    ],
)
def test_what_cannot_run_is_refused(facts, message):
    with pytest.raises(RuntimeError, match=message):
        select_kernel(**facts)


def test_the_choice_is_a_small_frozen_record():
    choice = select_kernel(native_available=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.path = "c"
    with pytest.raises(ValueError, match="unknown kernel path"):
        KernelChoice("fast", "no such path")
    assert str(choice).startswith("chunked (")


def test_facts_are_read_off_the_tensors():
    q = torch.randn(1, 5, 2, 4, requires_grad=True)
    k, v, beta, g = torch.randn(1, 5, 2, 4), torch.randn(1, 5, 2, 3), torch.rand(1, 5, 2), -torch.rand(1, 5, 2)
    states = dict(wants_states=True, native_available=True)
    assert select_kernel_for(q, k, v, beta, **states).path == "chunked_states"  # q wants a gradient
    with torch.no_grad():
        assert select_kernel_for(q, k, v, beta, g, **states).path == "c_states"
    assert select_kernel_for(q.detach(), k, v, beta, renorm_every=2, native_available=True).path == "chunked"


# ---- the entry points run the path they are given, and only their own kinds -------------------------


def test_entry_points_run_a_given_kernel_and_refuse_the_wrong_kind():
    g = torch.Generator().manual_seed(0)
    q, v = torch.randn(2, 9, 2, 4, generator=g), torch.randn(2, 9, 2, 3, generator=g)
    k, beta = F.normalize(torch.randn(2, 9, 2, 4, generator=g), dim=-1), torch.rand(2, 9, 2, generator=g)
    chunked = KernelChoice("chunked", "asked for")
    assert torch.equal(
        chunk_delta_rule(q, k, v, beta, kernel=chunked)[0], chunk_delta_rule(q, k, v, beta, native=False)[0]
    )
    states = KernelChoice("chunked_states", "asked for")
    with_states = chunk_delta_rule_with_states(q, k, v, beta, kernel=states)
    assert torch.equal(with_states[2], chunk_delta_rule_with_states(q, k, v, beta, native=False)[2])
    with pytest.raises(ValueError, match="cannot run the 'chunked_states' path"):
        chunk_delta_rule(q, k, v, beta, kernel=states)
    with pytest.raises(ValueError, match="cannot run the 'chunked' path"):
        chunk_delta_rule_with_states(q, k, v, beta, kernel=chunked)
    with pytest.raises(ValueError, match="cannot run the 'chunked' path"):
        chunk_gated_delta_rule(q, k, v, beta, -beta, with_states=True, kernel=chunked)


# ---- what a mixer records after a real forward -------------------------------------------------------


@needs_c
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("grad", [False, True])
def test_forward_runs_the_c_kernel(arch, grad):
    model = tiny(arch)
    with torch.set_grad_enabled(grad):
        model(TOKENS)
    assert paths(model) == ["c", "c"]
    model.set_kernel(use_fla=False)  # only keeps fla out: the CPU path is still the C kernel
    model(TOKENS)
    assert paths(model) == ["c", "c"]


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_without_c_kernel_runs_chunked(arch):
    model = tiny(arch)
    with native_kernels(False):
        model(TOKENS)
    assert paths(model) == ["chunked", "chunked"]
    assert "no C kernel here" in model.model.layers[0].attn.last_kernel.reason


def test_renormalised_forward_runs_chunked():
    model = tiny("deltanet", state_norm_every=3)
    model(TOKENS)
    assert paths(model) == ["chunked", "chunked"]
    assert "renorm_every=3" in model.model.layers[1].attn.last_kernel.reason
    with torch.no_grad():
        model.run_with_cache(TOKENS)
    assert paths(model) == ["chunked_states", "chunked_states"]


@needs_c
@pytest.mark.parametrize("arch", ARCHS)
def test_hook_state_without_grad_runs_c_states(arch):
    model = tiny(arch)
    with torch.no_grad():
        model.run_with_cache(TOKENS, names_filter="blocks.1.attn.hook_state")
    assert paths(model) == ["c", "c_states"]  # only the hooked layer materialises its states


@pytest.mark.parametrize("arch", ARCHS)
def test_hook_state_with_grad_runs_chunked_states(arch):
    model = tiny(arch)
    with torch.enable_grad():
        model.run_with_cache(TOKENS, names_filter=lambda name: name.endswith("hook_state"))
    assert paths(model) == ["chunked_states", "chunked_states"]
    assert "gradients" in model.model.layers[0].attn.last_kernel.reason


@pytest.mark.parametrize("arch", ARCHS)
def test_hook_state_without_c_kernel(arch):
    model = tiny(arch)
    with torch.no_grad(), native_kernels(False):
        model.run_with_cache(TOKENS, names_filter=lambda name: name.endswith("hook_state"))
    assert paths(model) == ["chunked_states", "chunked_states"]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_hook_edit_replays(arch):
    model = tiny(arch)
    fast = "c" if native_kernel_available() else "chunked"
    with_states = "c_states" if native_kernel_available() else "chunked_states"

    def in_place(act, hook):
        act[:, 4] *= 0.5

    def replaced(act, hook):
        return torch.where(torch.arange(act.shape[1])[:, None, None, None] == 6, act.flip(0), act)

    def looked(act, hook):
        return None  # reads only: no replay

    with torch.no_grad():
        for hook, first in ((in_place, "replay"), (replaced, "replay"), (looked, with_states)):
            model.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.attn.hook_state", hook)])
            assert paths(model) == [first, fast], hook.__name__


@pytest.mark.parametrize("arch", ARCHS)
def test_state_edit_runs_the_reference(arch):
    model = tiny(arch)
    fast = "c" if native_kernel_available() else "chunked"
    with model.state_edit(1, lambda t, S: S * 0.5 if t == 3 else S):
        model(TOKENS)
        assert paths(model) == [fast, "reference"]
        with pytest.raises(RuntimeError, match="not both"):
            model.run_with_hooks(TOKENS, fwd_hooks=[("blocks.1.attn.hook_state", lambda act, hook: act * 2)])
    model(TOKENS)
    assert paths(model) == [fast, fast]


def test_the_choice_is_logged(caplog):
    model = tiny("gated_deltanet")
    with caplog.at_level(logging.DEBUG, logger="deltalens.kernels"), native_kernels(False):
        model(TOKENS)
    lines = [r.getMessage() for r in caplog.records if r.name == "deltalens.kernels"]
    assert lines == [f"blocks.{i}.attn: {model.model.layers[i].attn.last_kernel}" for i in (0, 1)]
    assert lines[0].startswith("blocks.0.attn: chunked (")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", ["deltanet", "gated_deltanet"])
def test_cuda_forward_runs_fla(arch):
    model = tiny(arch).cuda()
    with torch.no_grad():
        model(TOKENS.cuda())
    assert paths(model) == ["fla_recurrent", "fla_recurrent"]  # fp32 inference
    with torch.enable_grad():
        model(TOKENS.cuda())
    # the gated fused recurrent kernel has no backward: with gradients, fla's chunk kernel
    assert paths(model) == (["fla_recurrent"] * 2 if arch == "deltanet" else ["fla_chunk"] * 2)
    with torch.no_grad():
        model.run_with_cache(TOKENS.cuda(), names_filter=lambda name: name.endswith("hook_state"))
    assert paths(model) == ["chunked_states", "chunked_states"]  # fla's kernels return no states
