"""Tokenizers for REPL traces, one module per kind, all sharing ``base.Tokenizer``.

    code            Python-token level, as in the paper (code.py)
    statement       one token per statement line, for one group and action set (statement.py)
    code-prob       ``code`` plus the tokens of probabilistic statements (code_prob.py)
    statement-prob  ``statement`` plus one token per probabilistic statement (statement_prob.py)
    hf:PATH         a model's own tokenizer (tokenizer.json / tokenizer.model, via transformers; hf.py)

Every kind decodes by concatenation, so ``decode(encode(text)) == text`` exactly, and every
kind writes the same JSON spec (``Tokenizer.to_spec`` / ``Tokenizer.from_spec``). See base.py
for the vocabulary layout and the labels ``encode_trace`` attaches to each token.
"""

from __future__ import annotations

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import PermutationGroup, get_group
from deltalens.tasks.probabilistic import ProbTraceSpec
from deltalens.tasks.tokenizers.base import (
    BOS_ID,
    PAD_ID,
    SUPERVISIONS,
    TOKENIZER_KINDS,
    TRACE_SPEC_KINDS,
    EncodedTrace,
    Tokenizer,
    TokenKind,
    code_pieces,
    code_vocabulary,
    split_lines,
)
from deltalens.tasks.tokenizers.code import CodeTokenizer
from deltalens.tasks.tokenizers.code_prob import PROB_EXTRA_TOKENS, ProbCodeTokenizer
from deltalens.tasks.tokenizers.statement import StatementTokenizer
from deltalens.tasks.tokenizers.statement_prob import ProbStatementTokenizer
from deltalens.tasks.traces import TraceSpec

HF_PREFIX = "hf:"  # task.tokenizer = "hf:PATH" (tasks/tokenizers/hf.py, imported when used: it loads transformers)

# kind -> class: the table Tokenizer.from_spec reads (each class registers itself by its `kind`)
TOKENIZERS: dict[str, type[Tokenizer]] = {
    "code": CodeTokenizer,
    "statement": StatementTokenizer,
    "code-prob": ProbCodeTokenizer,
    "statement-prob": ProbStatementTokenizer,
}

__all__ = [
    "BOS_ID",
    "PAD_ID",
    "PROB_EXTRA_TOKENS",
    "SUPERVISIONS",
    "TOKENIZERS",
    "TOKENIZER_KINDS",
    "TRACE_SPEC_KINDS",
    "CodeTokenizer",
    "EncodedTrace",
    "ProbCodeTokenizer",
    "ProbStatementTokenizer",
    "StatementTokenizer",
    "TokenKind",
    "Tokenizer",
    "code_pieces",
    "code_vocabulary",
    "make_tokenizer",
    "split_lines",
]


def make_tokenizer(
    kind: str,
    task: TraceSpec | ProbTraceSpec | PermutationGroup | str | int,
    action_set: str | None = None,
) -> Tokenizer:
    """The tokenizer of ``kind`` for a task.

    ``task`` is a TraceSpec, a group (object or name like "S5"), or for ``code`` just n.
    ``statement`` needs the action set: from the TraceSpec or the ``action_set`` argument;
    ``statement-prob`` needs a ProbTraceSpec (its vocabulary holds the family's p and choice size).

    >>> tokenizer = dl.make_tokenizer("statement", dl.TraceSpec(group="S3"))
    >>> tokenizer.vocab_size > 0
    True
    """
    if isinstance(kind, str) and kind.startswith(HF_PREFIX):  # a tokenizer.json, read by transformers
        from deltalens.tasks.tokenizers.hf import load_hf_tokenizer

        if not kind[len(HF_PREFIX) :].strip():
            raise DeltalensError("an hf tokenizer needs a path: hf:path/to/tokenizer.json (or a model folder).")
        return load_hf_tokenizer(kind[len(HF_PREFIX) :].strip())
    if kind not in TOKENIZERS:
        raise DeltalensError(
            f"unknown tokenizer {kind!r}; use one of {', '.join(TOKENIZER_KINDS)}, or hf:PATH for a tokenizer.json."
        )
    if kind == "statement-prob":
        if not isinstance(task, ProbTraceSpec):
            raise DeltalensError(
                "a statement-prob tokenizer is built from a ProbTraceSpec (it needs p and the choice size)."
            )
        return ProbStatementTokenizer(task.group, task.action_set, task.swap_prob, task.choice_size)
    if isinstance(task, (TraceSpec, ProbTraceSpec)):
        group: PermutationGroup | None = get_group(task.group)
        action_set = action_set or task.action_set
    elif isinstance(task, PermutationGroup):
        group = task
    elif isinstance(task, str):
        group = get_group(task)
    elif isinstance(task, int) and not isinstance(task, bool):
        group = None
    else:
        raise DeltalensError(f"make_tokenizer needs a TraceSpec, a group or n, got {task!r}.")
    if kind in ("code", "code-prob"):
        n = group.n if group is not None else task
        return TOKENIZERS[kind](n)  # type: ignore[arg-type]
    if group is None:
        raise DeltalensError("a statement tokenizer needs a group and an action set, not just n.")
    if action_set is None:
        raise DeltalensError(
            "a statement tokenizer needs an action set; pass action_set= (one of swaps, cycles, full, generators)."
        )
    return StatementTokenizer(group, action_set)
