"""TransformerLens habits on every deltalens model: an ActivationCache, and a tokenizer to talk to.

    logits, cache = model.run_with_cache(tokens)   # an ActivationCache, as HookedTransformer gives
    cache["beta", 0], cache.stack_activation("beta")   # short names: deltalens's (act_name), then TL's
    cache.decompose_resid(apply_ln=True)           # with the final norm's scale frozen (TL's convention)
    model.to_tokens(text)                          # (1, T) ids of a REPL transcript, <bos> first
    model.to_str_tokens(text or tokens)            # the token strings
    model.to_string(tokens)                        # text back (a list of texts for a batch)
    model.to_single_token(" 2")                    # the one id of a string
    model.generate(text, max_new_tokens=8)         # continue a trace (greedy; stops at a line's end)

HookedDeltaNet and HookedLSTM inherit `LensModel`; the Transformer is TransformerLens's own
bridge, whose `run_with_cache` already returns an ActivationCache and whose string helpers expect
a Hugging Face tokenizer, so `attach_tokenizer` binds ours onto that one instance. The tokenizer
is the checkpoint's (training/opened.py attaches it when it loads a model).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Sequence
from typing import Any

import torch
from transformer_lens import ActivationCache

from deltalens.core.errors import DeltalensError
from deltalens.models.lm.hook_names import act_name
from deltalens.tasks.tokenizers import BOS_ID, PAD_ID, Tokenizer


class LensCache(ActivationCache):
    """TransformerLens's ActivationCache whose (name, layer) keys also take deltalens's short names:
    cache["beta", 0] is blocks.0.attn.hook_beta (TransformerLens alone would look for blocks.0.hook_beta),
    so stack_activation("state") and the residual decompositions work on every architecture."""

    def __getitem__(self, key):
        if isinstance(key, tuple) and key and isinstance(key[0], str) and "." not in key[0]:
            name, layer = key[0], key[1] if len(key) > 1 else None
            if isinstance(layer, int) and layer < 0:
                layer += self.model.cfg.n_layers
            if len(key) < 3 or key[2] is None:
                with contextlib.suppress(DeltalensError):
                    full = act_name(name, layer)
                    if full in self.cache_dict:
                        return self.cache_dict[full]
        return super().__getitem__(key)

    def _residual_stream(self) -> None:
        if getattr(self.model.cfg, "model_type", None) == "lstm":
            raise DeltalensError(
                "an LSTM's layers replace its hidden state rather than add to a residual stream, so there is no "
                "sum of layer outputs to decompose; use cache.stack_activation('hidden') and cache['scale']"
            )

    def decompose_resid(self, *args: Any, **kwargs: Any):
        self._residual_stream()
        return super().decompose_resid(*args, **kwargs)

    def accumulated_resid(self, *args: Any, **kwargs: Any):
        self._residual_stream()
        return super().accumulated_resid(*args, **kwargs)


class LensModel:
    """Mixin (before HookedRootModule in the bases) with TransformerLens's user-facing helpers."""

    tokenizer: Tokenizer | None = None

    def run_with_cache(self, *model_args: Any, layers: Sequence[int] | None = None, **kwargs: Any):
        """`HookedRootModule.run_with_cache`, returning an ActivationCache instead of a dict.

        layers: cache only these layers' hooks (blocks.{l}.*; the global hooks stay), on top of
        names_filter; positions are TransformerLens's pos_slice (a slice, or a list of positions)."""
        if layers is not None:
            kwargs["names_filter"] = _layer_filter(kwargs.get("names_filter"), layers, self.cfg.n_layers)
        out, cache = super().run_with_cache(*model_args, **kwargs)
        return out, LensCache(dict(cache), self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    def to_single_token(self, string: str) -> int:
        return to_single_token(self, string)

    def generate(self, input: str | torch.Tensor, max_new_tokens: int = 16, **options: Any):
        return generate(self, input, max_new_tokens, **options)

    def to_tokens(self, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
        return to_tokens(self, text, prepend_bos)

    def to_str_tokens(self, text: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
        return to_str_tokens(self, text, prepend_bos)

    def to_string(self, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
        return to_string(self, tokens)


def _layer_filter(names_filter, layers: Sequence[int], n_layers: int):
    """names_filter (None, a name, names or a callable) narrowed to hooks of `layers` and global hooks."""
    wanted = set()
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n_layers <= layer < n_layers:
            raise DeltalensError(f"layers must be layer indices of this {n_layers}-layer model, got {layer!r}")
        wanted.add(layer % n_layers)
    if names_filter is None:
        base = lambda name: True  # noqa: E731
    elif isinstance(names_filter, str):
        base = lambda name: name == names_filter  # noqa: E731
    elif callable(names_filter):
        base = names_filter
    else:
        chosen = set(names_filter)
        base = lambda name: name in chosen  # noqa: E731

    def keep(name: str) -> bool:
        if not base(name):
            return False
        parts = name.split(".")
        return not (len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit()) or int(parts[1]) in wanted

    return keep


def attach_tokenizer(model, tokenizer: Tokenizer | None):
    """Give `model` its checkpoint's tokenizer and, if it lacks them, the LensModel string helpers."""
    model.tokenizer = tokenizer
    if not isinstance(model, LensModel):  # TransformerLens's bridge: bind ours on this instance only
        for name in ("to_tokens", "to_str_tokens", "to_string", "to_single_token", "generate"):
            setattr(model, name, types.MethodType(globals()[name], model))
    return model


def _tokenizer_of(model) -> Tokenizer:
    tokenizer = getattr(model, "tokenizer", None)
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    attach = "deltalens.models.lm.lens.attach_tokenizer(model, deltalens.make_tokenizer(...))"
    opened = getattr(model, "checkpoint", None)
    if opened is not None:  # deltalens.load gave it: its folder records no tokenizer (fla writes none)
        raise DeltalensError(
            f"{opened.path} records no tokenizer (fla's folders hold none), so text cannot be encoded: "
            f"pass token ids to the model, or attach one with {attach}."
        )
    raise DeltalensError(
        f"this model has no deltalens tokenizer attached; load it with deltalens.load(name_or_path), "
        f"or attach one with {attach}."
    )


def _device_of(model) -> torch.device:
    weight = next(model.parameters(), None)
    return weight.device if weight is not None else torch.device("cpu")


def to_tokens(model, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
    """(B, T) int64 ids of one transcript or a list of them (right-padded with <pad>), on the
    model's device; <bos> first, as in training."""
    tokenizer = _tokenizer_of(model)
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise DeltalensError("to_tokens takes a REPL transcript (a string) or a list of them.")
    rows = [_bos(tokenizer, prepend_bos) + tokenizer.encode(t) for t in texts]
    tokens = torch.full((len(rows), max(map(len, rows))), getattr(tokenizer, "pad_id", PAD_ID), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens.to(_device_of(model))


def to_str_tokens(model, text: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
    """The token strings of a transcript, or of one sequence of ids (1-D, or a batch of one)."""
    tokenizer = _tokenizer_of(model)
    if isinstance(text, str):
        ids = _bos(tokenizer, prepend_bos) + tokenizer.encode(text)
    else:
        ids = _one_sequence(text)
    return tokenizer.pieces(ids)


def to_string(model, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
    """Text of ids (<bos> and <pad> dropped): one string, or a list for a (B, T) batch."""
    tokenizer = _tokenizer_of(model)
    if torch.is_tensor(tokens) and tokens.ndim == 2:
        return [tokenizer.decode(row.tolist()) for row in tokens]
    return tokenizer.decode(_one_sequence(tokens))


def _bos(tokenizer: Tokenizer, prepend_bos: bool) -> list[int]:
    """[<bos>] of the tokenizer (ours: id 1; a model's own: its bos token, none if it has none)."""
    bos = getattr(tokenizer, "bos_id", BOS_ID)
    return [bos] if prepend_bos and bos is not None else []


def _one_sequence(tokens: torch.Tensor | Sequence[int]) -> list[int]:
    if torch.is_tensor(tokens):
        if tokens.ndim == 2 and tokens.shape[0] == 1:
            tokens = tokens[0]
        if tokens.ndim != 1:
            raise DeltalensError(f"expected one sequence of token ids, got a tensor of shape {tuple(tokens.shape)}.")
        return [int(i) for i in tokens.tolist()]
    return [int(i) for i in tokens]


def to_single_token(model, string: str) -> int:
    """The id of `string` when it is exactly one token (no <bos>), as TransformerLens's."""
    ids = _tokenizer_of(model).encode(string)
    if len(ids) != 1:
        raise DeltalensError(f"{string!r} is {len(ids)} tokens, not one: {_tokenizer_of(model).pieces(ids)}")
    return ids[0]


@torch.no_grad()
def generate(
    model,
    input: str | torch.Tensor,
    max_new_tokens: int = 16,
    temperature: float = 0.0,
    stop_at_newline: bool = True,
    seed: int | None = None,
):
    """Continue a transcript (text, or ids (1, T)) by up to max_new_tokens tokens: greedy at temperature 0,
    else sampled from softmax(logits / temperature). Hooks attached to the model stay active. Stops after
    a token that ends a line when stop_at_newline. Returns text for text, ids (1, T + new) for ids."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise DeltalensError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise DeltalensError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
    text_in = isinstance(input, str)
    tokens = to_tokens(model, input) if text_in else torch.as_tensor(input, dtype=torch.long).reshape(1, -1)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    tokenizer = getattr(model, "tokenizer", None)
    for _ in range(max_new_tokens):
        logits = model(tokens.to(_device_of(model)))[0, -1].float().cpu()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator))
        tokens = torch.cat([tokens, torch.tensor([[nxt]], device=tokens.device)], dim=1)
        if stop_at_newline and isinstance(tokenizer, Tokenizer) and "\n" in tokenizer.decode([nxt]):
            break
    return to_string(model, tokens[0]) if text_in else tokens
