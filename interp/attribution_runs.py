"""The clean and the corrupted run of attribution patching, without the work its metric never reads.

Attribution patching (interp/attribution_patching.py) needs the clean run's activations at the sites, the
corrupted run's, the metric on both, and the metric's gradient at the corrupted run's sites. A delta-rule LM
(HookedDeltaLM, no hooks of the caller's attached) leaves out three things the result does not depend on:

* logits the metric does not look at. The metric is asked, on two draws of random stand-in logits, which
  positions its gradient reaches; each run then computes the last block's MLP, the final norm and the LM head
  (vocab x d_model, the largest matrix of a 1.3B model) at those positions only and hands the metric logits
  that are NaN everywhere else. A metric whose positions differ between the draws (it picks them by the
  logits' values, and NaN > 0 is False) gets logits everywhere; one that reads a NaN after all (a position
  both draws missed) is run again on logits computed everywhere, so the answer does not rest on the guess.
* the common prefix twice. Before the first position where the two batches' tokens differ a causal model
  computes the same activations in both runs, so clean - corrupt and every estimate there is 0. The clean run
  goes whole and keeps what each delta-rule mixer would carry into that position (its state there, through a
  StateTap that writes only those rows, and its short convolutions' last inputs: models/layers/carry.py); the
  corrupted run continues from there, and so does the backward. (A separate forward of the prefix would cost
  more than it saves on a CPU: every pass streams and packs all the weights, whatever its length.)
* gradients of the weights: switched off for the corrupted run; gradients go to the activations only.

Any other model (or one with hooks attached) runs both batches whole, logits everywhere, as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.trace_pairs import metric_value
from deltalens.models.layers.carry import Carry
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin, StateTap

__all__ = ["Runs", "SiteNames", "attribution_runs", "read_positions"]

Metric = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SiteNames:
    """Hook names: `keep` cached from the clean run, `watch` (gradients wanted) and `store` (kept, no gradient)
    from the corrupted one."""

    keep: frozenset[str]
    watch: frozenset[str]
    store: frozenset[str]


@dataclass
class Runs:
    """Both runs' activations from position `start` on (before it both runs are the same), the metric on each,
    and the metric's gradient at each watched activation (zeros where it does not reach)."""

    clean_value: float
    corrupt_value: float
    clean: dict[str, torch.Tensor]
    corrupt: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor]
    start: int = 0
    timings: dict[str, float] = field(default_factory=dict)


def _lean(model) -> bool:
    """True when the shortcuts apply: a delta-rule LM with the known block (MLP after the mixer, position-wise
    head) whose mixers all carry a state, and no hook or state_edit of the caller's to see other shapes."""
    from deltalens.models.lm.delta_lm import DeltaBlock, HookedDeltaLM

    if not isinstance(model, HookedDeltaLM) or not all(isinstance(block, DeltaBlock) for block in model.blocks):
        return False
    if any(point.has_hooks() for point in model.hook_dict.values()):
        return False
    return all(hasattr(b.attn, "carry") and getattr(b.attn, "state_edit", None) is None for b in model.blocks)


def read_positions(metric: Metric, shape: tuple[int, int, int], dtype, device) -> Optional[torch.Tensor]:
    """The positions (sorted) at which metric's gradient reaches random logits of `shape` (B, T, vocab) in any
    row; None when that is every position, when two random draws disagree (a metric that picks positions by
    the logits' values, e.g. `where(logits > 0)`, must see them all), or when the metric cannot be asked this
    way (the real run will say why)."""
    found = [_reached(metric, shape, dtype, device, seed) for seed in (0, 1)]
    if found[0] is None or found[1] is None or not torch.equal(found[0], found[1]):
        return None
    return found[0] if len(found[0]) < shape[1] else None


def _reached(metric: Metric, shape: tuple[int, int, int], dtype, device, seed: int) -> Optional[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(seed)  # the caller's random state is left alone
    B, T, V = shape  # random enough to reach every input a smooth metric reads, a fraction of randn's cost
    rows, vocab = (torch.randn(n, generator=generator, device=device) for n in (B * T, V))
    probe = (rows.to(dtype)[:, None] * vocab.to(dtype)[None]).reshape(shape).requires_grad_()
    try:
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(metric(probe), probe, allow_unused=True)
    except (RuntimeError, TypeError, ValueError, IndexError, DeltalensError):
        return None
    return None if grad is None else (grad != 0).any(2).any(0).nonzero()[:, 0]


def _shared_prefix(model, clean: torch.Tensor, corrupt: torch.Tensor) -> int:
    """Tokens before the first position where the batches differ, down to the renormalisation grid."""
    if not all(isinstance(block.attn, HookedRecurrenceMixin) for block in model.blocks):
        return 0  # a hybrid's attention layers carry their keys and values, which the clean run does not keep
    differs = (clean != corrupt).any(0).nonzero()
    if not len(differs):
        return 0  # the same batch twice: every estimate is 0 anyway, and runs whole
    every = math.lcm(1, *(getattr(block.attn, "state_norm_every", 0) or 1 for block in model.blocks))
    return int(differs[0]) // every * every


class _CarryAt:
    """While the clean run goes whole, what each mixer would carry into position `start` (models/layers/carry.py):
    S_{start-1} of every sequence through a StateTap (only those rows are written), and the last inputs before
    `start` of its q/k/v short convolutions through forward pre-hooks. Use as a context around the run."""

    def __init__(self, mixers: list, start: int, batch: int) -> None:
        self.mixers, self.start = mixers, start
        self.carries = [Carry(tokens=start) for _ in mixers]
        self.rows = (torch.arange(batch), torch.full((batch,), start - 1))
        self.handles: list = []

    def __enter__(self) -> _CarryAt:
        for mixer, carry in zip(self.mixers, self.carries):
            mixer.state_tap = StateTap(self.rows, partial(self._state, carry))
            for name in ("q", "k", "v") if getattr(mixer, "use_short_conv", False) else ():
                conv = getattr(mixer, f"{name}_conv1d")
                self.handles.append(conv.register_forward_pre_hook(partial(self._conv, carry, name)))
        return self

    def __exit__(self, *exc) -> None:
        for mixer in self.mixers:
            mixer.state_tap = None
        for handle in self.handles:
            handle.remove()

    @staticmethod
    def _state(carry: Carry, states: torch.Tensor) -> None:
        carry.state = states.detach().float().contiguous()

    def _conv(self, carry: Carry, name: str, conv, args) -> None:
        reach = conv.kernel_size[0] - 1
        carry.conv[name] = args[0][:, max(0, self.start - reach) : self.start].detach()


@contextmanager
def _carrying(mixers: list, carries: list[Carry]) -> Iterator[None]:
    """Each mixer continues from its carry (the corrupted run from `start`)."""
    for mixer, carry in zip(mixers, carries):
        mixer.carry = carry
    try:
        yield
    finally:
        for mixer in mixers:
            mixer.carry = None


@contextmanager
def _weights_frozen(model) -> Iterator[None]:
    """No gradient kept for the weights: the backward goes to the activations only."""
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


class _Span:
    """Positions [lo, hi) of the batch in one forward, and which of them get logits (`local`, None: all)."""

    def __init__(self, model, cols: Optional[torch.Tensor], lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.local = None if cols is None else cols[(cols >= lo) & (cols < hi)] - lo
        self.hooks: list = []
        if self.local is not None:
            local = self.local  # after the last block's mixer every op is per position: keep the read ones
            self.hooks = [(f"blocks.{model.cfg.n_layers - 1}.hook_resid_mid", lambda x, hook: x[:, local.to(x.device)])]

    def place(self, full: Optional[torch.Tensor], logits: torch.Tensor, T: int) -> torch.Tensor:
        """`full` (B, T, vocab; None: all NaN) with this span's logits written in (differentiably)."""
        if full is None and self.local is None and self.lo == 0 and self.hi == T:
            return logits  # the whole run, logits everywhere: as they are
        if full is None:
            full = logits.new_full((logits.shape[0], T, logits.shape[2]), float("nan"))
        at = torch.arange(self.lo, self.hi) if self.local is None else self.local + self.lo
        return full.index_copy(1, at.to(logits.device), logits)


def _grab(acts: dict, act: torch.Tensor, hook, key: str) -> torch.Tensor:
    """Keep a watched activation under the name asked for (a Transformer's hook_z is an alias) and return it, so
    the run goes on from this very tensor (TransformerLens's bridge uses a hook's tensor downstream only when it
    returns one). One that needs no gradient of its own (the first layer, weights frozen) becomes a leaf."""
    acts[key] = act.clone() if act.requires_grad else act.detach().clone().requires_grad_()
    return acts[key]


def _keep(acts: dict, act: torch.Tensor, hook, key: str) -> None:
    acts[key] = act.detach()


def _clean(model, tokens, names: SiteNames, span: _Span, metric, taps) -> tuple:
    """The clean run, whole: its cached activations, its logits where the metric reads them, the metric on them."""
    cache: dict[str, torch.Tensor] = {}
    hooks = [(name, partial(_keep, cache, key=name)) for name in names.keep] + span.hooks
    with torch.no_grad(), taps, model.hooks(fwd_hooks=hooks):
        logits = span.place(None, model(tokens), tokens.shape[1])
        value = metric_value(metric(logits))
    return cache, logits, value


def _differentiable(value):
    """The metric's value as the one-element tensor autograd needs, or one sentence saying what it is instead."""
    if not torch.is_tensor(value) or value.numel() != 1 or not value.requires_grad:
        got = f"a tensor of shape {tuple(value.shape)}" if torch.is_tensor(value) else type(value).__name__
        if torch.is_tensor(value) and value.numel() == 1:
            got = "a tensor cut off from the logits (no gradient: .item(), .detach() or a new tensor)"
        raise DeltalensError(
            f"metric must return a one-element tensor computed from the logits, so it can be differentiated; "
            f"it returned {got}"
        )
    return value


def _corrupt(model, tokens, names: SiteNames, span: _Span, head, metric, lean: bool) -> Optional[tuple]:
    """The corrupted run from span.lo and the backward: (activations, gradients, metric), None on a NaN read."""
    acts: dict[str, torch.Tensor] = {}
    hooks = [(name, partial(_grab, acts, key=name)) for name in names.watch]
    hooks += [(name, partial(_keep, acts, key=name)) for name in names.store if name not in names.watch]
    frozen = _weights_frozen(model) if lean else _nothing()
    with torch.enable_grad(), frozen, model.hooks(fwd_hooks=hooks + span.hooks):
        value = _differentiable(metric(span.place(head, model(tokens[:, span.lo :]), tokens.shape[1])))
        if span.local is not None and bool(value.isnan()):
            return None
        wanted = sorted(n for n in names.watch if acts.get(n) is not None and acts[n].requires_grad)
        grads = torch.autograd.grad(value, [acts[n] for n in wanted], allow_unused=True)
    grad_of = {n: torch.zeros_like(acts[n]) if g is None else g for n, g in zip(wanted, grads)}
    return {n: a.detach() for n, a in acts.items()}, grad_of, float(value.detach())


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _both(model, clean_t, corrupt_t, metric, names: SiteNames, cols, start: int, lean: bool) -> Optional[Runs]:
    """The clean run (whole) and the corrupted one (from `start`, carried on from the clean run's state there);
    None when the metric read a position left out (NaN)."""
    T, began = clean_t.shape[1], time.perf_counter()
    mixers = [block.attn for block in model.blocks] if start else []
    taps = _CarryAt(mixers, start, clean_t.shape[0])
    clean_cache, clean_logits, clean_value = _clean(model, clean_t, names, _Span(model, cols, 0, T), metric, taps)
    if cols is not None and math.isnan(clean_value):
        return None
    clean_cache = {name: act[:, start:] for name, act in clean_cache.items()}
    timings = {"clean": time.perf_counter() - began}
    # the logits before `start` are the clean run's: the corrupted run's are the same there
    head = clean_logits if start else None
    with _carrying(mixers, taps.carries):
        corrupt = _corrupt(model, corrupt_t, names, _Span(model, cols, start, T), head, metric, lean)
    if corrupt is None:
        return None
    acts, grads, corrupt_value = corrupt
    timings["corrupt+backward"] = time.perf_counter() - began - timings["clean"]
    return Runs(clean_value, corrupt_value, clean_cache, acts, grads, start, timings)


def attribution_runs(model, clean_t: torch.Tensor, corrupt_t: torch.Tensor, metric: Metric, names: SiteNames) -> Runs:
    """Both runs of attribution patching (module docstring): the lean ones where they apply, else whole."""
    lean = _lean(model)
    cols, start = None, 0
    if lean:
        B, T = corrupt_t.shape
        vocab, dtype = model.config.vocab_size, model.lm_head.weight.dtype
        cols = read_positions(metric, (B, T, vocab), dtype, clean_t.device)
        start = _shared_prefix(model, clean_t, corrupt_t)
    runs = _both(model, clean_t, corrupt_t, metric, names, cols, start, lean)
    if runs is None:  # the metric read a position the stand-in logits did not show: logits everywhere
        runs = _both(model, clean_t, corrupt_t, metric, names, None, start, lean)
    assert runs is not None
    return runs
