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
is the checkpoint's (loading/opened.py attaches it when it loads a model).
"""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch
from transformer_lens import ActivationCache
from transformer_lens.utilities import Slice

from deltalens.core.errors import DeltalensError, did_you_mean
from deltalens.core.indices import integer_indices
from deltalens.models.lm.hook_names import act_name
from deltalens.models.lm.lens_hooks import LensHooks
from deltalens.tasks.tokenizers import BOS_ID, PAD_ID, Tokenizer

# TransformerLens's config fields its cache and tools read, with the values every deltalens language model shares
LENS_DEFAULTS: dict[str, Any] = dict(
    attn_only=False,  # every block has an MLP
    parallel_attn_mlp=False,  # the MLP reads the mixer's output (pre-norm blocks in sequence)
    layers_block_type=None,  # TransformerLens's per-layer kinds (Mamba bridges); ours: delta_layers / attention_layers
    act_fn="silu",
    normalization_type="RMS",
    positional_embedding_type="none",  # the recurrence orders the tokens; hybrids name their attention's
    n_factors=1,
    state_norm_every=0,
    gated=False,
)


def lens_cfg(**fields: Any) -> SimpleNamespace:
    """A model's TransformerLens-style `cfg`: LENS_DEFAULTS, then the model's own fields (n_layers, n_heads,
    d_model, d_head, d_vocab, ..., delta_layers, attention_layers): one shape of config for every family."""
    return SimpleNamespace(**{**LENS_DEFAULTS, **fields})


class CacheKeyError(DeltalensError, KeyError):
    """A cache key that names no cached hook, said in one sentence (still a KeyError for `in`-style code)."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0]) if self.args else ""


class LensCache(ActivationCache):
    """TransformerLens's ActivationCache whose (name, layer) keys also take deltalens's short names:
    cache["beta", 0] is blocks.0.attn.hook_beta (TransformerLens alone would look for blocks.0.hook_beta),
    so stack_activation("state") and the residual decompositions work on every architecture."""

    def __getitem__(self, key):
        if isinstance(key, tuple) and key and isinstance(key[0], str) and "." not in key[0]:
            name, layer = key[0], key[1] if len(key) > 1 else None
            if isinstance(layer, int) and layer < 0:
                layer += self.model.cfg.n_layers
            full, unknown = None, None
            if len(key) < 3 or key[2] is None:
                try:
                    full = act_name(name, layer)
                except DeltalensError as err:  # not ours: TransformerLens's own short names are tried below
                    full, unknown = None, err
                if full in self.cache_dict:
                    return self.cache_dict[full]
                if full is not None and full not in self.model.hook_dict:  # else TL's KeyError: blocks.5.hook_beta
                    raise CacheKeyError(self._missing(full, layer))
            try:
                return super().__getitem__(key)
            except KeyError:
                raise CacheKeyError(str(unknown) if unknown else self._missing(full or str(key), layer)) from None
        try:
            return super().__getitem__(key)
        except KeyError:
            if isinstance(key, str):
                raise CacheKeyError(self._missing(key, None)) from None
            raise

    def _missing(self, full: str, layer) -> str:
        n_layers = self.model.cfg.n_layers
        if isinstance(layer, int) and not 0 <= layer < n_layers:
            return f"layer {layer} is out of range: this model has layers 0..{n_layers - 1}"
        if full in self.model.hook_dict:
            return f"{full!r} was not cached in this run; run_with_cache without names_filter caches it"
        return f"{full!r} is not a hook of this model{did_you_mean(full, list(self.model.hook_dict))}"

    def _residual_stream(self) -> None:
        from deltalens.models.architecture import require_one_stream

        if getattr(self.model.cfg, "model_type", None) == "lstm":
            raise DeltalensError(
                "an LSTM's layers replace its hidden state rather than add to a residual stream, so there is no "
                "sum of layer outputs to decompose; use cache.stack_activation('hidden') and cache['scale']"
            )
        require_one_stream(self.model, "splitting the cache's residual stream")

    def decompose_resid(self, *args: Any, **kwargs: Any):
        self._residual_stream()
        return super().decompose_resid(*args, **kwargs)

    def accumulated_resid(self, *args: Any, **kwargs: Any):
        self._residual_stream()
        return super().accumulated_resid(*args, **kwargs)

    def stack_head_results(
        self,
        layer: int = -1,
        return_labels: bool = False,
        incl_remainder: bool = False,
        pos_slice: Any = None,
        apply_ln: bool = False,
    ):
        """TransformerLens's stack_head_results: each head's write into the residual stream, layers before
        `layer`, (components, batch, pos, d_model), labels "L{l}H{h}". A head's write is its read-out with every
        other head at zero (models/layers/head_results.py: exact, the per-head norm and output gate included).
        A layer whose heads do not split here (a transformers attention layer: its output gate is inside
        transformers' forward) is left out and named in `self.unsplit_layers`; `incl_remainder` adds the rest of
        the residual stream, those layers' whole outputs included."""

        from deltalens.models.layers.head_results import has_read_out, head_results

        self._residual_stream()
        if not isinstance(pos_slice, Slice):
            pos_slice = Slice(pos_slice)
        n_layers = self.model.cfg.n_layers
        layer = n_layers if layer is None or layer == -1 else layer
        parts, labels, self.unsplit_layers = [], [], []
        for l in range(layer):
            mixer = self.model.blocks[l].attn
            z_name = f"blocks.{l}.attn.hook_z"
            if not has_read_out(mixer) or z_name not in self.cache_dict:
                self.unsplit_layers.append(l)
                continue
            z = pos_slice.apply(self.cache_dict[z_name], dim=-3)  # (B, T, H, d_head)
            resid = pos_slice.apply(self.cache_dict[f"blocks.{l}.hook_resid_pre"], dim=-2)
            x = self.model.mixer_input(l, resid)
            rows = head_results(mixer, z.reshape(-1, *z.shape[-2:]), x.reshape(-1, x.shape[-1]))  # (N, H, m)
            parts.append(rows.reshape(*z.shape[:-2], *rows.shape[-2:]).movedim(-2, 0))
            labels += [f"L{l}H{h}" for h in range(z.shape[-2])]
        if not parts and not incl_remainder:
            raise DeltalensError(f"no layer before {layer} has heads whose writes split here")
        components = torch.cat(parts, 0) if parts else None
        if incl_remainder:
            total = pos_slice.apply(self[("resid_post", layer - 1)], dim=-2)
            remainder = total - (components.sum(0) if components is not None else 0)
            components = remainder[None] if components is None else torch.cat([components, remainder[None]], 0)
            labels.append("remainder")
        if apply_ln:
            components = self.apply_ln_to_stack(components, layer, pos_slice=pos_slice)
        return (components, labels) if return_labels else components


class LensModel(LensHooks):
    """Mixin (before HookedRootModule in the bases) with TransformerLens's user-facing helpers."""

    tokenizer: Tokenizer | None = None
    cfg: Any  # the model's config, set by the model class (declared for the type checker)

    @integer_indices("layers")
    def run_with_cache(self, *model_args: Any, layers: Sequence[int] | None = None, **kwargs: Any):
        """`HookedRootModule.run_with_cache`, returning an ActivationCache instead of a dict.

        layers: cache only these layers' hooks (blocks.{l}.*; the global hooks stay), on top of
        names_filter; positions are TransformerLens's pos_slice (a slice, or a list of positions)."""
        if layers is not None:
            kwargs["names_filter"] = _layer_filter(kwargs.get("names_filter"), layers, self.cfg.n_layers)
        out, cache = super().run_with_cache(*model_args, **kwargs)  # type: ignore[misc]  # HookedRootModule's
        return out, LensCache(dict(cache), self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    def to_single_token(self, string: str) -> int:
        return to_single_token(self, string)

    def _checked_tokens(self, tokens: Any) -> torch.Tensor:
        """The forward's input as ids (B, T): text read with the tokenizer, (T,) made one row; anything that is not
        ids of this model's vocabulary, or holds no token, refused in one sentence (not deep in torch)."""
        tokens = self._token_input(tokens)
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.long, torch.int, torch.int32):
            raise TypeError(
                f"{type(self).__name__} takes token ids as an integer tensor [batch, pos]; encode text with the "
                "model's tokenizer first (model.to_tokens)."
            )
        if tokens.ndim == 1:
            tokens = tokens[None]
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}.")
        if tokens.numel() == 0:
            raise DeltalensError(f"tokens must hold at least one token, got shape {tuple(tokens.shape)}")
        check_token_ids(tokens, self.cfg.d_vocab)
        return tokens

    def _token_input(self, tokens: Any) -> Any:
        """model(text) as HookedTransformer(text): a string (or a list of them) becomes to_tokens(text)."""
        if isinstance(tokens, str) or (isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], str)):
            return self.to_tokens(tokens if isinstance(tokens, str) else list(tokens))
        return tokens

    def generate(self, input: str | torch.Tensor, max_new_tokens: int = 16, **options: Any):
        """Continue a transcript (text, or ids (1, T)) by up to `max_new_tokens` tokens, hooks attached
        still active. options: temperature (0, the default: greedy; else sampled from softmax(logits / T)),
        stop_at_newline (True: stop once a line is finished, e.g. a print's output), seed (for sampling).
        Returns text for text, ids (1, T + new) for ids.

        >>> model.generate(">>> a = 1\\n>>> b = 2\\n>>> c = 3\\n>>> a, b = b, a\\n>>> print('a', a)\\na", 1)[-3:]
        'a 2'
        """
        return generate(self, input, max_new_tokens, **options)

    def to_tokens(self, text: str | Sequence[str], prepend_bos: bool = True) -> torch.Tensor:
        return to_tokens(self, text, prepend_bos)

    def to_str_tokens(self, text: str | torch.Tensor | Sequence[int], prepend_bos: bool = True) -> list[str]:
        return to_str_tokens(self, text, prepend_bos)

    def to_string(self, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
        return to_string(self, tokens)


def check_token_ids(ids: torch.Tensor, vocab: int, what: str = "token ids") -> None:
    """One sentence unless every id lies in 0..vocab - 1 (an embedding lookup would fail deep in torch); one pass
    over the ids (a forward, a tool's input, an answer list)."""
    if ids.numel():
        low, high = (int(x) for x in torch.aminmax(ids))
        if low < 0 or high >= vocab:
            raise DeltalensError(f"{what} must lie in 0..{vocab - 1} (this model's vocabulary), got {low} to {high}")


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
    vocab = _model_vocab(model)
    if tokenizer is not None and vocab and tokenizer.vocab_size > vocab:  # else an IndexError deep in a forward
        where = getattr(tokenizer, "source", "") or tokenizer.describe()
        raise DeltalensError(
            f"the tokenizer ({where}) has {tokenizer.vocab_size} tokens but the model's embedding has {vocab} rows, "
            f"so its ids {vocab}..{tokenizer.vocab_size - 1} have no embedding; use the tokenizer it was trained with"
        )
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
        from deltalens.tasks.tokenizers.hf import missing_tokenizer

        raise DeltalensError(missing_tokenizer(opened.path))
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
    if isinstance(tokens, torch.Tensor) and tokens.ndim == 2:
        return [tokenizer.decode(row.tolist()) for row in tokens]
    return tokenizer.decode(_one_sequence(tokens))


def _bos(tokenizer: Tokenizer, prepend_bos: bool) -> list[int]:
    """[<bos>] of the tokenizer (ours: id 1; a model's own: its bos token, none if it has none)."""
    bos = getattr(tokenizer, "bos_id", BOS_ID)
    return [bos] if prepend_bos and bos is not None else []


def _one_sequence(tokens: torch.Tensor | Sequence[int]) -> list[int]:
    if isinstance(tokens, torch.Tensor):
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


MAX_NEW_TOKENS = 256  # generate's cap on new tokens per call: each one re-reads the whole transcript (no cache)


def _model_vocab(model) -> int | None:
    """How many token ids the model embeds (TransformerLens's cfg.d_vocab), None when it does not say."""
    vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    return vocab if isinstance(vocab, int) and vocab > 0 else None


def _input_ids(model, input) -> torch.Tensor:
    """(1, T) ids given to generate, each checked against the model's vocabulary (not an IndexError later)."""
    try:
        tokens = torch.as_tensor(input).reshape(1, -1)
    except (TypeError, ValueError, RuntimeError) as err:
        raise DeltalensError(f"generate takes text or a sequence of token ids, got {type(input).__name__}") from err
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise DeltalensError(f"token ids must be integers, got a tensor of {tokens.dtype}")
    tokens = tokens.long()
    vocab = _model_vocab(model)
    if vocab and tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < vocab):
        bad = int(tokens.max()) if int(tokens.max()) >= vocab else int(tokens.min())
        raise DeltalensError(f"token id {bad} is outside this model's vocabulary (0..{vocab - 1})")
    return tokens


def _values_asked(text: str) -> int:
    """How many values the output line after `text` holds when `text` ends with a print statement (print('a', a):
    1; print(a, b, c): 3), else 0. Models trained on reveals alone never learn to write the newline after them."""
    lines = text.splitlines()
    found = re.fullmatch(r">>> print\((.*)\)", lines[-1]) if text.endswith("\n") and lines else None
    if not found:
        return 0
    return sum(1 for arg in found.group(1).split(",") if arg.strip().isidentifier())


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
    a token that ends a line when stop_at_newline (after a print statement: once its values are written).
    At most MAX_NEW_TOKENS new tokens; input ids are checked against the vocabulary. Returns text for text,
    ids (1, T + new) for ids."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 0 <= max_new_tokens:
        raise DeltalensError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if max_new_tokens > MAX_NEW_TOKENS:  # each new token re-reads the whole transcript: bound the work
        raise DeltalensError(
            f"max_new_tokens={max_new_tokens} is more than generate's cap of {MAX_NEW_TOKENS}; "
            f"ask for fewer, or call generate again on its output"
        )
    if not temperature >= 0:
        raise DeltalensError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
    text_in = isinstance(input, str)
    tokens = to_tokens(model, input) if text_in else _input_ids(model, input)
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if not isinstance(model, LensModel) and n_ctx and tokens.shape[1] + max_new_tokens > n_ctx:  # a Transformer
        raise DeltalensError(
            f"{tokens.shape[1]} tokens of input + max_new_tokens={max_new_tokens} exceed this Transformer's context "
            f"of {n_ctx} tokens; ask for at most {max(n_ctx - tokens.shape[1], 0)} new tokens"
        )
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    tokenizer = getattr(model, "tokenizer", None)
    tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
    asked = _values_asked(tokenizer.decode(tokens[0].tolist())) if stop_at_newline and tokenizer else 0
    for _ in range(max_new_tokens):
        logits = model(tokens.to(_device_of(model)))[0, -1].float().cpu()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator))
        tokens = torch.cat([tokens, torch.tensor([[nxt]], device=tokens.device)], dim=1)
        piece = tokenizer.decode([nxt]) if stop_at_newline and tokenizer else ""
        if "\n" in piece:
            break
        if asked and piece.strip().isdigit():  # a value of the print line's answer
            asked -= 1
            if not asked:
                break
    return to_string(model, tokens[0]) if text_in else tokens
