"""What every tokenizer kind shares: token kinds, the vocabulary layout, labels per token, the JSON spec.

Both share one vocabulary layout and one JSON spec format, and both decode by concatenation
(spaces ride inside tokens GPT-style), so ``decode(encode(text)) == text`` exactly.

``code`` (vocabulary depends only on n)::

    ">>> a, b = b, a\\n"     -> ">>>" " a" "," " b" " =" " b" "," " a" "\\n"
    ">>> print('a', a)\\n"   -> ">>>" " print" "(" "'a'" "," " a" ")" "\\n"
    "a 3\\n"                 -> "a" " 3" "\\n"
    "3 1 2\\n"               -> "3" " 1" " 2" "\\n"

``statement`` (vocabulary enumerates the task's statement lines; compact for CPU training):
every ``>>> `` line is one token (``">>> a, b = b, a\\n"``), output lines are tokenized as in
``code``: an optional name token, one token per revealed value, and the newline. The action
block of the vocabulary has one token per element of the action set, ranked without listing it
(``full`` on S_10 has 10! action tokens and costs nothing until they are decoded).

Ids: 0 = ``<pad>``, 1 = ``<bos>``, then the tokens in a fixed order (code: syntax, output
pieces, names; statement: output pieces, init lines, print lines, then the action block in
``ActionSet.index`` order). The JSON spec (``to_spec``/``to_json``, read by ``from_spec``/
``from_json``) records the recipe, not the list: kind, n, group, action set, vocab size, the
special ids and a sha256 fingerprint of the tokens, which ``from_spec`` checks so a checkpoint
never silently reads a different vocabulary.

``encode_trace`` returns the ids with per-token labels (``EncodedTrace``): ``TokenKind``, the
action's position and permutation id (lex rank in S_n), reveal flag, answer (value 1..n, 0
elsewhere), the variable revealed, and the true state s_t in force at the token with its step t.
A token carries the state after every action whose line it completes: the last token of an
action line (its newline, or the whole line in ``statement``) already carries s_t, the earlier
tokens of that line still carry s_{t-1}.

Loss masks follow ``logits[:, t-1]`` predicting ``tokens[:, t]``: ``"all"`` marks every token
but the first as a target (plain next-token prediction); ``"reveal"`` marks only revealed values.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import MAX_N, MIN_N, VARIABLE_NAMES, lex_rank
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.traces import LINE_ACTION, LINE_OUTPUT, PROMPT, Trace, TraceSpec

TOKENIZER_KINDS = ("code", "statement", "code-prob", "statement-prob")  # *-prob: probabilistic traces
# kinds that encode any deterministic trace of a TraceSpec (statement-prob needs a probabilistic family)
TRACE_SPEC_KINDS = ("code", "statement", "code-prob")
SUPERVISIONS = ("all", "reveal")
SPEC_FORMAT = "deltalens-tokenizer"
SPEC_VERSION = 1

PAD, BOS = "<pad>", "<bos>"
SPECIAL_TOKENS = (PAD, BOS)
PAD_ID, BOS_ID = 0, 1


class TokenKind(enum.IntEnum):
    """What a token is part of (``EncodedTrace.kinds``, ``batch["kinds"]``)."""

    OTHER = 0  # <bos>, <pad>, and the name and newline tokens of output lines
    INIT = 1  # any token of an init line ">>> a = 3"
    ACTION = 2  # any token of an action line ">>> a, b = b, a"
    PRINT = 3  # any token of a print line ">>> print('a', a)"
    REVEAL = 4  # a revealed value in an output line: the tokens reveal supervision trains on


# One piece per match, and every character is matched by some alternative, so the pieces of a
# line always concatenate back to it: an optional leading space, then a prompt, a quoted name,
# a word or number, or one punctuation mark; else a newline or a stray whitespace character.
_PIECE = re.compile(r" ?(?:>>>|'[^'\n]*'|\w+|[^\w\s])|\n|\s")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_LINE_CACHE_LIMIT = 200_000  # lines repeat a lot (S5 swaps has 10 action lines); cap the memory
_LINE_KINDS = {"init": TokenKind.INIT, "print": TokenKind.PRINT}


@functools.lru_cache(maxsize=1 << 16)
def _perm_id(p: tuple[int, ...]) -> int:
    return lex_rank(p)


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n" kept (only "\\n" ends a line; a last line may lack it)."""
    return _LINE.findall(text)


def code_pieces(line: str) -> list[str]:
    return _PIECE.findall(line)


def _output_tokens(n: int) -> list[str]:
    names = list(VARIABLE_NAMES[:n])
    values = [str(v) for v in range(1, n + 1)]
    return names + values + [" " + v for v in values] + ["\n"]


def code_vocabulary(n: int) -> list[str]:
    """The code tokenizer's tokens for n variables, specials included (ids = list positions)."""
    names = VARIABLE_NAMES[:n]
    syntax = [">>>", " print", "(", ")", ",", " ="]
    return list(SPECIAL_TOKENS) + syntax + _output_tokens(n) + [" " + x for x in names] + [f"'{x}'" for x in names]


def statement_fixed_vocabulary(n: int) -> list[str]:
    """The statement tokenizer's tokens before its action block."""
    names = VARIABLE_NAMES[:n]
    init_lines = [f"{PROMPT}{x} = {v}\n" for x in names for v in range(1, n + 1)]
    print_lines = [f"{PROMPT}print('{x}', {x})\n" for x in names] + [f"{PROMPT}print({', '.join(names)})\n"]
    return list(SPECIAL_TOKENS) + _output_tokens(n) + init_lines + print_lines


@dataclass
class EncodedTrace:
    """Token ids of one trace and what each token means (all lists have one entry per token)."""

    ids: list[int]
    kinds: list[int]  # TokenKind
    action_pos: list[int]  # action tokens: index into Trace.actions; else -1
    perm_ids: list[int]  # action tokens: lex rank of the action's permutation in S_n; else -1
    is_reveal: list[bool]  # revealed-value tokens
    answers: list[int]  # revealed value 1..n on reveal tokens; else 0
    reveal_vars: list[int]  # which variable a reveal token shows (0..n-1); else -1
    state_steps: list[int]  # t: how many actions are complete at the token
    trace_states: list[tuple[int, ...]]  # Trace.states: s_0 .. s_m
    trace_seed: int | None = None  # the seed generate_trace made the trace from

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def states(self) -> list[tuple[int, ...]]:
        """s_t in force at each token, values 1..n per variable."""
        return [self.trace_states[t] for t in self.state_steps]

    def loss_mask(self, supervision: str = "all") -> list[bool]:
        """True where the token is a training target (logits at t-1 predict token t)."""
        if supervision == "all":
            return [t > 0 and i != PAD_ID for t, i in enumerate(self.ids)]
        if supervision == "reveal":
            return list(self.is_reveal)
        raise DeltalensError(f"supervision must be 'all' or 'reveal', got {supervision!r}.")


class Tokenizer:
    """Shared machinery; each kind's subclass (one module per kind) defines the vocabulary."""

    kind = ""
    # kind -> class, filled as each kind's module defines its class; ``from_spec`` reads it
    kinds: ClassVar[dict[str, type[Tokenizer]]] = {}
    _value_ids: frozenset[int]  # ids of the value tokens, set by each kind's __init__

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Tokenizer.kinds[cls.kind] = cls

    def __init__(self, n: int):
        if not MIN_N <= n <= MAX_N:
            raise DeltalensError(f"a tokenizer needs n from {MIN_N} to {MAX_N} variables, got {n}.")
        self.n = n
        self.pad_id, self.bos_id = PAD_ID, BOS_ID
        self._line_cache: dict[str, tuple[int, ...]] = {}

    # --- vocabulary (subclasses) ---
    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def token_of(self, token_id: int) -> str:
        raise NotImplementedError

    def _encode_line(self, line: str, lineno: int) -> tuple[int, ...]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def check_spec(self, spec: TraceSpec | ProbTraceSpec) -> None:
        """Raise DeltalensError unless every trace of ``spec`` encodes with this tokenizer."""
        raise NotImplementedError

    # --- shared ---
    @property
    def tokens(self) -> list[str]:
        """Every token string by id (lists the whole action block: large for ``full`` on S_9+)."""
        return [self.token_of(i) for i in range(self.vocab_size)]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}: {self.vocab_size} tokens>"

    def _not_in_vocab(self, piece: str, lineno: int) -> DeltalensError:
        return DeltalensError(
            f"{piece!r} on line {lineno} is not in the vocabulary of the {self.describe()} tokenizer."
        )

    def _piece_ids(self, line: str, table: dict[str, int], lineno: int) -> tuple[int, ...]:
        """Ids of the code pieces of ``line`` looked up in ``table``; misses go to ``_unknown_piece``."""
        ids: list[int] = []
        for piece in code_pieces(line):
            token_id = table.get(piece)
            if token_id is None:
                ids.extend(self._unknown_piece(piece, lineno))
            else:
                ids.append(token_id)
        return tuple(ids)

    def _unknown_piece(self, piece: str, lineno: int) -> list[int]:
        raise self._not_in_vocab(piece, lineno)

    def _line_ids(self, line: str, lineno: int) -> tuple[int, ...]:
        ids = self._line_cache.get(line)
        if ids is None:
            ids = self._encode_line(line, lineno)
            if len(self._line_cache) >= _LINE_CACHE_LIMIT:
                self._line_cache.clear()
            self._line_cache[line] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of any transcript the generator can write (no <bos>; see encode_trace)."""
        ids: list[int] = []
        for lineno, line in enumerate(split_lines(text), start=1):
            ids.extend(self._line_ids(line, lineno))
        return ids

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.token_of(int(i)) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenate the token strings; <pad> and <bos> decode to nothing."""
        return "".join(self.token_of(int(i)) for i in ids if int(i) not in (PAD_ID, BOS_ID))

    def encode_trace(self, trace: Trace[Any], add_bos: bool = True) -> EncodedTrace:
        """Ids of ``trace.text`` with their labels (see the module docstring)."""
        ids: list[int] = []
        kinds: list[int] = []
        action_pos: list[int] = []
        perm_ids: list[int] = []
        steps: list[int] = []  # t such that s_t is in force at the token
        reveal_at: dict[int, tuple[int, int]] = {}  # token position -> (answer, variable)
        if add_bos:
            ids.append(BOS_ID)
            kinds.append(TokenKind.OTHER)
            action_pos.append(-1)
            perm_ids.append(-1)
            steps.append(0)
        reveals = {r.line: r for r in trace.reveals}
        for index, (line, info) in enumerate(zip(trace.lines, trace.line_info)):
            line_ids = self._line_ids(line, index + 1)
            size, t = len(line_ids), info.actions_done
            ids.extend(line_ids)
            if info.kind == LINE_ACTION:
                kinds.extend([TokenKind.ACTION] * size)
                action_pos.extend([info.action] * size)
                perm_ids.extend([_perm_id(trace.actions[info.action])] * size)
                steps.extend([t - 1] * (size - 1) + [t])  # the line's last token completes the action
                continue
            action_pos.extend([-1] * size)
            perm_ids.extend([-1] * size)
            steps.extend([t] * size)
            if info.kind != LINE_OUTPUT:
                kinds.extend([_LINE_KINDS[info.kind]] * size)
                continue
            reveal, k = reveals[index], 0
            for token_id in line_ids:
                if token_id in self._value_ids:
                    reveal_at[len(kinds)] = (reveal.values[k], reveal.variables[k])
                    kinds.append(TokenKind.REVEAL)
                    k += 1
                else:
                    kinds.append(TokenKind.OTHER)
            if k != len(reveal.values):  # the transcript and its ground truth disagree
                raise DeltalensError(f"output line {index + 1} of the trace does not match its reveal.")
        total = len(ids)
        answers, reveal_vars = [0] * total, [-1] * total
        for position, (answer, variable) in reveal_at.items():
            answers[position], reveal_vars[position] = answer, variable
        return EncodedTrace(
            ids=ids,
            kinds=kinds,
            action_pos=action_pos,
            perm_ids=perm_ids,
            is_reveal=[a > 0 for a in answers],
            answers=answers,
            reveal_vars=reveal_vars,
            state_steps=steps,
            trace_states=trace.states,
            trace_seed=trace.seed,
        )

    # --- the spec: one JSON format for both kinds ---
    def fingerprint(self) -> str:
        """sha256 of the token strings (of 4096 evenly spaced ones for very large vocabularies)."""
        size = self.vocab_size
        ids: Iterable[int] = (
            range(size) if size <= 65_536 else sorted(set(range(0, size, max(1, size // 4096))) | {size - 1})
        )
        digest = hashlib.sha256()
        for i in ids:
            digest.update(self.token_of(i).encode())
            digest.update(b"\x00")
        return "sha256:" + digest.hexdigest()

    def to_spec(self) -> dict[str, Any]:
        return {
            "format": SPEC_FORMAT,
            "version": SPEC_VERSION,
            "kind": self.kind,
            "n": self.n,
            "group": getattr(self, "group_name", None),
            "action_set": getattr(self, "action_set_name", None),
            "vocab_size": self.vocab_size,
            "pad_id": PAD_ID,
            "bos_id": BOS_ID,
            "fingerprint": self.fingerprint(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_spec(), indent=2)

    def files(self) -> dict[str, str]:
        """Files a checkpoint must hold beside its weights to rebuild this tokenizer (ours: none, the spec
        is the recipe; an hf tokenizer: its tokenizer.json)."""
        return {}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from ``to_spec()``; refuses a spec whose vocabulary differs."""
        if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
            raise DeltalensError(f"this is not a deltalens tokenizer spec (expected format {SPEC_FORMAT!r}).")
        if spec.get("version") != SPEC_VERSION:
            raise DeltalensError(
                f"tokenizer spec version {spec.get('version')!r} is not supported; this deltalens reads "
                f"version {SPEC_VERSION}."
            )
        kind = spec.get("kind")
        if kind not in Tokenizer.kinds:
            raise DeltalensError(f"unknown tokenizer kind {kind!r} in spec; use one of {', '.join(TOKENIZER_KINDS)}.")
        try:
            tokenizer = Tokenizer.kinds[kind].build_from_spec(spec)
        except (KeyError, TypeError, ValueError) as err:
            raise DeltalensError(f"this {kind} tokenizer spec is incomplete or malformed ({err}).") from None
        size, printed = spec.get("vocab_size"), spec.get("fingerprint")
        if (size is not None and size != tokenizer.vocab_size) or (printed and printed != tokenizer.fingerprint()):
            raise DeltalensError(
                f"the saved {tokenizer.describe()} vocabulary differs from the one this version of deltalens "
                "builds; use the deltalens version that wrote it."
            )
        return tokenizer

    @classmethod
    def build_from_spec(cls, spec: dict[str, Any]) -> Tokenizer:
        """This kind's tokenizer from the recipe fields of its spec (checked by ``from_spec``)."""
        raise NotImplementedError

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as err:
            raise DeltalensError(f"the tokenizer spec is not valid JSON ({err.msg} at line {err.lineno}).") from None
        return cls.from_spec(spec)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls.from_json(Path(path).read_text())
