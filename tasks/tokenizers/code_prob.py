"""The ``code-prob`` tokenizer: the ``code`` tokenizer extended for probabilistic traces.

Its first ``code_vocabulary(n)`` ids are the code tokenizer's, so a deterministic trace gets the
same ids under both; the extra tokens spell ``import random``, ``random.random() < p``,
``random.choice([...])`` and seeds (a number not in the vocabulary is spelled one digit a token).
"""

from __future__ import annotations

from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.tasks.tokenizers.base import code_vocabulary
from deltalens.tasks.tokenizers.code import CodeTokenizer

PROB_KIND = "code-prob"
_DIGITS = [str(d) for d in range(10)]
PROB_EXTRA_TOKENS = (
    [
        " import",
        " random",
        "random",
        ";",
        ".",
        "seed",
        "choice",
        " if",
        " else",
        " <",
        " (",
        "[",
        "]",
    ]
    + _DIGITS
    + [" " + d for d in _DIGITS]
)


def prob_code_vocabulary(n: int) -> list[str]:
    """``code_vocabulary(n)`` followed by the extra tokens it lacks (append-only: old ids keep)."""
    base = code_vocabulary(n)
    have = set(base)
    return base + [t for t in PROB_EXTRA_TOKENS if t not in have]


class ProbCodeTokenizer(CodeTokenizer):
    """The ``code`` tokenizer extended for probabilistic traces (kind ``code-prob``).

    Its first ``code_vocabulary(n)`` ids are the code tokenizer's, so deterministic traces get
    identical ids; a number piece not in the vocabulary is spelled one digit per token.
    """

    kind = PROB_KIND

    @staticmethod
    def vocabulary(n: int) -> list[str]:
        return prob_code_vocabulary(n)

    def describe(self) -> str:
        return f"code-prob (n={self.n})"

    def _unknown_piece(self, piece: str, lineno: int) -> list[int]:
        if piece.strip().isdigit():  # "4821" -> "4" "8" "2" "1"; " 25" -> " 2" "5"
            lead = 2 if piece.startswith(" ") else 1
            return [self._ids[d] for d in [piece[:lead], *piece[lead:]]]
        raise self._not_in_vocab(piece, lineno)

    def check_spec(self, spec: Any) -> None:
        if spec.n > self.n:
            raise DeltalensError(
                f"{spec.group} traces use {spec.n} variables but this tokenizer knows only {self.n}; "
                f"build it with ProbCodeTokenizer({spec.n})."
            )
