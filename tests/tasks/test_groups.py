"""tasks.groups: group membership, sampling, generators, action sets and their Python statements."""

import itertools
import math
import random
from collections import Counter

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import (
    ACTION_SETS,
    MAX_N,
    AlternatingGroup,
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

SMALL_GROUPS = [f"{f}{n}" for f in "SAZD" for n in range(2, 7) if not (f in "AD" and n == 2)]


def _is_rotation(p):
    n = len(p)
    return all(p[i] == (i + p[0]) % n for i in range(n))


def _is_reflection(p):
    n = len(p)
    return all(p[i] == (p[0] - i) % n for i in range(n))


BRUTE_MEMBERSHIP = {
    "S": lambda p: True,
    "A": is_even,
    "Z": _is_rotation,
    "D": lambda p: _is_rotation(p) or _is_reflection(p),
}


@pytest.mark.parametrize(
    "name, canonical, order",
    [
        ("S5", "S5", 120),
        ("s5", "S5", 120),
        ("S_5", "S5", 120),
        (" a5 ", "A5", 60),
        ("Z7", "Z7", 7),
        ("C7", "Z7", 7),
        ("d6", "D6", 12),
        ("S10", "S10", math.factorial(10)),
        ("A10", "A10", math.factorial(10) // 2),
        ("Z2", "Z2", 2),
        ("S2", "S2", 2),
        ("D3", "D3", 6),
    ],
)
def test_get_group_parses_names(name, canonical, order):
    group = get_group(name)
    assert group.name == canonical
    assert group.order == order


@pytest.mark.parametrize(
    "name, words",
    [
        ("X5", "unknown group 'X5'"),
        ("S", "unknown group"),
        ("5", "unknown group"),
        ("", "unknown group"),
        ("S11", "S11 is out of range"),
        ("S1", "S1 is out of range"),
        ("A2", "A2 is out of range"),
        ("D2", "D2 is out of range"),
        ("Z0", "Z0 is out of range"),
        ("A11", "from 3 to 10"),
    ],
)
def test_get_group_rejects_with_one_sentence(name, words):
    with pytest.raises(DeltalensError) as err:
        get_group(name)
    message = str(err.value)
    assert words in message
    assert "\n" not in message and message.endswith(".")


@pytest.mark.parametrize("name", SMALL_GROUPS)
def test_elements_membership_and_ranks_agree_with_brute_force(name):
    group = get_group(name)
    n = group.n
    members = [p for p in itertools.permutations(range(n)) if BRUTE_MEMBERSHIP[group.family](p)]
    assert list(group.elements()) == members  # lexicographic order, nothing missing or extra
    assert group.order == len(members)
    for p in itertools.permutations(range(n)):
        assert group.contains(p) == (p in set(members))
    for i, p in enumerate(members):
        assert group.rank(p) == i and group.unrank(i) == p
    assert not group.contains((0,) * n) and not group.contains(tuple(range(n + 1)))


@pytest.mark.parametrize("name", SMALL_GROUPS)
def test_generators_generate_the_group(name):
    group = get_group(name)
    gens = group.generators()
    assert gens and all(group.contains(g) for g in gens)
    assert all(g != group.identity() for g in gens)
    closure, frontier = {group.identity()}, [group.identity()]
    while frontier:  # breadth-first closure under right multiplication by generators
        new = []
        for p in frontier:
            for g in gens:
                q = compose(p, g)
                if q not in closure:
                    closure.add(q)
                    new.append(q)
        frontier = new
    assert closure == set(group.elements())


def test_standard_generators_are_the_textbook_ones():
    assert get_group("S5").generators() == ((1, 0, 2, 3, 4), (1, 2, 3, 4, 0))  # (1 2), (1 2 3 4 5)
    assert get_group("A5").generators() == ((1, 2, 0, 3, 4), (1, 3, 2, 0, 4), (1, 4, 2, 3, 0))  # (1 2 k)
    assert get_group("Z4").generators() == ((1, 2, 3, 0),)
    assert get_group("D4").generators() == ((1, 2, 3, 0), (0, 3, 2, 1))  # rotation, reflection
    assert get_group("S2").generators() == ((1, 0),)


@pytest.mark.parametrize("name, draws", [("S4", 24_000), ("A4", 12_000), ("D5", 10_000), ("Z5", 5_000)])
def test_sample_is_uniform(name, draws):
    group = get_group(name)
    rng = random.Random(1)
    counts = Counter(group.sample(rng) for _ in range(draws))
    assert set(counts) == set(group.elements())
    expected = draws / group.order
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    # chi-square with order-1 dof: mean order-1, std sqrt(2(order-1)); 6 std is a loose bound
    dof = group.order - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof)


@pytest.mark.parametrize("name", ["S8", "A8", "S10", "A9"])
def test_sample_large_groups_without_enumerating(name, monkeypatch):
    group = get_group(name)
    cls = type(group)
    monkeypatch.setattr(cls, "elements", lambda self: (_ for _ in ()).throw(AssertionError("enumerated")))
    rng = random.Random(0)
    samples = [group.sample(rng) for _ in range(2000)]
    assert all(group.contains(p) for p in samples)
    assert len(set(samples)) > 1800  # |G| >= 20160: about 2000^2 / 2|G| <= 100 repeats expected
    if isinstance(group, AlternatingGroup):
        assert all(is_even(p) for p in samples)
    # image of point 0 is uniform over the n points
    firsts = Counter(p[0] for p in samples)
    assert len(firsts) == group.n and max(firsts.values()) < 2.5 * 2000 / group.n


@pytest.mark.parametrize("n", [5, 7, 9, 10])
def test_alternating_rank_unrank_without_listing(n):
    group = get_group(f"A{n}")
    rng = random.Random(n)
    for _ in range(300):
        p = group.sample(rng)
        i = group.rank(p)
        assert 0 <= i < group.order and group.unrank(i) == p
    assert group.unrank(0) == group.identity()
    assert is_even(group.unrank(group.order - 1))


def test_lex_rank_is_lexicographic():
    perms = list(itertools.permutations(range(4)))
    assert [lex_rank(p) for p in perms] == list(range(24))
    assert [lex_unrank(i, 4) for i in range(24)] == perms
    with pytest.raises(IndexError):
        lex_unrank(24, 4)


def test_action_semantics_match_python():
    # the module's convention: variable i takes the old value of variable p[i]
    assert write_assignment((1, 2, 0)) == "a, b, c = b, c, a"
    assert apply_permutation((10, 20, 30), (1, 2, 0)) == (20, 30, 10)
    rng = random.Random(0)
    for n in range(2, MAX_N + 1):
        group = SymmetricGroup(n)
        names = "abcdefghij"[:n]
        for _ in range(20):
            p, q = group.sample(rng), group.sample(rng)
            state = tuple(rng.sample(range(1, 100), n))
            env = dict(zip(names, state))
            for perm in (p, q):
                exec(write_assignment(perm, all_variables=True), {}, env)
            assert tuple(env[x] for x in names) == apply_permutation(apply_permutation(state, p), q)
            assert apply_permutation(apply_permutation(state, p), q) == apply_permutation(state, compose(p, q))
            assert compose(p, inverse(p)) == group.identity()


def test_statements_round_trip_and_spell_each_permutation_once():
    for name in ["S5", "A5", "D6", "Z7", "S4"]:
        for set_name in valid_action_sets(name):
            actions = get_action_set(name, set_name)
            written = [actions.statement(p) for p in actions.elements()]
            assert len(set(written)) == actions.size
            n = actions.group.n
            for p, text in zip(actions.elements(), written):
                assert read_assignment(text, n) == p
                lhs = text.split(" = ")[0].split(", ")
                assert lhs == sorted(lhs)
                assert len(lhs) == (n if set_name == "full" else len([i for i in range(n) if p[i] != i]))
    assert write_assignment((2, 4, 1, 0, 3), all_variables=True) == "a, b, c, d, e = c, e, b, a, d"
    assert write_assignment((0, 1), all_variables=True) == "a, b = a, b"


@pytest.mark.parametrize(
    "bad",
    [
        "a, b = b, b",
        "a, b = b",
        "a = b",
        "a, b = b, c",
        "x, y = y, x",
        "a,b = b,a",
        "f, a = a, f",
    ],
)
def test_read_assignment_rejects_non_permutations(bad):
    with pytest.raises(DeltalensError):
        read_assignment(bad, 5)


def test_action_sets_hold_exactly_the_right_elements():
    s5 = get_group("S5")
    swaps = get_action_set(s5, "swaps")
    assert swaps.size == 10 and all(len([i for i in range(5) if p[i] != i]) == 2 for p in swaps.elements())
    assert get_action_set(s5, "cycles").size == 20
    assert get_action_set("A5", "cycles").size == 20
    assert get_action_set(s5, "full").size == 120 and get_action_set(s5, "full").writes_all_variables
    assert list(get_action_set(s5, "generators").elements()) == list(s5.generators())
    assert get_action_set("D4", "swaps").size == 2  # reflections through two vertices
    assert get_action_set("D3", "swaps").size == 3  # D3 = S3
    assert get_action_set("Z3", "cycles").size == 2  # both rotations are 3-cycles
    assert get_action_set("Z2", "swaps").size == 1
    assert get_action_set("S8", "full").size == 40320
    assert valid_action_sets("A5") == ("cycles", "full", "generators")
    assert valid_action_sets("Z6") == ("full", "generators")
    rng = random.Random(0)
    for name in ["S5", "A6", "D5", "Z4"]:
        for set_name in valid_action_sets(name):
            actions = get_action_set(name, set_name)
            for _ in range(50):
                p = actions.sample(rng)
                assert actions.contains(p) and actions.group.contains(p)
                assert actions.element(actions.index(p)) == p


@pytest.mark.parametrize(
    "group, set_name, message",
    [
        ("A5", "swaps", "A5 has no transpositions; use --actions-set cycles, full or generators."),
        ("Z5", "swaps", "Z5 has no transpositions; use --actions-set full or generators."),
        ("S2", "cycles", "S2 has no 3-cycles; use --actions-set swaps, full or generators."),
        ("D6", "cycles", "D6 has no 3-cycles; use --actions-set full or generators."),
        ("S5", "shuffles", "unknown action set 'shuffles'; use one of swaps, cycles, full, generators."),
    ],
)
def test_invalid_action_sets_are_refused(group, set_name, message):
    with pytest.raises(DeltalensError) as err:
        get_action_set(group, set_name)
    assert str(err.value) == message


def test_every_supported_group_has_a_valid_action_set():
    for family in "SAZD":
        for n in range(2, MAX_N + 1):
            if family in "AD" and n == 2:
                continue
            sets = valid_action_sets(f"{family}{n}")
            assert "full" in sets and "generators" in sets
            assert set(sets) <= set(ACTION_SETS)
