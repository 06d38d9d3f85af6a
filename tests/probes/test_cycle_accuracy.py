"""probes/cycle_accuracy.py on the hand-set swap tracker (tests/handset.py), whose answers are known:
it applies every swap exactly, and with its tracking head's beta mapped to [0, 1] it applies none."""

import pytest
from handset import swap_model

from deltalens.core.errors import DeltalensError
from deltalens.interp.interventions import rescale_beta
from deltalens.probes.cycle_accuracy import (
    position_table,
    reveal_frame,
    single_action_table,
    standard_reflections,
    stretch_table,
)


@pytest.fixture(scope="module")
def hand():
    return swap_model(n=4, n_layers=1, n_heads=2, track=(0, 0))


def test_reveal_frame_charges_each_reveal_to_the_actions_before_it(hand):
    frame = reveal_frame(hand.model, hand.batch(16, seed=0))  # 16 actions, a reveal every 4
    assert frame["correct"].all() and len(frame) == 16 * 4
    assert (frame["stretch"].map(len) == 4).all() and (frame["actions_before"] == 4 * (frame["reveal"] + 1)).all()
    # a swap moves the variable iff it is one of the two swapped; over a stretch, the composition decides
    for row in frame.itertuples():
        v = row.var
        for p in row.stretch[::-1]:  # s_t[v] = s_{t-1}[p[v]]: follow v back to the previous reveal
            v = p[v]
        assert row.moved == (v != row.var)


def test_single_action_and_first_reveal_tables(hand):
    frame = reveal_frame(hand.model, hand.batch(200, seed=1, actions=1, spacing=1))
    table = single_action_table(frame, 4).set_index("cycle_type")
    assert list(table.index) == ["2+1+1"] and table.loc["2+1+1", "accuracy"] == 1.0
    assert table.loc["2+1+1", "reflections (standard rep)"] == 1 and table.loc["2+1+1", "chance"] == 0.25
    assert table.loc["2+1+1", "n"] == frame["moved"].sum() < len(frame)  # fixed variables left out
    broken = reveal_frame(hand.model, hand.batch(200, seed=1, actions=1, spacing=1), rescale_beta(hand.model, 0, 0))
    assert single_action_table(broken, 4)["accuracy"].iloc[0] < 0.5  # a projection is no swap
    first = stretch_table(reveal_frame(hand.model, hand.batch(64, seed=2)), 4)
    assert list(first.iloc[:, 0]) == [0] and first["accuracy"].iloc[0] == 1.0  # a swap needs 1 reflection
    assert standard_reflections((1, 2, 3, 0)) == 3 and standard_reflections((1, 0, 3, 2)) == 2
    with pytest.raises(DeltalensError, match="single-action"):
        single_action_table(frame[~frame["moved"]], 4)


def test_position_table_keeps_reveals_whose_earlier_reveals_were_right(hand):
    frame = reveal_frame(hand.model, hand.batch(16, seed=0))
    table = position_table(frame)
    assert sorted(set(table["reveal"])) == [1, 2, 3, 4] and (table["accuracy"] == 1.0).all()
    assert table["n"].sum() == frame["moved"].sum()
    frame.loc[frame["reveal"] == 0, "correct"] = False  # every trace wrong at its first reveal
    assert set(position_table(frame)["reveal"]) == {1}  # nothing after it is kept
