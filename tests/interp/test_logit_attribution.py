"""Direct logit attribution sums to the real logit difference, head by head and factor by factor."""

import pytest
import torch

from deltalens.core.errors import DeltalensError
from deltalens.interp.logit_attribution import dla_figure, head_outputs, logit_attribution, reveal_rows
from tests.conftest import DELTA_RULE_ARCHS

# the config flag of each family's gated output norm; KDA's output is always gated (fla's KDAConfig has no flag)
OUTPUT_GATE = {"deltanet": "use_gate", "gated_deltanet": "use_gate", "deltaproduct": "use_output_gate", "kda": None}
CASES = [(arch, gated) for arch in DELTA_RULE_ARCHS for gated in ((False, True) if OUTPUT_GATE[arch] else (True,))]


@pytest.mark.parametrize("arch, gated_output", CASES)
def test_components_sum_to_the_logit_difference(tiny_model, arch, gated_output):
    from tests.conftest import build_tiny

    flag = OUTPUT_GATE[arch]
    model = build_tiny(arch, **({flag: gated_output} if flag else {}))
    with torch.no_grad():  # a non-trivial final norm weight, so that folding it in is tested
        model.model.norm.weight.uniform_(0.5, 2.0)
    tokens = torch.randint(0, 23, (3, 15), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    answer = torch.tensor([3, 4, 5])
    against = torch.tensor([[6, 7], [8, 9], [1, 2]])
    result = logit_attribution(model, cache, torch.tensor([14, 10, 7]), answer, against)
    logits = model(tokens)
    rows = logits[torch.arange(3), torch.tensor([14, 10, 7])]
    real = rows[torch.arange(3), answer] - rows.gather(1, against).mean(1)
    assert torch.allclose(result.actual.float(), real, atol=1e-5)
    assert result.error < 1e-4
    assert len(result.components) == 1 + 2 * (2 + 1)  # embed, 2 heads and an MLP per layer
    if arch == "deltaproduct":
        split = logit_attribution(model, cache, torch.tensor([14, 10, 7]), answer, against, per_factor=True)
        assert split.error < 1e-4
        assert "L1H0F2" in split.components
        assert torch.allclose(split.head_grid(), result.head_grid(), atol=1e-5)


def test_heads_add_up_to_attn_out(tiny_model):
    model = tiny_model("gated_deltanet")
    tokens = torch.randint(0, 23, (2, 9))
    _, cache = model.run_with_cache(tokens)
    b, t = torch.tensor([0, 1, 1]), torch.tensor([3, 0, 8])
    heads = head_outputs(model, cache, 1, b, t)
    assert torch.allclose(heads.sum(1), cache["blocks.1.hook_attn_out"][b, t], atol=1e-6)


def test_shipped_s3_reveals(shipped_s3, shipped_s3_batch):
    _, cache = shipped_s3.run_with_cache(shipped_s3_batch["tokens"])
    positions, answer, against = reveal_rows(shipped_s3_batch)
    result = logit_attribution(shipped_s3, cache, positions, answer, against)
    assert result.error < 1e-4
    assert float(result.actual.mean()) > 5  # the model gets its reveals right, by a margin
    assert dla_figure(result).data[0].z.shape == (2, 4)
    with pytest.raises(DeltalensError):
        logit_attribution(shipped_s3, cache, positions, answer[:3], against)


def test_a_tokenizer_that_spells_a_value_two_ways_is_refused_in_one_sentence():
    # value 3 is revealed as token 31 once and as token 32 later (a BPE tokenizer's context-dependent pieces)
    tokens = torch.tensor([[5, 31, 6, 21, 6, 32]])
    answers = torch.tensor([[-1, 3, -1, 2, -1, 3]])
    batch = {"tokens": tokens, "answers": answers, "reveal_mask": answers > 0}
    with pytest.raises(DeltalensError, match="one token per value"):
        reveal_rows(batch)
    # the same values written consistently are fine
    batch["tokens"] = torch.tensor([[5, 31, 6, 21, 6, 31]])
    positions, answer, against = reveal_rows(batch)
    assert answer.tolist() == [31, 21, 31] and against.tolist() == [[21], [31], [21]]


def test_an_unembedding_bias_is_a_component_and_the_sum_still_holds(tiny_model):
    """A model whose LM head has a bias (a transformers model may): it is its own component, answer minus against."""
    from tests.conftest import build_tiny

    model = build_tiny("deltanet")
    with torch.no_grad():
        bias = torch.nn.Parameter(torch.randn(model.lm_head.out_features, generator=torch.Generator().manual_seed(1)))
    model.lm_head.bias = bias
    tokens = torch.randint(0, 23, (2, 12), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    answer, against = torch.tensor([3, 4]), torch.tensor([[6, 7], [8, 9]])
    result = logit_attribution(model, cache, torch.tensor([11, 5]), answer, against)
    assert result.components[-1] == "unembed bias" and result.error < 1e-4
    assert not result.contributions.requires_grad and not result.actual.requires_grad  # measured, not a graph
    want = (bias[answer] - bias[against].mean(-1)).double()
    assert torch.allclose(result.contributions[:, -1], want.detach(), atol=1e-6)
