"""Capture activations of any deltalens model on a batch of traces, aligned with the trace's labels.

`capture(model, batch, names)` runs `model.run_with_cache` with a names filter and returns a
`Capture`: every activation flattened to one row per real token (padding dropped), next to that
token's labels from the batch (tasks.dataset): trace index, position, `TokenKind` (init / action /
print / reveal / other), the action's permutation (lex rank) and index, the true state s_t, the
revealed value. Rows are in (trace, position) order, so tokens of one trace are contiguous.

Names are exact hook names or shorthands, expanded per layer for the model's architecture:

    "beta", "beta_logit", "state", "k", "q", "v", "z"   blocks.{l}.attn.hook_<x>  (DeltaNet; the
                                                        Transformer has k, q, v, z; the LSTM none)
    "resid"    the residual stream read by probes: hook_embed then the output of every layer
               (blocks.{l}.hook_resid_post; for the LSTM blocks.{l}.hook_hidden)

Paper notation: hook_beta is beta_t (B, T, H); hook_k is k_t after L2 norm (B, T, H, d_k);
hook_state is S_t (B, T, H, d_k, d_v) in fla's [K, V] layout, the state after token t.

`open_checkpoint(path)` loads a checkpoint with its tokenizer and held-out trace spec, and
`Checkpoint.batch(n)` draws evaluation-split traces (never seen in training) for it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import torch

from tasks.errors import DeltalensError
from tasks.tokenizers import TokenKind

__all__ = [
    "ATTN_SHORTHANDS", "DELTANET_ONLY", "Capture", "Checkpoint", "architecture_of", "capture",
    "checkpoint_batch", "expand_names", "open_checkpoint", "require_deltanet", "residual_names",
]

ATTN_SHORTHANDS = ("beta", "beta_logit", "state", "k", "q", "v", "z")
DELTANET_ONLY = ("beta", "beta_logit", "state")  # the delta rule's write strength and matrix state
_HEADED = {"deltanet": ("beta", "beta_logit", "state", "k", "q", "v", "z"), "transformer": ("k", "q", "v", "z"),
           "lstm": ()}
ARTICLE = {"deltanet": "a DeltaNet", "transformer": "a Transformer", "lstm": "an LSTM"}
KIND_NAMES = {int(kind): kind.name.lower() for kind in TokenKind}
LABELS = ("trace", "position", "token", "kind", "action_pos", "perm_id", "answer", "reveal_var", "state_step")

Names = Union[str, Sequence[str], Callable[[str], bool], None]


def architecture_of(model) -> str:
    """'deltanet', 'transformer' or 'lstm' (the `arch` every deltalens model carries)."""
    arch = getattr(model, "arch", None)
    if arch is None:
        name = type(model).__name__
        arch = {"HookedDeltaNet": "deltanet", "HookedLSTM": "lstm", "TransformerBridge": "transformer"}.get(name)
    if arch is None:
        raise DeltalensError(f"{type(model).__name__} is not a deltalens model; build or load one with models.build/load.")
    return arch


def n_layers_of(model) -> int:
    cfg = getattr(model, "cfg", None)
    if cfg is not None and getattr(cfg, "n_layers", None):
        return int(cfg.n_layers)
    return int(getattr(model, "model_config", {}).get("n_layers") or len(model.blocks))


def n_heads_of(model) -> int:
    arch = architecture_of(model)
    if arch == "lstm":
        return 0
    return int(model.cfg.n_heads)


def require_deltanet(model, what: str = "beta") -> None:
    """Raise a DeltalensError naming the architecture unless `model` is a DeltaNet."""
    arch = architecture_of(model)
    if arch != "deltanet":
        raise DeltalensError(
            f"this model is {ARTICLE.get(arch, arch)}, which has no {what}: only DeltaNet's delta rule has a "
            f"write strength beta and a matrix state S_t; run the eigenvalue, subspace and beta tools on a "
            f"DeltaNet checkpoint, or use the residual-stream probes on this one."
        )


def residual_names(model) -> list[str]:
    """hook_embed, then each layer's output: what a residual-stream probe reads, in depth order."""
    arch = architecture_of(model)
    site = "hook_hidden" if arch == "lstm" else "hook_resid_post"
    return ["hook_embed"] + [f"blocks.{layer}.{site}" for layer in range(n_layers_of(model))]


def expand_names(model, names: Iterable[str]) -> list[str]:
    """Shorthands ("beta", "resid", ...) -> hook names for this model; exact names pass through."""
    arch = architecture_of(model)
    out: list[str] = []
    for name in names:
        if name == "resid":
            out += residual_names(model)
        elif name in ATTN_SHORTHANDS:
            if name not in _HEADED[arch]:
                if name in DELTANET_ONLY:
                    require_deltanet(model, f"{name} (hook_{name})")
                raise DeltalensError(f"{ARTICLE.get(arch, arch)} has no attention heads, so there is no "
                                     f"hook_{name}; capture 'resid' instead.")
            if arch == "deltanet" and name == "beta_logit" and not model.config.use_beta:
                raise DeltalensError("this DeltaNet was built with use_beta=False: beta is constant and has no logit.")
            out += [f"blocks.{layer}.attn.hook_{name}" for layer in range(n_layers_of(model))]
        else:
            if arch != "deltanet" and any(name.endswith(f"hook_{x}") for x in DELTANET_ONLY):
                require_deltanet(model, name)
            out.append(name)
    return list(dict.fromkeys(out))  # keep order, drop repeats


@dataclass
class Capture:
    """Activations at every real token of a batch, one row per token, with the token's labels.

    acts[name]   (N, ...) float, N = number of real tokens; the trailing dims of the hook
                 (e.g. (N, H) for hook_beta, (N, H, d_k, d_v) for hook_state)
    labels       (N,) long tensors: trace, position, token, kind (TokenKind), action_pos,
                 perm_id, answer, reveal_var, state_step; states (N, n) the true s_t (values 1..n)
    """

    arch: str
    acts: dict[str, torch.Tensor]
    labels: dict[str, torch.Tensor]
    states: torch.Tensor  # (N, n)
    n_traces: int
    n_layers: int
    n_heads: int
    lengths: torch.Tensor  # (B,) real tokens per trace
    logits: torch.Tensor | None = None  # (N, vocab) when asked for

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.acts:
            raise DeltalensError(f"{name!r} was not captured; captured: {', '.join(self.acts) or 'nothing'}.")
        return self.acts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.acts

    @property
    def names(self) -> list[str]:
        return list(self.acts)

    @property
    def n_vars(self) -> int:
        return int(self.states.shape[1])

    def mask(self, kinds: int | Sequence[int] | None = None) -> torch.Tensor:
        """(N,) bool: tokens of the given TokenKind(s); None = every real token."""
        if kinds is None:
            return torch.ones(len(self), dtype=torch.bool)
        kinds = [int(kinds)] if isinstance(kinds, (int, TokenKind)) else [int(k) for k in kinds]
        return torch.isin(self.labels["kind"], torch.tensor(kinds))

    def layer(self, shorthand: str, layer: int) -> torch.Tensor:
        """acts of blocks.{layer}.attn.hook_{shorthand}."""
        return self[f"blocks.{layer}.attn.hook_{shorthand}"]

    def frame(self):
        """The labels as a pandas DataFrame, one row per token (kind as a lower-case name)."""
        import pandas as pd

        data = {key: self.labels[key].numpy() for key in LABELS}
        frame = pd.DataFrame(data)
        frame["kind"] = frame["kind"].map(KIND_NAMES)
        for var in range(self.n_vars):
            frame[f"s{var}"] = self.states[:, var].numpy()
        return frame

    def padded(self, name: str) -> torch.Tensor:
        """acts[name] back in (B, T, ...) layout, zeros on padding."""
        flat = self[name]
        out = flat.new_zeros((self.n_traces, int(self.lengths.max()), *flat.shape[1:]))
        out[self.labels["trace"], self.labels["position"]] = flat
        return out


@torch.no_grad()
def capture(model, batch: dict[str, torch.Tensor], names: Names = ("resid",), with_logits: bool = False,
            hooks: Sequence[tuple[str, Callable]] = ()) -> Capture:
    """Run `model` on `batch["tokens"]` and keep the named activations at every real token.

    names: shorthands or hook names (see the module docstring), or a callable filter on hook names.
    hooks: forward hooks active during the run (e.g. an intervention), so the capture shows the
        edited model. Activations are moved to the CPU as float32.
    """
    arch = architecture_of(model)
    if isinstance(names, str):
        names = [names]
    wanted = None if callable(names) else expand_names(model, names or [])
    names_filter = names if callable(names) else (lambda name: name in wanted)
    tokens = batch["tokens"]
    lengths = batch.get("lengths")
    if lengths is None:
        lengths = (tokens != 0).sum(1)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with model.hooks(fwd_hooks=list(hooks)):
            logits, cache = model.run_with_cache(tokens.to(device), names_filter=names_filter)
    finally:
        model.train(was_training)
    cache = dict(cache.items()) if hasattr(cache, "items") else dict(cache)
    if wanted is not None:
        missing = [name for name in wanted if name not in cache]
        if missing:
            raise DeltalensError(
                f"{ARTICLE.get(arch, arch)} has no hook named {', '.join(map(repr, missing))}; "
                f"list its hooks with model.hook_dict (or use shorthands such as 'resid', 'beta')."
            )
        cache = {name: cache[name] for name in wanted}
    B, T = tokens.shape
    real = torch.arange(T)[None, :] < lengths.cpu()[:, None]  # (B, T)
    trace, position = real.nonzero(as_tuple=True)
    acts = {name: value.detach().float().cpu()[trace, position] for name, value in cache.items()}
    labels = {"trace": trace, "position": position, "token": tokens.cpu()[trace, position]}
    for key, source in (("kind", "kinds"), ("action_pos", "action_pos"), ("perm_id", "perm_ids"),
                        ("answer", "answers"), ("reveal_var", "reveal_vars"), ("state_step", "state_steps")):
        value = batch.get(source)
        labels[key] = value.cpu()[trace, position] if value is not None else torch.full_like(trace, -1)
    states = batch["states"].cpu()[trace, position] if "states" in batch else torch.zeros(len(trace), 0, dtype=torch.long)
    return Capture(
        arch=arch, acts=acts, labels=labels, states=states, n_traces=B, n_layers=n_layers_of(model),
        n_heads=n_heads_of(model), lengths=lengths.cpu(),
        logits=logits.detach().float().cpu()[trace, position] if with_logits else None,
    )


# ---- checkpoints: the model, its tokenizer and its held-out traces -------------------------


@dataclass
class Checkpoint:
    """A loaded checkpoint with what is needed to draw its held-out traces."""

    path: Path
    model: Any
    meta: dict[str, Any]
    tokenizer: Any = None
    spec: Any = None  # tasks.TraceSpec of its held-out evaluation traces
    notes: list[str] = field(default_factory=list)

    @property
    def arch(self) -> str:
        return architecture_of(self.model)

    def batch(self, n_traces: int = 64, seed: int = 0, actions: int | None = None, spacing: int | None = None):
        """`n_traces` eval-split traces of the checkpoint's task (optionally longer or sparser)."""
        return checkpoint_batch(self, n_traces=n_traces, seed=seed, actions=actions, spacing=spacing)


def _task_of(meta: dict[str, Any], path) -> tuple[Any, Any]:
    from tasks import TraceSpec, Tokenizer

    if not meta.get("tokenizer") or not meta.get("task"):
        raise DeltalensError(
            f"{path} records no tokenizer or task (a plain fla checkpoint?); build a batch yourself with "
            f"tasks.make_batch(spec, tokenizer, n) and pass it to capture()."
        )
    tokenizer = Tokenizer.from_spec(meta["tokenizer"])
    task = meta["task"]
    if task.get("eval_spec"):
        spec = TraceSpec.from_dict(dict(task["eval_spec"]))
    else:  # older metadata: rebuild the held-out spec from the training task config
        config = task.get("config", task)
        actions = config.get("actions", 16)
        spec = TraceSpec(group=config["group"], action_set=config.get("action_set", "swaps"),
                         actions=actions[-1] if isinstance(actions, list) else actions,
                         spacing=config.get("eval_spacing", 4), reveal=config.get("reveal", "one"))
    return tokenizer, spec


def open_checkpoint(path) -> Checkpoint:
    """Load checkpoint `path` (models.load) with its tokenizer and held-out trace spec."""
    import models

    meta = models.read_checkpoint_meta(path)
    model = models.load(path)
    tokenizer, spec = _task_of(meta, path)
    return Checkpoint(path=Path(path), model=model, meta=meta, tokenizer=tokenizer, spec=spec)


def checkpoint_batch(checkpoint, n_traces: int = 64, seed: int = 0, actions: int | None = None,
                     spacing: int | None = None) -> dict[str, torch.Tensor]:
    """Eval-split traces for a checkpoint (a Checkpoint, a path, or its metadata dict)."""
    from tasks import make_batch

    if isinstance(checkpoint, Checkpoint):
        tokenizer, spec = checkpoint.tokenizer, checkpoint.spec
    elif isinstance(checkpoint, dict):
        tokenizer, spec = _task_of(checkpoint, "this checkpoint")
    else:
        import models

        tokenizer, spec = _task_of(models.read_checkpoint_meta(checkpoint), checkpoint)
    if isinstance(n_traces, bool) or not isinstance(n_traces, int) or n_traces < 1:
        raise DeltalensError(f"the number of traces must be a whole number >= 1, got {n_traces!r}.")
    changes = {k: v for k, v in (("actions", actions), ("spacing", spacing)) if v is not None}
    if changes:
        spec = dataclasses.replace(spec, **changes)
    return make_batch(spec, tokenizer, n_traces, seed=seed, split="eval")


def batches(batch: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """Split a batch into consecutive pieces of at most `size` traces (labels travel along)."""
    B = batch["tokens"].shape[0]
    out = []
    for start in range(0, B, size):
        piece = {key: value[start:start + size] for key, value in batch.items() if torch.is_tensor(value) and value.ndim}
        piece.update({key: value for key, value in batch.items() if not (torch.is_tensor(value) and value.ndim)})
        out.append(piece)
    return out
