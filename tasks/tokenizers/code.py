"""The ``code`` tokenizer: Python-token level, as in the paper; its vocabulary depends only on n."""

from __future__ import annotations

from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.tokenizers.base import Tokenizer, code_vocabulary
from deltalens.tasks.traces import TraceSpec


class CodeTokenizer(Tokenizer):
    """Python-token level: prompt, names, '=', ',', 'print', '(', quoted names, numbers, newline."""

    kind = "code"

    def __init__(self, n: int):
        super().__init__(n)
        self._tokens = self.vocabulary(n)
        self._ids = {t: i for i, t in enumerate(self._tokens)}
        self._value_ids = frozenset(i for i, t in enumerate(self._tokens) if t.strip().isdigit())

    @staticmethod
    def vocabulary(n: int) -> list[str]:
        """The tokens for n variables, specials included (ids = list positions)."""
        return code_vocabulary(n)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def token_of(self, token_id: int) -> str:
        if not 0 <= token_id < len(self._tokens):
            raise DeltalensError(f"token id {token_id} is outside the vocabulary (0..{len(self._tokens) - 1}).")
        return self._tokens[token_id]

    def describe(self) -> str:
        return f"code (n={self.n})"

    def _encode_line(self, line: str, lineno: int) -> tuple[int, ...]:
        return self._piece_ids(line, self._ids, lineno)

    def check_spec(self, spec: TraceSpec | ProbTraceSpec) -> None:
        if spec.n > self.n:
            raise DeltalensError(
                f"{spec.group} traces use {spec.n} variables but the code tokenizer knows only {self.n}; "
                f"build it with make_tokenizer('code', {spec.group!r})."
            )

    @classmethod
    def build_from_spec(cls, spec: dict[str, Any]) -> CodeTokenizer:
        return cls(int(spec["n"]))
