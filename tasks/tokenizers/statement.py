"""The ``statement`` tokenizer: one token per statement line, built for one group and action set.

Output lines are tokenized as in ``code``. The action block has one token per element of the
action set, ranked without listing it (``full`` on S_10 has 10! action tokens and costs nothing
until they are decoded).
"""

from __future__ import annotations

from typing import Any

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import ActionSet, PermutationGroup, get_action_set, get_group, read_assignment
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.tokenizers.base import Tokenizer, statement_fixed_vocabulary
from deltalens.tasks.traces import PROMPT, TraceSpec


class StatementTokenizer(Tokenizer):
    """One token per statement line; output lines as in ``code``; built for one group and action set."""

    kind = "statement"

    def __init__(self, group: PermutationGroup, action_set: str):
        super().__init__(group.n)
        self.group_name = group.name
        self.action_set_name = action_set
        self.actions: ActionSet = get_action_set(group, action_set)
        self._fixed = statement_fixed_vocabulary(group.n)
        self._fixed_ids = {t: i for i, t in enumerate(self._fixed)}
        self._value_ids = frozenset(i for i, t in enumerate(self._fixed) if t.strip().isdigit())
        self.action_offset = len(self._fixed)  # ids action_offset.. are the action block

    @property
    def vocab_size(self) -> int:
        return self.action_offset + self.actions.size

    def token_of(self, token_id: int) -> str:
        if 0 <= token_id < self.action_offset:
            return self._fixed[token_id]
        if not 0 <= token_id < self.vocab_size:
            raise DeltalensError(f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1}).")
        p = self.actions.element(token_id - self.action_offset)
        return f"{PROMPT}{self.actions.statement(p)}\n"

    def describe(self) -> str:
        return f"statement ({self.group_name} {self.action_set_name})"

    def _encode_line(self, line: str, lineno: int) -> tuple[int, ...]:
        token_id = self._fixed_ids.get(line)
        if token_id is not None:
            return (token_id,)
        if line.startswith(PROMPT):  # a statement: one token, or it is not in the vocabulary
            body = line[len(PROMPT) : -1] if line.endswith("\n") else None
            try:
                p = read_assignment(body, self.n) if body is not None else None
            except DeltalensError:
                p = None
            if p is None or not self.actions.contains(p) or self.actions.statement(p) != body:
                raise self._not_in_vocab(line, lineno)
            return (self.action_offset + self.actions.index(p),)
        return self._piece_ids(line, self._fixed_ids, lineno)  # an output line

    def check_spec(self, spec: TraceSpec | ProbTraceSpec) -> None:
        if (spec.group, spec.action_set) != (self.group_name, self.action_set_name):
            raise DeltalensError(
                f"the {self.describe()} tokenizer cannot encode {spec.group} {spec.action_set} traces; "
                f"build one with make_tokenizer('statement', {spec.group!r}, {spec.action_set!r})."
            )

    @classmethod
    def build_from_spec(cls, spec: dict[str, Any]) -> StatementTokenizer:
        return cls(get_group(spec["group"]), spec["action_set"])
