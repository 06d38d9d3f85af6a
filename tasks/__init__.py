"""What models read: permutation groups, REPL traces, tokenizers and datasets.

Of deltalens this room imports only core (its errors); nothing of the rooms above. In data-flow order::

    get_group("S5") -> PermutationGroup          tasks.groups
    TraceSpec(...), generate_trace(spec, seed)   tasks.traces
    make_tokenizer("code" | "statement", spec)   tasks.tokenizers (one module per kind)
    TraceDataset, collate, make_batch            tasks.dataset (torch)
    ProbTraceSpec, generate_prob_trace, parse_prob_trace   tasks.probabilistic (PFSA-SR traces)
    PFSA, Action, Observation, joint_filter, marginal_filter   tasks.pfsa (exact beliefs)
    adversarial_sequence                         tasks.adversary
    marginal_decay, halving_decay                tasks.belief_decay (a linear filter's belief mass, PFSA-SR)
    irreps, fit_representation                   tasks.representations (the groups' representations)
    rotation_irreps, reflections_needed          tasks.rotation_reps (S4, A5 as rotations of R^3)
    DeltalensError                               re-exported from core.errors (what every room raises for people)

The names of groups, traces and tokenizers are re-exported here; the rest is imported from its
module, so a reader of `tasks` pays for torch only when it asks for a dataset.
"""

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import (
    ACTION_SETS,
    MAX_N,
    MIN_N,
    VARIABLE_NAMES,
    ActionSet,
    AlternatingGroup,
    CyclicGroup,
    DihedralGroup,
    Permutation,
    PermutationGroup,
    SymmetricGroup,
    apply_permutation,
    compose,
    get_action_set,
    get_group,
    inverse,
    is_even,
    lex_rank,
    lex_unrank,
    read_assignment,
    valid_action_sets,
    write_assignment,
)
from deltalens.tasks.tokenizers import (
    BOS_ID,
    PAD_ID,
    SUPERVISIONS,
    TOKENIZER_KINDS,
    CodeTokenizer,
    EncodedTrace,
    StatementTokenizer,
    Tokenizer,
    TokenKind,
    make_tokenizer,
)
from deltalens.tasks.traces import (
    LineInfo,
    Reveal,
    Trace,
    TraceSpec,
    generate_trace,
    parse_action_count,
    parse_trace,
    replay_transcript,
)

__all__ = [
    "ACTION_SETS",
    "BOS_ID",
    "MAX_N",
    "MIN_N",
    "PAD_ID",
    "SUPERVISIONS",
    "TOKENIZER_KINDS",
    "VARIABLE_NAMES",
    "ActionSet",
    "AlternatingGroup",
    "CodeTokenizer",
    "CyclicGroup",
    "DeltalensError",
    "DihedralGroup",
    "EncodedTrace",
    "LineInfo",
    "Permutation",
    "PermutationGroup",
    "Reveal",
    "StatementTokenizer",
    "SymmetricGroup",
    "TokenKind",
    "Tokenizer",
    "Trace",
    "TraceSpec",
    "apply_permutation",
    "compose",
    "generate_trace",
    "get_action_set",
    "get_group",
    "inverse",
    "is_even",
    "lex_rank",
    "lex_unrank",
    "make_tokenizer",
    "parse_action_count",
    "parse_trace",
    "read_assignment",
    "replay_transcript",
    "valid_action_sets",
    "write_assignment",
]
