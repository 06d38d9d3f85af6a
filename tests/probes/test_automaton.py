"""Automaton extraction: the Cayley-graph comparison on a known graph, and a run on the shipped S3 head."""

import itertools

from deltalens.probes.automaton import automaton_figure, extract_automaton
from deltalens.probes.automaton_graph import _apply, _isomorphic, _moore


def _cayley_s3():
    vertices = list(itertools.permutations(range(3)))
    sigma = {0: (1, 0, 2), 1: (0, 2, 1)}  # two swaps generate S3
    index = {g: i for i, g in enumerate(vertices)}
    delta = {(index[g], a): index[_apply(g, s)] for g in vertices for a, s in sigma.items()}
    return vertices, sigma, delta


def test_the_cayley_graph_is_isomorphic_to_itself_and_a_corrupted_one_is_not():
    vertices, sigma, delta = _cayley_s3()
    shuffled = {(5 - s, a): 5 - t for (s, a), t in delta.items()}  # relabelled states: still isomorphic
    assert _isomorphic(6, shuffled, set(vertices), sigma, [0, 1])
    broken = dict(delta)
    broken[(0, 0)] = 0  # a self-loop the group does not have
    assert not _isomorphic(6, broken, set(vertices), sigma, [0, 1])
    assert not _isomorphic(5, {k: v for k, v in delta.items() if 5 not in (k[0], v)}, set(vertices), sigma, [0, 1])


def test_moore_merges_equivalent_states_only():
    # states 0 and 1 print alike and move alike: one state; 2 prints differently
    delta = {(0, 0): 2, (1, 0): 2, (2, 0): 0}
    part = _moore(3, ["x", "x", "y"], delta, [0])
    assert part[0] == part[1] != part[2]


def test_shipped_s3_tracking_head(shipped_s3):
    import deltalens as dl

    cap = dl.capture(shipped_s3, shipped_s3.checkpoint.batch(24), names=("state",))
    result = extract_automaton(cap, 0, 3, candidates=(2, 4, 6, 8))
    assert result.k in (2, 4, 6, 8) and set(result.scores) <= {2, 4, 6, 8}
    assert result.n_arrangements == 6 and len(result.actions) == 3
    # the head applies each swap one token late (its keys pass through a short convolution): read at the
    # action's own token its states hold the previous arrangement, and the clusters were 37% pure
    assert result.extra["delay"] == 1 and result.extra["separation"][1] > 0.9 > 0.5 > result.extra["separation"][0]
    assert result.k == result.n_states == 6 and result.purity == 1.0 and result.determinism == 1.0
    assert result.agreement == 1.0 and result.isomorphic
    legend = [trace.name for trace in automaton_figure(result).data]  # the actions as the REPL writes them
    assert sorted(legend[:-1]) == ["a, b = b, a", "a, c = c, a", "b, c = c, b"] and legend[-1] == "states"
    late = extract_automaton(cap, 0, 3, candidates=(6,), delay=0)
    assert late.extra["delay"] == 0 and late.purity < 0.6 and not late.isomorphic


def test_centroid_intervention_moves_the_shipped_s3_reveal(shipped_s3):
    import deltalens as dl
    from deltalens.probes.automaton_intervention import centroid_intervention

    cap = dl.capture(shipped_s3, shipped_s3.checkpoint.batch(24), names=("state",))
    result = extract_automaton(cap, 0, 3, candidates=(6,))
    moved = centroid_intervention(shipped_s3, shipped_s3.checkpoint.batch(4, seed=3), result, max_cases=8)
    assert moved["cases"] == 8 and moved["follows_centroid"] >= 0.9 and moved["correct_without"] == 1.0
    import pytest

    with pytest.raises(dl.DeltalensError, match="takes a batch of traces with their labels"):
        centroid_intervention(shipped_s3, shipped_s3.checkpoint.batch(4)["tokens"], result)
    s5 = dl.load("s5-deltanet-neg-statement")  # the same state shape, five variables
    with pytest.raises(dl.DeltalensError, match="read off L0H3 of another model"):
        centroid_intervention(s5, s5.checkpoint.batch(4), result)


def test_delayed_rows_stay_inside_their_trace():
    from types import SimpleNamespace

    import torch

    from deltalens.probes.automaton import _delayed

    cap = SimpleNamespace(labels={"trace": torch.tensor([0, 0, 0, 0, 1, 1, 1])})
    sequences, read = _delayed(cap, [[0, 1, 3], [4, 5, 6]], 1)
    # trace 0: row 3 would read row 4 (trace 1) and is cut; trace 1: row 6 has no next row and is cut
    assert sequences == [[0, 1], [4, 5]] and read == {0: 1, 1: 2, 4: 5, 5: 6}


def test_bad_delay_is_one_sentence(shipped_s3):
    import pytest

    import deltalens as dl
    from deltalens.core.errors import DeltalensError

    cap = dl.capture(shipped_s3, shipped_s3.checkpoint.batch(4), names=("state",))
    with pytest.raises(DeltalensError, match="delay"):
        extract_automaton(cap, 0, 3, delay=-1)
    with pytest.raises(DeltalensError, match=r"layer 9 is out of range: the captured model has layers 0\.\.1"):
        extract_automaton(cap, 9, 0)
