"""interp.donor.follows_donor: after a state patch, is the prediction the donor trace's value?"""

from __future__ import annotations

import math

import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.donor import follows_donor
from deltalens.interp.interventions import NO_INTERVENTION, patch_state
from deltalens.loading.opened import open_checkpoint


@pytest.fixture(scope="module")
def paper():
    checkpoint = open_checkpoint("s3-deltanet-neg-statement")
    batch, donor = checkpoint.batch(32, seed=0), checkpoint.batch(32, seed=1)
    with torch.no_grad():
        _, states = checkpoint.model.run_with_cache(donor["tokens"], names_filter=lambda n: n.endswith("hook_state"))
    return checkpoint, batch, donor, states


def test_the_tracking_heads_state_carries_the_donors_values(paper):
    checkpoint, batch, donor, states = paper
    result = follows_donor(checkpoint.model, batch, donor, patch_state(0, 3, states))
    assert result.n_reveals == int(batch["reveal_mask"][:, 1:].sum()) and 0 < result.n_different < result.n_reveals
    assert result.follows_where_different > 0.9  # the paper's model reads its values off layer 0 head 3


def test_without_a_patch_it_follows_the_donor_only_where_the_values_agree(paper):
    checkpoint, batch, donor, _ = paper
    result = follows_donor(checkpoint.model, batch, donor, NO_INTERVENTION)
    assert result.follows_where_different == 0.0  # it predicts its own trace's values (accuracy 1.000)
    assert math.isclose(result.follows, 1 - result.n_different / result.n_reveals)


def test_another_heads_state_does_not_move_the_prediction(paper):
    checkpoint, batch, donor, states = paper
    assert follows_donor(checkpoint.model, batch, donor, patch_state(1, 0, states)).follows_where_different < 0.1


def test_mismatched_batches_get_a_sentence(paper):
    checkpoint, batch, donor, states = paper
    small = {name: value[:4] for name, value in donor.items()}
    with pytest.raises(DeltalensError, match="pair them up"):
        follows_donor(checkpoint.model, batch, small, NO_INTERVENTION)
