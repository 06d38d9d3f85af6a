"""Capture activations of any deltalens model on a batch of traces, aligned with the trace's labels.

`capture(model, batch, names)` runs `model.run_with_cache` with a names filter and returns a
`Capture`: every activation flattened to one row per real token (padding dropped), next to that
token's labels from the batch (tasks.dataset): trace index, position, `TokenKind` (init / action /
print / reveal / other), the action's permutation (lex rank) and index, the true state s_t, the
revealed value. Rows are in (trace, position) order, so tokens of one trace are contiguous.

Names are exact hook names or shorthands, expanded per layer for the model's architecture:

    "beta", "beta_logit", "gate", "state", "k", "q", "v", "z"
               blocks.{l}.attn.hook_<x> (the delta-rule family; gate only where the state decays;
               the Transformer has k, q, v, z; the LSTM none)
    "resid"    the residual stream read by probes: hook_embed then the output of every layer
               (blocks.{l}.hook_resid_post; for the LSTM blocks.{l}.hook_hidden)

Paper notation: hook_beta is beta_t (B, T, H); hook_k is k_t after L2 norm (B, T, H, d_k);
hook_state is S_t (B, T, H, d_k, d_v) in fla's [K, V] layout, the state after token t; a DeltaProduct's
hook_beta and hook_k carry a factor axis (B, T, H, n_h[, d_k]).

At scale (24 layers x 16 heads x a 128 x 128 state is 1 MiB per layer and token) keep less:
`layers=[11]` keeps one layer's hooks (and the global ones), `kinds=(TokenKind.ACTION,
TokenKind.REVEAL)` or `positions=` (a (B, T) bool mask) only some tokens. The size is estimated first
(interp/capture_plan.py: a one-token forward measures each hook's bytes per token); a capture above
the limit (`max_bytes`, $DELTALENS_MAX_CAPTURE_GB, or half the free memory) is refused in one
sentence, and below it the batch is streamed a slice of traces at a time (`batch_size`, or as many
as fit), each hook keeping only the selected rows as it fires; a delta-rule layer's S_t is not hooked but
tapped (models/layers/hooked_recurrence.StateTap), so its kernel writes only the selected rows.
`Capture.nbytes` is what was kept, `Capture.estimated_bytes` what the plan said. A capture bigger than
memory goes to disk: `capture(..., to=DIR)` writes each slice's rows to safetensors shards as it goes and
returns `open_capture(DIR)`, read lazily (interp/capture_disk.py); the probes take it like any Capture.

Batches of held-out traces for a checkpoint come from loading/opened.py (`open_checkpoint(path)
.batch(n)`), or from any `tasks.dataset.make_batch`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Union

import torch
from transformer_lens import HookedRootModule

from deltalens.core.display import progress
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.interp.batch_inputs import as_batch
from deltalens.interp.capture_disk import CaptureWriter, open_capture
from deltalens.interp.capture_names import (  # re-exported: the names a capture is asked for
    ATTN_SHORTHANDS,
    DELTA_RULE_ONLY,
    expand_names,
    residual_names,
)
from deltalens.interp.capture_plan import LABEL_BYTES, CapturePlan, plan_capture, query_axis_names, row_bytes
from deltalens.interp.capture_result import KIND_NAMES, LABELS, Capture, token_kinds  # noqa: F401 (re-exported)
from deltalens.models.architecture import (
    architecture_of,
    article_of,
    delta_layers_of,
    is_delta_rule,
    require_delta_rule,
)
from deltalens.models.layers.hooked_recurrence import HookedRecurrenceMixin, StateTap
from deltalens.models.layers.replayed_states import note_recorder

__all__ = [
    "ATTN_SHORTHANDS",
    "DELTA_RULE_ONLY",
    "Capture",
    "capture",
    "delta_rule_capture",
    "expand_names",
    "require_layers",
    "residual_names",
]

_LAYER = re.compile(r"^blocks\.(\d+)\.")

Names = Union[str, Sequence[str], Callable[[str], bool], None]


@torch.no_grad()
@integer_indices("layers")
def capture(
    model,
    batch: dict[str, torch.Tensor],
    names: Names = ("resid",),
    with_logits: bool = False,
    hooks: Sequence[tuple[str, Callable]] = (),
    *,
    layers: Sequence[int] | None = None,
    kinds: int | Sequence[int] | None = None,
    positions: torch.Tensor | None = None,
    batch_size: int | None = None,
    max_bytes: int | None = None,
    to: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> Capture:
    """Run `model` on `batch["tokens"]` and keep the named activations at the selected real tokens.

    names: shorthands or hook names (see the module docstring), or a callable filter on hook names.
    hooks: forward hooks active during the run (e.g. an intervention), so the capture shows the
        edited model. Activations are moved to the CPU as float32.
    layers: keep only hooks of these layers (blocks.{l}.*; hook_embed and ln_final stay).
    kinds: keep only tokens of these TokenKind(s), e.g. (TokenKind.ACTION, TokenKind.REVEAL).
    positions: (B, T) bool, keep only these tokens (combined with kinds; padding is never kept).
    batch_size: traces run at once (None: as many as fit, see interp/capture_plan.py).
    max_bytes: the capture's memory limit (None: $DELTALENS_MAX_CAPTURE_GB or half the free memory);
        the size is estimated first and a capture above it refused in one sentence.
    to: a folder: each slice's kept rows are written there (safetensors shards and an index,
        interp/capture_disk.py) instead of kept, so only a slice must fit in memory; the result is
        `open_capture(to)`, read lazily. A folder holding a capture already is refused unless `overwrite`, which
        replaces that capture's own files only (interp/capture_disk.py).

    >>> cap = dl.capture(model, batch, names=("beta", "state"))
    >>> cap[dl.act_name("beta", 0)].shape[-1]             # (tokens, head)
    4
    """
    arch = architecture_of(model)
    batch = as_batch(model, batch)  # a batch, token ids (B, T) or REPL text (interp/batch_inputs.py)
    wanted, names_filter = _name_filter(model, names, layers)
    tokens = batch["tokens"]
    lengths = batch["lengths"] if batch.get("lengths") is not None else (tokens != 0).sum(1)
    B, T = tokens.shape
    keep = _kept(batch, lengths, kinds, positions)  # (B, T) bool
    trace, position = keep.nonzero(as_tuple=True)

    was_training = model.training
    model.eval()
    try:
        sizes = _row_sizes(model, tokens, names_filter, wanted)
        n_vars = batch["states"].shape[-1] if "states" in batch else 0
        plan = _plan(model, sizes, len(trace), (B, T), n_vars, with_logits, batch_size, max_bytes, to is not None)
        sink = _sink(to, list(sizes), len(trace), plan, with_logits, overwrite)
        try:
            _streamed(model, tokens, lengths, keep, list(sizes), hooks, with_logits, plan, sink)
        except BaseException:
            if isinstance(sink, CaptureWriter):  # to= given
                sink.abandon()
            raise
    finally:
        model.train(was_training)
    labels, states = _labels(batch, trace, position)
    if isinstance(sink, CaptureWriter):  # to= given
        return _finished_on_disk(model, sink, plan, labels, states, lengths, to)
    acts, logits = sink.result()
    return Capture(
        arch=arch,
        acts=acts,
        labels=labels,
        states=states,
        n_traces=B,
        n_layers=model.cfg.n_layers,
        n_heads=model.cfg.n_heads,
        lengths=lengths.cpu(),
        logits=logits,
        estimated_bytes=plan.result_bytes,
        slices=plan.slices,
        delta_layers=tuple(delta_layers_of(model)),
    )


def _plan(model, sizes, rows: int, shape, n_vars: int, with_logits: bool, batch_size, max_bytes, on_disk: bool):
    """The capture's memory plan (interp/capture_plan.py): the size estimated and checked, the slices chosen."""
    vocab = _vocab_of(model)
    return plan_capture(
        rows=rows,
        row_sizes=sizes,
        n_traces=shape[0],
        T=shape[1],
        extra_row_bytes=LABEL_BYTES + 8 * n_vars + (4 * vocab if with_logits else 0),
        slice_extra_per_token=4 * vocab,
        slice_traces=batch_size,
        max_bytes=max_bytes,
        on_disk=on_disk,
    )


def _sink(
    to, names: list[str], rows: int, plan: CapturePlan, with_logits: bool, overwrite: bool
) -> _InMemory | CaptureWriter:
    """Where the kept rows go: kept in memory, or written to the folder `to`."""
    if to is None:
        return _InMemory(names, plan)
    return CaptureWriter(to, names, rows, plan.result_bytes, with_logits, overwrite=overwrite)


def _finished_on_disk(model, sink, plan, labels, states, lengths, to) -> Capture:
    """The on-disk capture's labels and index written (everything is removed if that fails), opened lazily."""
    meta = {
        "arch": architecture_of(model),
        "n_traces": int(lengths.shape[0]),
        "n_layers": model.cfg.n_layers,
        "n_heads": model.cfg.n_heads,
        "rows": len(labels["trace"]),
        "estimated_bytes": plan.result_bytes,
        "slices": plan.slices,
        "delta_layers": delta_layers_of(model),
    }
    try:
        sink.finish(labels, states, lengths.cpu(), meta)
    except BaseException:
        sink.abandon()
        raise
    return open_capture(to)


def _row_sizes(model, tokens: torch.Tensor, names_filter, wanted) -> dict[str, int]:
    """Bytes per kept token of each hook the run will keep, in the order asked; a hook asked for by name that the
    model does not have is refused by name."""
    sizes = row_bytes(model, tokens, names_filter, tokens.shape[1], names=wanted)
    if wanted is None:
        return sizes
    missing = [name for name in wanted if name not in sizes]
    if missing:
        raise DeltalensError(
            f"{article_of(architecture_of(model))} has no hook named {', '.join(map(repr, missing))}; "
            f"list its hooks with model.hook_dict (or use shorthands such as 'resid', 'beta')."
        )
    return {name: sizes[name] for name in wanted}


def _name_filter(model, names, layers):
    """(the hook names asked for, or None for a callable filter; the filter the run applies), both restricted to
    `layers` (checked) when given."""
    if isinstance(names, str):
        names = [names]
    wanted = None if callable(names) else expand_names(model, names or [])
    layers = None if layers is None else _checked_layers(layers, model)
    if wanted is not None and layers is not None:
        wanted = [name for name in wanted if _in_layers(name, layers)]
    base_filter = names if wanted is None else wanted.__contains__  # None: names is the filter
    return wanted, base_filter if layers is None else (lambda n: base_filter(n) and _in_layers(n, layers))


def _labels(batch, trace: torch.Tensor, position: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each kept token's labels from the batch (-1 where the batch has no such label), and its true state
    (rows x variables; no columns without one)."""
    labels = {"trace": trace, "position": position, "token": batch["tokens"].cpu()[trace, position]}
    for key, source in (
        ("kind", "kinds"),
        ("action_pos", "action_pos"),
        ("perm_id", "perm_ids"),
        ("answer", "answers"),
        ("reveal_var", "reveal_vars"),
        ("state_step", "state_steps"),
    ):
        value = batch.get(source)
        labels[key] = value.cpu()[trace, position] if value is not None else torch.full_like(trace, -1)
    states = batch.get("states")
    return labels, (states.cpu()[trace, position] if states is not None else torch.zeros(len(trace), 0).long())


def _checked_layers(layers: Sequence[int], model) -> set[int]:
    n = model.cfg.n_layers
    if isinstance(layers, int):
        layers = [layers]
    out = set()
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n <= layer < n:
            raise DeltalensError(f"layers must be layer indices of this {n}-layer model, got {layer!r}")
        out.add(layer % n)
    return out


def _in_layers(name: str, layers: set[int]) -> bool:
    """True unless `name` is a per-layer hook (blocks.{l}.*) of a layer not in `layers`."""
    match = _LAYER.match(name)
    return match is None or int(match.group(1)) in layers


def _kept(batch, lengths: torch.Tensor, kinds, positions) -> torch.Tensor:
    """(B, T) bool: the real tokens the kind and position filters keep."""
    tokens = batch["tokens"]
    B, T = tokens.shape
    keep = torch.arange(T)[None, :] < lengths.cpu()[:, None]
    if kinds is not None:
        if "kinds" not in batch:
            raise DeltalensError("kinds= needs a batch with token kinds (tasks.dataset.make_batch gives them)")
        keep &= torch.isin(batch["kinds"].cpu(), torch.tensor(token_kinds(kinds)))
    if positions is not None:
        positions = torch.as_tensor(positions).cpu()
        if positions.dtype != torch.bool or tuple(positions.shape) != (B, T):
            raise DeltalensError(
                f"positions must be a bool tensor shaped like the tokens {(B, T)}, got "
                f"{positions.dtype} {tuple(positions.shape)}"
            )
        keep &= positions
    return keep


def _vocab_of(model) -> int:
    cfg = getattr(model, "cfg", None)
    return int(getattr(cfg, "d_vocab_out", None) or getattr(cfg, "d_vocab", 0) or 0)


def _rows(tensor: torch.Tensor, name: str, t: torch.Tensor, p: torch.Tensor, T: int) -> torch.Tensor:
    """The kept rows of a hook tensor (b, T_b, ...) as float32 on the CPU; a pattern's key axis padded to T."""
    if query_axis_names(name):  # (b, H, T_q, T_k) -> (n, H, T)
        rows = tensor.transpose(1, 2)[t, p]
        return torch.nn.functional.pad(rows.detach().float(), (0, T - rows.shape[-1])).cpu()
    return tensor[t, p].detach().float().cpu()


class _InMemory:
    """Where `_streamed` puts the kept rows of an in-memory capture: lists joined at the end."""

    def __init__(self, names: list[str], plan: CapturePlan):
        self.parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        self.logits: list[torch.Tensor] = []
        self.plan = plan

    def add(self, name: str, rows: torch.Tensor) -> None:
        self.parts[name].append(rows)

    def add_logits(self, rows: torch.Tensor) -> None:
        self.logits.append(rows)

    def result(self):
        acts = {name: _joined(parts, name, self.plan) for name, parts in self.parts.items()}
        return acts, (torch.cat(self.logits) if self.logits else None)


def _streamed(model, tokens, lengths, keep, names, hooks, with_logits, plan: CapturePlan, sink):
    """Run the batch a slice of traces at a time, handing only the selected rows of each hook to `sink`
    (`_InMemory`, or capture_disk.CaptureWriter, which writes them out)."""
    own_hooks = isinstance(model, HookedRootModule)  # deltalens's models: gather inside the hooks
    tapped = _state_mixers(model, names) if own_hooks else {}  # hook_state name -> its mixer
    try:
        _slices(model, tokens, lengths, keep, names, hooks, with_logits, plan, sink, own_hooks, tapped)
    finally:
        for mixer in tapped.values():
            mixer.state_tap = None


def _state_mixers(model, names) -> dict:
    """hook_state name -> the mixer that owns it, for the names a StateTap can serve: such a layer writes
    only the kept rows' S_t (models/layers/hooked_recurrence.py) instead of every position's."""
    owners = {id(m.hook_state): m for m in model.modules() if isinstance(m, HookedRecurrenceMixin)}
    hook_dict = getattr(model, "hook_dict", {})
    out = {}
    for name in names:
        hook = hook_dict.get(name)
        if name.endswith("attn.hook_state") and hook is not None and id(hook) in owners:
            out[name] = owners[id(hook)]
    return out


def _slices(model, tokens, lengths, keep, names, hooks, with_logits, plan, sink, own_hooks, tapped):
    """`_streamed`'s loop over slices of traces; `tapped` layers deliver their kept S_t rows themselves."""
    B, T = tokens.shape
    device = next(model.parameters()).device
    wanted = set(names)
    starts = range(0, B, plan.slice_traces)
    for start in progress(starts, enabled=len(starts) > 1, desc="capture", total=len(starts)):
        stop = min(start + plan.slice_traces, B)
        T_b = int(lengths[start:stop].max()) if stop > start else 0
        if T_b == 0:
            continue
        piece = tokens[start:stop, :T_b].to(device)
        t, p = keep[start:stop, :T_b].nonzero(as_tuple=True)
        t_dev, p_dev = t.to(device), p.to(device)
        if own_hooks:
            states: dict[str, torch.Tensor] = {}  # a hook_state's rows, handed over after the forward

            def gather(tensor, hook, t=t_dev, p=p_dev, kept=states):
                if not hook.name.endswith("hook_state"):
                    sink.add(hook.name, _rows(tensor, hook.name, t, p, T))
                    return

                def store(trajectory: torch.Tensor, key: str = hook.name) -> None:
                    kept[key] = _rows(trajectory, key, t, p, T)

                store(tensor)
                note_recorder(hook, store)  # a layer that replays an edit hands over the trajectory it ran

            for name, mixer in tapped.items():

                def deliver(rows: torch.Tensor, name: str = name) -> None:
                    sink.add(name, rows.detach().float().cpu())

                mixer.state_tap = StateTap((t, p), deliver)
            gathered = [(name, gather) for name in names if name not in tapped]
            with model.hooks(fwd_hooks=[*hooks, *gathered]):
                skip_head = not with_logits and is_delta_rule(architecture_of(model))
                out = model(piece, return_type=None) if skip_head else model(piece)  # None: no LM head
            for name, rows in states.items():
                sink.add(name, rows)
        else:  # TransformerLens's bridge: its own caching hooks, the slice's cache dropped after it
            with model.hooks(fwd_hooks=list(hooks)):
                out, cache = model.run_with_cache(piece, names_filter=lambda n: n in wanted)
            for name in names:
                sink.add(name, _rows(cache[name], name, t_dev, p_dev, T))
            del cache
        if with_logits:
            sink.add_logits(out[t_dev, p_dev].detach().float().cpu())
        del out


def _joined(parts: list[torch.Tensor], name: str, plan: CapturePlan) -> torch.Tensor:
    if len(parts) == 1:  # one slice: its rows as they are (a cat would hold them twice at the peak)
        return parts[0]
    if parts:
        return torch.cat(parts)
    return torch.zeros(0, plan.row_bytes[name] // 4)  # no row kept


def require_layers(cap: Capture, names: Sequence[str], tool: str) -> list[int]:
    """The capture's delta-rule layers (a hybrid's attention layers left out) that hold every `names` hook (a
    capture made with layers= has only those); none: one sentence saying what is missing and how to capture it."""
    layers = cap.recurrent_layers
    if not layers:
        raise DeltalensError(
            f"{tool} reads the delta rule's layers, and this capture of {article_of(cap.arch)} has none; "
            "use the residual-stream probes (linear_probes on 'resid') instead."
        )
    held = [l for l in layers if all(f"blocks.{l}.attn.hook_{x}" in cap for x in names)]
    if held:
        return held
    missing = [f"blocks.{l}.attn.hook_{x}" for l in layers for x in names if f"blocks.{l}.attn.hook_{x}" not in cap]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DeltalensError(
            f"the capture lacks {shown} (delta-rule layers {layers}); capture with names={tuple(names)!r}."
        )
    return layers


def delta_rule_capture(source, batch, names) -> Capture:
    """A Capture of a delta-rule model: `source` itself when it is one, else `capture(source, batch, names)`.

    The probes that read beta or the state S_t take either a Capture or a model with a batch.
    """
    if isinstance(source, Capture):
        if not is_delta_rule(source.arch):
            raise DeltalensError(
                f"this capture comes from a {source.arch} model, which has no beta; the "
                "eigenvalue and subspace probes need a delta-rule model (DeltaNet, Gated DeltaNet, "
                "DeltaProduct)."
            )
        return source
    if batch is None:
        raise DeltalensError("pass a Capture, or a model together with a batch of traces (or token ids, or text).")
    if not delta_layers_of(source):
        require_delta_rule(source)
    return capture(source, batch, names=names)
