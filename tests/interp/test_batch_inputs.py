"""TransformerLens habits on the inputs (interp/batch_inputs.py): the tools take a batch, a token tensor or REPL
text alike, and model(text) runs as HookedTransformer(text) does."""

import pytest
import torch

import deltalens as dl
from deltalens.core.errors import DeltalensError

TEXT = (
    ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b = b, a\n>>> print('a', a)\na 2\n"
    ">>> b, c = c, b\n>>> print('c', c)\nc 1\n"
)


def test_text_and_token_ids_carry_the_labels_a_batch_carries(shipped_s3, shipped_s3_batch):
    model, batch = shipped_s3, shipped_s3_batch
    from_tokens = dl.capture(model, batch["tokens"], names=("beta",))
    from_batch = dl.capture(model, batch, names=("beta",))
    torch.testing.assert_close(from_tokens["blocks.0.attn.hook_beta"], from_batch["blocks.0.attn.hook_beta"])
    assert torch.equal(from_tokens.labels["kind"], from_batch.labels["kind"])  # re-read from the text
    assert dl.accuracy_under(model, batch["tokens"]) == dl.accuracy_under(model, batch)
    assert dl.accuracy_under(model, TEXT) == 1.0  # both reveals right
    assert dl.eigenvalue_report(model, TEXT).tracking_head() == (0, 3)
    assert dl.sweep(model, [TEXT, TEXT], "beta-range", progress=False).baseline == 1.0


def test_model_of_text_is_model_of_its_tokens(shipped_s3):
    torch.testing.assert_close(shipped_s3(TEXT), shipped_s3(shipped_s3.to_tokens(TEXT)), atol=0, rtol=0)
    logits, cache = shipped_s3.run_with_cache(TEXT)
    assert logits.shape[:2] == cache["hook_embed"].shape[:2]


def test_ids_that_are_no_repl_trace_capture_but_cannot_be_scored(shipped_s3):
    ids = torch.tensor([[1, 5, 5, 5, 7, 2]])
    cap = dl.capture(shipped_s3, ids, names=("beta",))
    assert len(cap) == 6 and cap.n_vars == 0
    with pytest.raises(DeltalensError, match="needs the reveals' labels"):
        dl.accuracy_under(shipped_s3, ids)
    with pytest.raises(DeltalensError, match="token ids are an integer tensor"):
        dl.capture(shipped_s3, torch.zeros(2, 3), names=("beta",))


def test_text_that_does_not_replay_says_where_when_labels_are_needed(shipped_s3):
    wrong = TEXT.replace("a 2\n", "a 3\n")  # the print shows a value the statements do not give
    assert len(dl.capture(shipped_s3, wrong, names=("beta",))) > 0  # the model reads it as any text
    with pytest.raises(DeltalensError, match=r"line 6: the print shows 'a 3' but replaying the statements gives 'a 2'"):
        dl.accuracy_under(shipped_s3, wrong)
    with pytest.raises(DeltalensError, match=r"text 1: line 6: the print shows 'a 3'"):
        dl.accuracy_under(shipped_s3, [TEXT, wrong])


def test_padded_ids_keep_their_lengths_and_unlabelled_ones_are_refused_by_the_eigenvalue_report(shipped_s3):
    ids = shipped_s3.to_tokens([">>> a = 1\n>>> b = 2\n", ">>> a = 1\n"])  # the second row right-padded
    assert ids[1, -1] == shipped_s3.tokenizer.pad_id
    cap = dl.capture(shipped_s3, ids, names=("beta", "k"))
    assert cap.lengths.tolist() == [3, 2] and len(cap) == 5  # the <pad> is no token of the trace
    with pytest.raises(DeltalensError, match="carry no token kinds.*dl.census"):
        dl.eigenvalue_report(cap)
    assert len(dl.census(shipped_s3, ids).heads) == 8  # the census reads any tokens


@pytest.mark.parametrize("name", ["s3-deltanet-neg-statement", "s3-lstm-statement-prob", "s3-transformer-statement"])
def test_ids_outside_the_vocabulary_and_empty_batches_are_refused_at_the_door(name):
    model = dl.load(name)
    vocab = model.cfg.d_vocab
    for bad, why in [
        (torch.tensor([[1, vocab]]), rf"token ids must lie in 0..{vocab - 1} .* got 1 to {vocab}"),
        (torch.tensor([[-1, 2]]), "token ids must lie in"),
        (torch.zeros(1, 0, dtype=torch.long), "holds no token"),
    ]:
        with pytest.raises(DeltalensError, match=why):
            dl.capture(model, bad, names=("resid",))
        if name != "s3-transformer-statement":  # TransformerLens's own forward: its errors, not ours
            with pytest.raises(DeltalensError, match=why.replace("holds no token", "hold at least one token")):
                model(bad)
    with pytest.raises(DeltalensError, match="holds no token"):
        dl.accuracy_under(model, {key: value[:0] for key, value in model.checkpoint.batch(2).items()})
