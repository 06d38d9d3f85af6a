"""The one kernel selector: which delta-rule path a forward takes, decided here and nowhere else.

The kernel entry points (`chunk_delta_rule`, `chunk_delta_rule_with_states`, `chunk_gated_delta_rule`)
and every mixer of the family (DeltaNet, Gated DeltaNet, DeltaProduct: models/layers/hooked_recurrence.py)
call `select_kernel` (or `select_kernel_for`, which reads the facts off the tensors) and run the path
it returns. A mixer keeps the answer as `mixer.last_kernel` and logs it on the "deltalens.kernels"
logger at DEBUG level. The answer is a `KernelChoice`: the path's name and the reason, in words.

The rules, first match wins ("gated" = a decay g is given: Gated DeltaNet, DeltaProduct with its
forget gate; a DeltaProduct without one runs the plain delta rule on its n_h sub-tokens per token):

reference       a state_edit is set (token by token, edit(t, S) after every step); wins over all below.
                Pinned by test_state_edit_runs_the_reference, test_rules[reference-*].
replay          a hook on hook_state changed a state (returned another tensor, or edited it in place):
                re-run from each changed step; between edits DeltaNet runs the chunked torch kernel,
                Gated DeltaNet / DeltaProduct `chunk_gated_delta_rule`'s states path (chosen by these rules).
                Pinned by test_a_hook_edit_replays, test_rules[replay-*].
fla_rows        the states of some rows only (a StateTap: `rows_only`), no gradient wanted, CUDA with fla
                importable (use_fla None or True), fp32 / bf16 / fp16, renorm_every = 0, T > 0: o from the
                fla kernel the plain forward runs, S_t at the kept rows rebuilt from the chunk-start states
                and WY factors (bf16 / fp16: fla's own chunk forward, piece by piece; fp32: fla's fused
                recurrent kernel for o, our chunked fp32 factors), models/ops/fla_state_rows.py.
                Pinned by test_rules[fla_rows-*], tests/models/test_emulated_cuda_rows.py.
c_states        states wanted (a hook on hook_state; with_states=True), CPU (the initial state too),
                no gradient wanted (or native=True), renorm_every = 0, T > 0, the C kernel builds here.
                Pinned by test_hook_state_without_grad_runs_c_states, test_rules[c_states-*].
chunked_states  states wanted, and any of: a gradient wanted with native=None, not on a CPU,
                renorm_every > 0, no C kernel here, native=False, T = 0. use_fla does not apply (fla's
                kernels return no states). Pinned by test_hook_state_with_grad_runs_chunked_states,
                test_hook_state_without_c_kernel, test_renormalised_forward_runs_chunked,
                test_rules[chunked_states-*].
fla_recurrent   no states wanted; use_fla=True, or use_fla=None on CUDA with fla importable; fp32 and,
                when gated, no gradient wanted (fla's gated recurrent kernel has no backward). With
                renorm_every > 0 all segments in one call (models/ops/fla_kernels.py). The dtype is
                the one the fla call takes q, k, v in (precision.fla_dtype: autocast's, else the widest).
                Pinned by test_rules[fla_recurrent-*] (the choice: CUDA only), the emulated-CUDA tests
                (tests/models/test_emulated_cuda.py) and test_cuda_forward_runs_fla (pytest -m cuda).
fla_chunk       as fla_recurrent, but bf16 / fp16, or gated fp32 with a gradient wanted.
                Pinned by test_rules[fla_chunk-*] (the choice), the emulated-CUDA tests and -m cuda.
                Where states are wanted (c_states / chunked_states below) and the plain forward would
                run fla_*, the layer runs that fla path for o and the states path only for S_t, so a
                capture's logits are the plain forward's (models/layers/hooked_recurrence.py).
c               no states wanted, fla not used, CPU (the initial state too), renorm_every = 0, T > 0, the
                C kernel builds here (native=None) or native=True; the plain delta rule also needs q, k,
                v, beta on one device. Pinned by test_forward_runs_the_c_kernel, test_rules[c-*].
chunked         no states wanted, fla not used, and any of: not on a CPU, renorm_every > 0, no C kernel
                here, native=False, T = 0, q, k, v, beta on several devices (plain delta rule).
                Pinned by test_forward_without_c_kernel_runs_chunked,
                test_renormalised_forward_runs_chunked, test_rules[chunked-*].

Errors, raised by the selector: use_fla=True where fla cannot run (not CUDA, or fla not importable);
native=True where the C kernel cannot (not CPU, renorm_every > 0, T = 0, or it does not build; a gated
empty sequence runs chunked even then); a gated use_fla=True together with with_states=True is
refused by `chunk_gated_delta_rule` itself.
use_fla does not apply where every S_t is wanted (fla's kernels return no S_t); use_fla=False keeps a
StateTap's rows off fla_rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from deltalens.models.ops.delta_rule_native import native_kernel_available, native_kernel_error
from deltalens.models.ops.fla_kernels import fla_kernels_available
from deltalens.models.ops.precision import fla_dtype

__all__ = [
    "KernelChoice",
    "select_kernel",
    "select_kernel_for",
    "select_torch_chunked",
    "PATHS",
    "FLA_CHUNK",
    "FLA_RECURRENT",
    "C",
    "CHUNKED",
    "C_STATES",
    "CHUNKED_STATES",
    "REFERENCE",
    "REPLAY",
    "FLA_ROWS",
]

FLA_CHUNK = "fla_chunk"  # fla's Triton chunk kernel (CUDA)
FLA_RECURRENT = "fla_recurrent"  # fla's Triton fused recurrent kernel (CUDA)
C = "c"  # the C kernel, models/ops/csrc/delta_rule.c (CPU)
CHUNKED = "chunked"  # the chunked WY/UT torch kernel (any device)
C_STATES = "c_states"  # the C kernel copying every S_t out (CPU, inference)
CHUNKED_STATES = "chunked_states"  # the chunked torch kernel with every S_t (differentiable)
REFERENCE = "reference"  # the token-by-token recurrence with a state_edit
REPLAY = "replay"  # re-run from the states a hook_state hook edited
FLA_ROWS = "fla_rows"  # fla's forward for o, the kept rows' S_t rebuilt from its chunk states (CUDA)
PATHS = (FLA_CHUNK, FLA_RECURRENT, C, CHUNKED, C_STATES, CHUNKED_STATES, REFERENCE, REPLAY, FLA_ROWS)
STATE_PATHS = (C_STATES, CHUNKED_STATES)

FLA_NEEDS = (
    "use_fla=True needs CUDA tensors and an importable fla; pass use_fla=None or False to use the pure-torch kernel."
)
GATED_FLA_NEEDS = "use_fla=True needs CUDA tensors, an importable fla and with_states=False."


@dataclass(frozen=True)
class KernelChoice:
    """The path a delta-rule forward takes (one of PATHS) and why, in words."""

    path: str
    reason: str

    def __post_init__(self) -> None:
        if self.path not in PATHS:
            raise ValueError(f"unknown kernel path {self.path!r}; the paths are {', '.join(PATHS)}.")

    @property
    def gives_states(self) -> bool:
        """True for the paths that return every S_t (c_states, chunked_states)."""
        return self.path in STATE_PATHS

    def require(self, paths: tuple[str, ...], where: str) -> None:
        """Refuse a choice that `where` cannot run (a caller passed the wrong kind of kernel)."""
        if self.path not in paths:
            raise ValueError(f"{where} cannot run the {self.path!r} path; it runs {', '.join(paths)}.")

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


def select_kernel(
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    needs_grad: bool = False,
    length: int = 1,
    gated: bool = False,
    wants_states: bool = False,
    state_edit: bool = False,
    hook_edited: bool = False,
    rows_only: bool = False,
    renorm_every: int = 0,
    use_fla: Optional[bool] = None,
    native: Optional[bool] = None,
    state_device: Optional[str] = None,
    devices_agree: bool = True,
    fla_available: Optional[bool] = None,
    native_available: Optional[bool] = None,
) -> KernelChoice:
    """The path for these facts (the module docstring's table, in its order).

    device: q's device type ("cpu", "cuda", ...). dtype: the one dtype an fla call would take q, k, v
    in (`precision.fla_dtype`: autocast's under autocast, else the widest of the three). needs_grad:
    grad mode is on and an input requires a gradient. length: T (sub-tokens for a DeltaProduct).
    gated: a decay g is given.
    wants_states: every S_t is asked for (a hook on hook_state; with_states=True). state_edit: a
    state_edit callback is set. hook_edited: a hook on hook_state changed the states it was shown.
    rows_only: with wants_states, only some rows' states are wanted (a StateTap) and the caller runs fla_rows.
    renorm_every: R of the renormalised delta rule (0 = off). use_fla, native: the callers'
    overrides (None = automatic, True = require, False = never). state_device: the initial state's
    device type (None: no initial state). devices_agree: q, k, v and beta share one device.
    fla_available, native_available: None = ask this machine (only when the answer matters); a
    bool stands in for it (tests pin the CUDA paths on a CPU this way).
    """
    edited = _edit_path(state_edit, hook_edited)
    if edited is not None:
        return edited
    fla_here = _Memo(fla_available, fla_kernels_available)
    if wants_states:
        rows_on_fla = rows_only and not (needs_grad or renorm_every) and length > 0 and use_fla is not False
        rows_on_fla = rows_on_fla and dtype in (torch.float32, torch.bfloat16, torch.float16)
        if rows_on_fla and device == "cuda" and fla_here():
            how = "fla's fused recurrent kernel, chunk states ours" if dtype == torch.float32 else "fla's chunk forward"
            return KernelChoice(FLA_ROWS, f"CUDA, {dtype}, kept rows only: o from {how}; S_t rebuilt at the rows")
        if gated and length == 0:
            return KernelChoice(CHUNKED_STATES, "an empty sequence: nothing to run")
        if native is None and needs_grad:
            return KernelChoice(CHUNKED_STATES, "states with gradients: the C kernel's states carry no graph")
        use_c, why = _c_kernel(native, device, state_device, length, renorm_every, native_available)
        if use_c and native is None:
            why = "CPU, no gradient: the C kernel copies each S_t out as it passes"
        return KernelChoice(C_STATES if use_c else CHUNKED_STATES, why)

    if use_fla is None:
        use_fla = device == "cuda" and fla_here()
    if use_fla:
        if not (device == "cuda" and fla_here()):
            raise RuntimeError(GATED_FLA_NEEDS if gated else FLA_NEEDS)
        per_segment = f", one segment of {renorm_every} tokens at a time" if renorm_every else ""
        if dtype == torch.float32 and not (gated and needs_grad):
            return KernelChoice(FLA_RECURRENT, f"CUDA, fp32: fla's chunk kernel refuses fp32{per_segment}")
        why = "fp32 with gradients: the recurrent kernel has no backward" if dtype == torch.float32 else str(dtype)
        return KernelChoice(FLA_CHUNK, f"CUDA, {why}{per_segment}")
    if gated and length == 0:
        return KernelChoice(CHUNKED, "an empty sequence: nothing to run")
    use_c, why = _c_kernel(native, device, state_device, length, renorm_every, native_available)
    if use_c and not (gated or devices_agree):
        return KernelChoice(CHUNKED, "q, k, v and beta on different devices")
    return KernelChoice(C if use_c else CHUNKED, why)


def select_kernel_for(q, k, v, beta, g=None, initial_state=None, **options) -> KernelChoice:
    """`select_kernel` with the facts read off the tensors (fla's layout: q [B, T, H, K], g the
    log-decay or None); options are its other arguments (wants_states, state_edit, hook_edited,
    renorm_every, use_fla, native, ...)."""
    inputs = (q, k, v, beta, g, initial_state)
    return select_kernel(
        device=q.device.type,
        dtype=fla_dtype(q, k, v),  # the dtype an fla call would take them in (models/ops/precision.py)
        needs_grad=torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs),
        length=q.shape[1],
        gated=g is not None,
        state_device=None if initial_state is None else initial_state.device.type,
        devices_agree=k.device == v.device == beta.device == q.device,
        **options,
    )


def select_torch_chunked(
    family: str, wants_states: bool = False, state_edit: bool = False, hook_edited: bool = False
) -> KernelChoice:
    """The path of a family whose only fast kernel is our chunked torch one (Comba, RWKV-7; KDA off fla):
    the reference under an edit, a replay after a hook edited states, else the chunked kernel, with every
    S_t where they are wanted. `family` names it in the reason, e.g. "Comba"."""
    edited = _edit_path(state_edit, hook_edited)
    if edited is not None:
        return edited
    if wants_states:
        return KernelChoice(CHUNKED_STATES, f"{family}: the chunked torch kernel with every S_t")
    return KernelChoice(CHUNKED, f"{family}: the chunked torch kernel")


def _edit_path(state_edit: bool, hook_edited: bool) -> Optional[KernelChoice]:
    """The two paths an edit forces, whatever the kernels (the table's first two rows), or None."""
    if state_edit:
        return KernelChoice(REFERENCE, "a state_edit is set: token by token, edit(t, S) after every step")
    if hook_edited:
        return KernelChoice(REPLAY, "hook_state changed states: re-run from each changed step, with states between")
    return None


class _Memo:
    """A machine fact asked for at most once, and only when a rule needs it (building the C kernel or
    importing fla takes seconds); `given` stands in for it when not None."""

    def __init__(self, given: Optional[bool], ask) -> None:
        self.value, self.ask = given, ask

    def __call__(self) -> bool:
        if self.value is None:
            self.value = bool(self.ask())
        return self.value


def _c_kernel(native, device, state_device, length, renorm_every, native_available) -> tuple[bool, str]:
    """(run the C kernel?, why): native None = when it can, True = it must (else an error), False = never."""
    available = _Memo(native_available, native_kernel_available)
    on_cpu = device == "cpu" and state_device in (None, "cpu")
    possible = on_cpu and not renorm_every and length > 0
    if native is None:
        if not possible:
            if not on_cpu:
                return False, f"not on a CPU ({device}): no C kernel there"
            if renorm_every:
                return False, f"renorm_every={renorm_every}: the C kernel does not renormalise"
            return False, "an empty sequence"
        if not available():
            return False, f"no C kernel here ({native_kernel_error() or 'not available'})"
        return True, "CPU: the C kernel"
    if native and not (possible and available()):
        raise RuntimeError(
            "native=True needs CPU tensors, renorm_every=0 and a C kernel that builds here"
            + ("" if available() else f" ({native_kernel_error() or 'not available'})")
        )
    return bool(native), f"native={native!r}"
