"""Hand-set tiny models whose mechanism is known exactly, so probes and interventions have answers.

`swap_model()` builds a HookedDeltaNet (statement tokenizer, S_n swaps) whose weights are set by
hand so that ONE head, `track = (layer, head)`, tracks the state with a Householder reflection:

    the state of the tracking head is S_t = c * P_t, P_t the n x n permutation matrix of the
    trace (row i = one-hot of variable i's value), in the top-left corner of the d_k x d_v state;

    init line  ">>> a = 3"       k = e_a,                  v = c e_3, beta = 1  (overwrite row a)
    action     ">>> a, b = b, a" k = (e_a - e_b) / sqrt 2, v = 0,     beta = 2  (I - 2kk^T swaps rows a, b)
    output     "a" (name token)  q = e_a: o = S^T q / sqrt(d_k) = (c / sqrt d_k) e_value(a)
    any other token              k = 0, v = 0, beta ~ 0                 (no write; transition = I)

Every token is one-hot in the residual stream (embedding = e_token), so after attn_norm it is
sqrt(d_model) e_token (up to eps) and each projection is a lookup table. The other heads of every
layer are "decoys": they remember the last init value (k = e_0, v = c e_value, beta = 1 on init
lines, beta ~ 0 elsewhere), a rank-1 state with eigenvalue 0 on init tokens and 1 elsewhere, and
their output is never read (o_proj columns zero). The MLPs are zero and layers before `track`
write nothing, so every layer reads the embedding itself. The unembedding reads the value
direction the tracking head writes: logit(" v") = residual[vocab + v - 1].

Known answers: reveal accuracy 1; reflection fraction (eigenvalue < -0.9) 1 on action tokens for
the tracking head, 0 for every other head; effective rank of the tracking state n once all init
lines are in (1 for decoys); keys on action tokens span n - 1 dimensions (the sum-zero subspace);
the states at action tokens are c x permutation matrices, whose affine span (the Birkhoff
polytope) has dimension (n - 1)^2. Rescaling the tracking head's beta from [0, 2] to [0, 1] turns
each swap into a projection and breaks tracking; rescaling a decoy changes nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from deltalens import models
from deltalens.tasks import TraceSpec, make_tokenizer, read_assignment
from deltalens.tasks.dataset import make_batch

KEY_SCALE = 100.0  # |k| before L2 norm: ||k||^2 = 1 - 1e-10, so beta = 2 gives eigenvalue -1 in fp32
VALUE_SCALE = 30.0  # silu(30) = 30 in fp32, so the stored values are exact multiples of one-hots
BETA_LOGIT = 40.0  # sigmoid(40) = 1 in fp32: beta = hi exactly; sigmoid(-40) ~ 4e-18: beta ~ 0
READ_SCALE = 10.0  # o_proj weight from the tracking head's value dims to the residual


@dataclass
class Handset:
    model: object  # HookedDeltaNet
    tokenizer: object
    spec: TraceSpec
    track: tuple[int, int]  # (layer, head) of the tracking head
    n: int
    task: dict = field(default_factory=dict)  # checkpoint "task" section

    def batch(self, n_traces: int = 32, seed: int = 0, actions: int | None = None, spacing: int | None = None):
        spec = self.spec
        if actions is not None or spacing is not None:
            spec = TraceSpec(
                **{
                    **spec.to_dict(),
                    **({"actions": actions} if actions else {}),
                    **({"spacing": spacing} if spacing else {}),
                }
            )
        return make_batch(spec, self.tokenizer, n_traces, seed=seed, split="eval")

    def save(self, path) -> Path:
        models.save(self.model, path, extra={"tokenizer": self.tokenizer.to_spec(), "task": self.task})
        return Path(path)


def _token_roles(tokenizer, n: int) -> dict[int, tuple]:
    """token id -> ("init", var, value) | ("swap", i, j) | ("name", var) | ("other",)."""
    names = "abcdefghij"[:n]
    roles = {}
    for token_id in range(tokenizer.vocab_size):
        text = tokenizer.token_of(token_id)
        init = re.fullmatch(r">>> ([a-j]) = (\d+)\n", text)
        if init:
            roles[token_id] = ("init", names.index(init[1]), int(init[2]) - 1)
        elif text.startswith(">>> ") and "=" in text and "print" not in text:
            perm = read_assignment(text[4:].strip(), n)
            moved = [i for i in range(n) if perm[i] != i]
            if len(moved) != 2:
                raise ValueError(f"the hand-set model implements swaps only, got {text!r}")
            roles[token_id] = ("swap", *moved)
        elif len(text) == 1 and text in names:
            roles[token_id] = ("name", names.index(text))
        else:
            roles[token_id] = ("other",)
    return roles


@torch.no_grad()
def swap_model(
    n: int = 3,
    n_layers: int = 2,
    n_heads: int = 2,
    track: tuple[int, int] = (1, 1),
    actions: int = 16,
    spacing: int = 4,
) -> Handset:
    """The hand-set swap tracker described in the module docstring."""
    group = f"S{n}"
    tokenizer = make_tokenizer("statement", group, action_set="swaps")
    vocab = tokenizer.vocab_size
    d_model = n_heads * max(n + 1, math.ceil((vocab + n) / n_heads))
    d_head = d_model // n_heads
    model = models.build(
        "deltanet",
        vocab_size=vocab,
        hidden_size=d_model,
        num_hidden_layers=n_layers,
        num_heads=n_heads,
        allow_neg_eigval=True,
        use_short_conv=False,
        qk_activation="identity",
        use_gate=False,
        tie_word_embeddings=False,
    )
    for p in model.parameters():
        p.zero_()
    for module in model.modules():  # all norms back to weight 1
        if hasattr(module, "reset_parameters") and module.__class__.__name__.startswith("RMSNorm"):
            module.reset_parameters()
    model.model.embeddings.weight.copy_(torch.eye(vocab, d_model))
    roles = _token_roles(tokenizer, n)
    unit = 1.0 / math.sqrt(d_model)  # attn_norm turns e_token into sqrt(d_model) e_token
    for layer, block in enumerate(model.model.layers):
        attn = block.attn
        for head in range(n_heads):
            rows = slice(head * d_head, (head + 1) * d_head)
            K, V, Q = (torch.zeros(d_head, d_model) for _ in range(3))
            B = torch.full((d_model,), -BETA_LOGIT)
            tracking = (layer, head) == tuple(track)
            for token_id, role in roles.items():
                if role[0] == "init":
                    _, var, value = role
                    K[var if tracking else 0, token_id] = KEY_SCALE
                    V[value, token_id] = VALUE_SCALE
                    B[token_id] = 0.0  # beta = 1: overwrite
                elif role[0] == "swap" and tracking:
                    _, i, j = role
                    K[i, token_id], K[j, token_id] = KEY_SCALE, -KEY_SCALE
                    B[token_id] = BETA_LOGIT  # beta = 2: reflection
                elif role[0] == "name" and tracking:
                    Q[role[1], token_id] = 1.0
            attn.k_proj.weight[rows] = K * unit
            attn.v_proj.weight[rows] = V * unit
            attn.q_proj.weight[rows] = Q * unit
            attn.b_proj.weight[head] = B * unit
            if tracking:
                for value in range(n):  # read the value dims into spare residual dims
                    attn.o_proj.weight[vocab + value, head * d_head + value] = READ_SCALE
    for value in range(n):
        model.lm_head.weight[tokenizer.tokens.index(f" {value + 1}"), vocab + value] = 1.0
    model.eval()
    spec, task = _task(group, "swaps", actions, spacing)
    return Handset(model=model, tokenizer=tokenizer, spec=spec, track=tuple(track), n=n, task=task)


def _task(group: str, action_set: str, actions: int, spacing: int) -> tuple[TraceSpec, dict]:
    """The trace spec and the checkpoint "task" section of a hand-set model."""
    spec = TraceSpec(group=group, action_set=action_set, actions=actions, spacing=spacing, reveal="one")
    task = {
        "config": {
            "group": group,
            "action_set": action_set,
            "tokenizer": "statement",
            "actions": [actions, actions],
            "spacing": [spacing, spacing],
            "spacing_schedule": [],
            "reveal": "one",
            "supervision": "reveal",
            "eval_spacing": spacing,
            "curriculum_steps": 0,
            "curriculum_start": 4,
        },
        "eval_spec": spec.to_dict(),
    }
    return spec, task


def _silu_pair() -> tuple[float, float]:
    """(x+, x-) with silu(x+) = -silu(x-) = 0.2785: silu's minimum, so a key after the SiLU can be
    (e_a - e_b) / sqrt 2 up to scale (DeltaProduct's keys always pass a SiLU)."""

    def silu(x: float) -> float:
        return x / (1 + math.exp(-x))

    x_neg = -1.2784645427610738  # argmin of silu
    target, lo, hi = -silu(x_neg), 0.0, 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if silu(mid) < target else (lo, mid)
    return (lo + hi) / 2, x_neg


def transpositions_for(p: tuple[int, ...]) -> list[tuple[int, int]]:
    """Row swaps, in the order to apply them, that take rows (0..n-1) to (p[0], ..., p[n-1]):
    after them row i holds the old row p[i] (variable i takes variable p[i]'s value)."""
    rows, swaps = list(range(len(p))), []
    for i in range(len(p)):
        if rows[i] != p[i]:
            j = rows.index(p[i])
            rows[i], rows[j] = rows[j], rows[i]
            swaps.append((i, j))
    return swaps


@torch.no_grad()
def product_model(
    n: int = 3, factors: int = 2, n_heads: int = 2, track: int = 1, actions: int = 16, spacing: int = 1
) -> Handset:
    """A hand-set one-layer HookedDeltaProduct on S_n with the `full` action set: on an action token
    the tracking head applies the action's permutation as a product of reflections, one factor per
    transposition (beta 2, k = (e_a - e_b) / sqrt 2; unused factors beta ~ 0); init lines overwrite
    a row with factor 0 (beta 1); a variable's name token queries its row. The other heads write
    nothing. Needs factors >= n - 1 (an n-cycle is n - 1 transpositions)."""
    group = f"S{n}"
    tokenizer = make_tokenizer("statement", group, action_set="full")
    vocab = tokenizer.vocab_size
    d_model, d_head = vocab + n, n + 1
    model = models.build(
        "deltaproduct",
        vocab_size=vocab,
        hidden_size=d_model,
        num_hidden_layers=1,
        num_heads=n_heads,
        head_dim=d_head,
        expand_v=1.0,
        num_householder=factors,
        allow_neg_eigval=True,
        use_forget_gate=False,
        use_output_gate=False,
        use_short_conv=False,
    )
    for p in model.parameters():
        p.zero_()
    for module in model.modules():
        if hasattr(module, "reset_parameters") and module.__class__.__name__.startswith("RMSNorm"):
            module.reset_parameters()
    model.model.embeddings.weight.copy_(torch.eye(vocab, d_model))
    unit = 1.0 / math.sqrt(d_model)
    x_pos, x_neg = _silu_pair()
    attn = model.model.layers[0].attn
    K = torch.zeros(factors, d_head, d_model)
    V = torch.zeros(factors, d_head, d_model)
    Q = torch.zeros(d_head, d_model)
    B = torch.full((factors, d_model), -BETA_LOGIT)
    names = "abcdefghij"[:n]
    for token_id in range(vocab):
        text = tokenizer.token_of(token_id)
        init = re.fullmatch(r">>> ([a-j]) = (\d+)\n", text)
        if init:
            K[0, names.index(init[1]), token_id] = KEY_SCALE
            V[0, int(init[2]) - 1, token_id] = VALUE_SCALE
            B[0, token_id] = 0.0  # beta = 1: overwrite the row
        elif text.startswith(">>> ") and "=" in text and "print" not in text:
            swaps = transpositions_for(read_assignment(text[4:].strip(), n))
            if len(swaps) > factors:
                raise ValueError(f"{text!r} needs {len(swaps)} reflections; build with factors >= {len(swaps)}")
            for j, (a, b) in enumerate(swaps):
                K[j, a, token_id], K[j, b, token_id] = x_pos, x_neg
                B[j, token_id] = BETA_LOGIT  # beta = 2: the reflection swapping rows a and b
        elif len(text) == 1 and text in names:
            Q[names.index(text), token_id] = 1.0
    key_dim = n_heads * d_head
    for j in range(factors):  # fla's (n h d) channel layout: factor outermost
        attn.k_proj.weight[j * key_dim + track * d_head : j * key_dim + (track + 1) * d_head] = K[j] * unit
        attn.v_proj.weight[j * key_dim + track * d_head : j * key_dim + (track + 1) * d_head] = V[j] * unit
        attn.b_proj.weight[j * n_heads + track] = B[j] * unit
        for head in range(n_heads):
            if head != track:
                attn.b_proj.weight[j * n_heads + head] = -BETA_LOGIT * unit
    attn.q_proj.weight[track * d_head : (track + 1) * d_head] = Q * unit
    for value in range(n):
        attn.o_proj.weight[vocab + value, track * d_head + value] = READ_SCALE
        model.lm_head.weight[tokenizer.tokens.index(f" {value + 1}"), vocab + value] = 1.0
    model.eval()
    spec, task = _task(group, "full", actions, spacing)
    return Handset(model=model, tokenizer=tokenizer, spec=spec, track=(0, track), n=n, task=task)
