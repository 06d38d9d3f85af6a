"""The ``statement-prob`` tokenizer: one token per statement line of a probabilistic trace.

It is the ``statement`` tokenizer (statement.py) of the trace family's group and action
set, with the probabilistic statements appended after its action block, so a deterministic
statement keeps its id:

    header     ``>>> import random; random.seed(s)`` is one token whatever s (the seed decides the
               hidden outcomes, which a tracker may not read; it decodes as ``>>> import random``)
    swaps      ``a, b = (b, a) if random.random() < p else (a, b)`` for every pair, at the family's p
    choices    ``a, b, c = random.choice([...])`` for every set of ``choice_size`` variables

A trace is ~5x shorter than with ``code-prob``, which is what makes training the probabilistic
checkpoints fit a CPU. The vocabulary depends on p and ``choice_size``, so the spec
records them.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import get_group
from deltalens.tasks.probabilistic import choice_statement, rotation, swap_statement
from deltalens.tasks.tokenizers.statement import StatementTokenizer
from deltalens.tasks.traces import PROMPT

KIND = "statement-prob"
HEADER = f"{PROMPT}import random\n"
_HEADER = re.compile(r">>> import random(?:; random\.seed\([0-9]+\))?\n")


class ProbStatementTokenizer(StatementTokenizer):
    kind = KIND

    def __init__(self, group: str, action_set: str, swap_prob: float, choice_size: int):
        super().__init__(get_group(group), action_set)
        n = self.n
        self.swap_prob, self.choice_size = float(swap_prob), int(choice_size)
        extra = [HEADER]
        extra += [f"{PROMPT}{swap_statement(i, j, self.swap_prob)}\n" for i, j in itertools.combinations(range(n), 2)]
        if 2 <= self.choice_size <= n:
            # only the choices the group contains (an even rotation size is not in A_n)
            group_obj = get_group(group)
            extra += [
                f"{PROMPT}{choice_statement(c)}\n"
                for c in itertools.combinations(range(n), self.choice_size)
                if group_obj.contains(rotation(n, c, 1))
            ]
        self._extra = extra
        self._extra_ids = {line: self.action_offset + self.actions.size + i for i, line in enumerate(extra)}

    @property
    def vocab_size(self) -> int:
        return self.action_offset + self.actions.size + len(self._extra)

    def token_of(self, token_id: int) -> str:
        base = self.action_offset + self.actions.size
        if base <= token_id < self.vocab_size:
            return self._extra[token_id - base]
        return super().token_of(token_id)

    def describe(self) -> str:
        family = f"p={self.swap_prob:g}, choice of {self.choice_size}"
        return f"statement-prob ({self.group_name} {self.action_set_name}, {family})"

    def _encode_line(self, line: str, lineno: int) -> tuple[int, ...]:
        if _HEADER.fullmatch(line):
            return (self._extra_ids[HEADER],)
        token_id = self._extra_ids.get(line)
        if token_id is not None:
            return (token_id,)
        return super()._encode_line(line, lineno)

    def check_spec(self, spec: Any) -> None:
        """Every trace of a ProbTraceSpec encodes: same group and action set, p and choice size."""
        wanted = (self.group_name, self.action_set_name)
        if (spec.group, spec.action_set) != wanted:
            raise DeltalensError(
                f"the {self.describe()} tokenizer cannot encode {spec.group} {spec.action_set} traces."
            )
        if spec.mix[1] > 0 and spec.swap_prob != self.swap_prob:
            raise DeltalensError(
                f"the {self.describe()} tokenizer knows random swaps with p={self.swap_prob:g} only, "
                f"not p={spec.swap_prob:g}; its vocabulary has one token per statement."
            )
        if spec.mix[2] > 0 and spec.choice_size != self.choice_size:
            raise DeltalensError(
                f"the {self.describe()} tokenizer knows random.choice over "
                f"{self.choice_size} variables, not {spec.choice_size}."
            )

    def to_spec(self) -> dict[str, Any]:
        return {**super().to_spec(), "swap_prob": self.swap_prob, "choice_size": self.choice_size}

    @classmethod
    def build_from_spec(cls, spec: dict[str, Any]) -> ProbStatementTokenizer:
        return cls(spec["group"], spec["action_set"], spec["swap_prob"], spec["choice_size"])
