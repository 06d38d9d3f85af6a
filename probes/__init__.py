"""Measurements of captured activations and of beliefs.

    eigenvalues.py    beta and the transition eigenvalues 1 - beta per head; the tracking head
    subspace.py       the state's singular values, effective rank, PCA dimension, action-key span
    linear_probes.py  decoding each variable's value from the residual stream and each head's state
    products.py       does a head's per-token product of reflections apply the action's permutation?
    product_reps.py   the product probe per named representation (standard, rotation), by cycle type
    cycle_accuracy.py reveal accuracy by the cycle type of the actions a reveal depends on
    summary.py        every per-head measurement of a checkpoint in one table (`deltalens probe`)
    automaton.py      a head's states clustered into an automaton, compared with the group's Cayley graph
    automaton_graph.py  its transition table minimised (Moore) and matched against the Cayley graph
    census.py         per layer and head of any delta-rule model: beta > 1, near-reflections, eigenvalues, rank
    dictionary_sites.py  the sites a sparse dictionary codes and the hooks each reads
    sparse_dictionary.py  a TopK sparse dictionary (sparsify's coder) of one site, trained, saved and loaded
    dictionary_scores.py  its latents scored against the true state: facts "x holds v" and arrangements

Each returns a dataclass of pandas frames, with the plotly figure for it in the same module. The
maths they test against, which reads no model, lives with the task: the groups' representations
(tasks/representations.py, tasks/rotation_reps.py) and the linear filter's belief decay
(tasks/belief_decay.py).
"""
