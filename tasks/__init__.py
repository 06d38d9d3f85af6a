"""What models read: permutation groups, REPL traces, tokenizers and datasets.

This room imports nothing else of deltalens. Its public API, in data-flow order::

    get_group("S5") -> PermutationGroup          tasks.groups
    TraceSpec(...), generate_trace(spec, seed)   tasks.traces
    make_tokenizer("code" | "statement", spec)   tasks.tokenizers
    TraceDataset(spec, tokenizer, size, seed, split), collate, make_batch   tasks.dataset
                                                 (torch: imported on first use)
    ProbTraceSpec, generate_prob_trace, parse_prob_trace, ProbCodeTokenizer  tasks.probabilistic
    PFSA, Action, Observation, joint_filter, marginal_filter                tasks.pfsa
    adversarial_sequence                                                    tasks.adversary
                                                 (numpy: imported on first use)
"""
from tasks.errors import DeltalensError
from tasks.groups import (
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
from tasks.tokenizers import (
    BOS_ID,
    PAD_ID,
    SUPERVISIONS,
    TOKENIZER_KINDS,
    CodeTokenizer,
    EncodedTrace,
    StatementTokenizer,
    TokenKind,
    Tokenizer,
    make_tokenizer,
)
from tasks.traces import (
    LineInfo,
    Reveal,
    Trace,
    TraceSpec,
    generate_trace,
    parse_action_count,
    parse_trace,
    replay_transcript,
)

# tasks.dataset needs torch (seconds to import); load it on first use so `deltalens trace` and
# tokenizer-only readers start fast.
_LAZY = {"SPLITS", "TraceDataset", "collate", "encoded_to_item", "make_batch", "trace_seed"}


# PFSA-SR (probabilistic traces, exact filtering, the adversary) needs numpy: also on first use.
_LAZY_MODULES = {
    **dict.fromkeys(("PFSA", "Action", "Observation", "RevealPosterior", "FilterResult", "LinearRun",
                     "joint_filter", "marginal_filter", "enumerate_posteriors", "run_linear_joint",
                     "run_linear_marginal"), "tasks.pfsa"),
    **dict.fromkeys(("ProbTraceSpec", "ProbTrace", "ProbProgram", "ProbCodeTokenizer", "generate_prob_trace",
                     "parse_prob_trace"), "tasks.probabilistic"),
    **dict.fromkeys(("AdversarySpec", "AdversarialSequence", "adversarial_sequence"), "tasks.adversary"),
}


def __getattr__(name: str):
    if name in _LAZY:
        from tasks import dataset

        return getattr(dataset, name)
    if name in _LAZY_MODULES:
        import importlib

        return getattr(importlib.import_module(_LAZY_MODULES[name]), name)
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")


__all__ = [
    "ACTION_SETS", "BOS_ID", "MAX_N", "MIN_N", "PAD_ID", "SPLITS", "SUPERVISIONS", "TOKENIZER_KINDS",
    "VARIABLE_NAMES", "ActionSet", "AlternatingGroup", "CodeTokenizer", "CyclicGroup", "DeltalensError",
    "DihedralGroup", "EncodedTrace", "LineInfo", "Permutation", "PermutationGroup", "Reveal",
    "StatementTokenizer", "SymmetricGroup", "TokenKind", "Tokenizer", "Trace", "TraceDataset", "TraceSpec",
    "apply_permutation", "collate", "compose", "encoded_to_item", "generate_trace", "get_action_set", "get_group", "inverse",
    "is_even", "lex_rank", "lex_unrank", "make_batch", "make_tokenizer", "parse_action_count", "parse_trace",
    "read_assignment", "replay_transcript", "trace_seed", "valid_action_sets", "write_assignment",
    *_LAZY_MODULES,
]
