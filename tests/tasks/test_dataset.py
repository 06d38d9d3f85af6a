"""tasks.dataset: reproducible items, disjoint train/eval seeds, padded batches with the right masks."""

import pytest
import torch
from torch.utils.data import DataLoader

from deltalens.core.errors import DeltalensError
from deltalens.tasks.dataset import SPLITS, TraceDataset, collate, make_batch, trace_seed
from deltalens.tasks.tokenizers import PAD_ID, TokenKind, make_tokenizer
from deltalens.tasks.traces import TraceSpec, generate_trace

SPEC = TraceSpec(group="S5", action_set="swaps", actions=(4, 20), spacing=3)


@pytest.fixture(scope="module", params=["code", "statement"])
def tokenizer(request):
    return make_tokenizer(request.param, SPEC)


def test_trace_seeds_never_overlap_between_splits():
    for base in (0, 1, 12345):
        train = {trace_seed(base, "train", i) for i in range(20_000)}
        evals = {trace_seed(base, "eval", i) for i in range(20_000)}
        assert len(train) == len(evals) == 20_000
        assert not train & evals
        assert all(s % 2 == SPLITS["train"] for s in train) and all(s % 2 == SPLITS["eval"] for s in evals)
        assert all(0 <= s < 2**63 for s in train | evals)
    assert trace_seed(3, "train", 5) == trace_seed(3, "train", 5)
    assert trace_seed(3, "train", 5) != trace_seed(4, "train", 5)


def test_items_are_reproducible_and_independent_of_access_order(tokenizer):
    a = TraceDataset(SPEC, tokenizer, size=50, seed=9)
    b = TraceDataset(SPEC, tokenizer, size=50, seed=9)
    forward = [a[i]["tokens"] for i in range(50)]
    backward = [b[i]["tokens"] for i in reversed(range(50))][::-1]
    assert all(torch.equal(x, y) for x, y in zip(forward, backward))
    assert torch.equal(a[-1]["tokens"], a[49]["tokens"])
    other = TraceDataset(SPEC, tokenizer, size=50, seed=10)
    assert sum(torch.equal(a[i]["tokens"], other[i]["tokens"]) for i in range(50)) < 3
    with pytest.raises(IndexError):
        a[50]


def test_train_and_eval_traces_differ(tokenizer):
    train = TraceDataset(SPEC, tokenizer, size=200, seed=0, split="train")
    evals = TraceDataset(SPEC, tokenizer, size=200, seed=0, split="eval")
    train_seeds = {train.seed_of(i) for i in range(200)}
    eval_seeds = {evals.seed_of(i) for i in range(200)}
    assert not train_seeds & eval_seeds
    train_texts = {train.trace(i).text for i in range(200)}
    assert not train_texts & {evals.trace(i).text for i in range(200)}


def test_items_encode_their_trace(tokenizer):
    data = TraceDataset(SPEC, tokenizer, size=5, seed=1)
    for i in range(5):
        item = data[i]
        trace = generate_trace(SPEC, int(item["trace_seed"]))
        assert trace.text == data.trace(i).text
        assert tokenizer.decode(item["tokens"].tolist()) == trace.text


@pytest.mark.parametrize("supervision", ["all", "reveal"])
def test_collate_shapes_and_masks(tokenizer, supervision):
    data = TraceDataset(SPEC, tokenizer, size=6, seed=2, supervision=supervision)
    items = [data[i] for i in range(6)]
    batch = collate(items)
    B, T = 6, max(len(item["tokens"]) for item in items)
    n = 5
    expected = {
        "tokens": ((B, T), torch.long),
        "loss_mask": ((B, T), torch.bool),
        "reveal_mask": ((B, T), torch.bool),
        "answers": ((B, T), torch.long),
        "reveal_vars": ((B, T), torch.long),
        "states": ((B, T, n), torch.long),
        "kinds": ((B, T), torch.long),
        "state_steps": ((B, T), torch.long),
        "action_pos": ((B, T), torch.long),
        "perm_ids": ((B, T), torch.long),
        "lengths": ((B,), torch.long),
        "trace_seeds": ((B,), torch.long),
    }
    assert set(batch) == set(expected)
    for key, (shape, dtype) in expected.items():
        assert tuple(batch[key].shape) == shape and batch[key].dtype == dtype, key

    lengths = batch["lengths"]
    assert lengths.tolist() == [len(item["tokens"]) for item in items] and len(set(lengths.tolist())) > 1
    real = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    pad = ~real
    assert (batch["tokens"][pad] == PAD_ID).all() and (batch["tokens"][real] != PAD_ID).all()
    assert (batch["states"][pad] == 0).all() and (batch["states"][real] >= 1).all()
    assert not batch["loss_mask"][pad].any() and not batch["reveal_mask"][pad].any()
    assert (batch["answers"][pad] == 0).all() and (batch["kinds"][pad] == TokenKind.OTHER).all()
    assert (batch["state_steps"][pad] == -1).all() and (batch["state_steps"][real] >= 0).all()
    for i in range(B):  # states are the trace's s_t for the step in force
        trace = generate_trace(SPEC, int(batch["trace_seeds"][i]))
        steps = batch["state_steps"][i, : lengths[i]]
        assert torch.equal(batch["states"][i, : lengths[i]], torch.tensor(trace.states)[steps])
    assert not batch["loss_mask"][:, 0].any()  # nothing predicts the first token
    if supervision == "all":
        targets = real.clone()
        targets[:, 0] = False
        assert torch.equal(batch["loss_mask"], targets)
    else:
        assert torch.equal(batch["loss_mask"], batch["reveal_mask"])

    reveal = batch["reveal_mask"]
    assert torch.equal(reveal, batch["kinds"] == TokenKind.REVEAL)
    assert torch.equal(reveal, batch["answers"] > 0)
    assert reveal.sum() == sum(len(data.trace(i).reveals) for i in range(6))
    # the answer is the true value of the revealed variable in the state in force
    b, t = reveal.nonzero(as_tuple=True)
    shown = batch["states"][b, t, batch["reveal_vars"][b, t]]
    assert torch.equal(shown, batch["answers"][b, t])
    # every state row is a permutation of 1..n
    rows = batch["states"][real]
    assert torch.equal(rows.sort(dim=-1).values, torch.arange(1, n + 1).expand_as(rows))
    actions = batch["kinds"] == TokenKind.ACTION
    assert ((batch["perm_ids"] >= 0) == actions).all() and ((batch["action_pos"] >= 0) == actions).all()
    # the loss pairs logits[:, t-1] with tokens[:, t]: the masked targets are exactly the reveal tokens
    if supervision == "reveal":
        for i in range(B):
            trace = generate_trace(SPEC, int(batch["trace_seeds"][i]))
            targets = batch["tokens"][i][batch["loss_mask"][i]]
            values = [v for r in trace.reveals for v in r.values]
            assert [int(tokenizer.token_of(int(x))) for x in targets] == values


def test_make_batch_matches_the_dataset(tokenizer):
    batch = make_batch(SPEC, tokenizer, batch_size=4, seed=3, split="eval", supervision="reveal")
    data = TraceDataset(SPEC, tokenizer, size=4, seed=3, split="eval", supervision="reveal")
    again = collate([data[i] for i in range(4)])
    assert set(batch) == set(again) and all(torch.equal(batch[k], again[k]) for k in batch)
    other = make_batch(SPEC, tokenizer, batch_size=4, seed=3, split="train")
    assert not torch.equal(other["trace_seeds"], batch["trace_seeds"])


def test_works_with_a_dataloader(tokenizer):
    data = TraceDataset(SPEC, tokenizer, size=10, seed=0)
    batches = list(DataLoader(data, batch_size=4, collate_fn=collate))
    assert [b["tokens"].shape[0] for b in batches] == [4, 4, 2]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(split="test"), "split must be 'train' or 'eval'"),
        (dict(seed=-1), "seed must be a whole number >= 0"),
        (dict(size=0), "size must be a whole number >= 1"),
        (dict(supervision="values"), "supervision must be 'all' or 'reveal'"),
    ],
)
def test_bad_arguments_are_refused(tokenizer, kwargs, words):
    args = dict(size=4, seed=0, split="train", supervision="all") | kwargs
    with pytest.raises(DeltalensError, match=words):
        TraceDataset(SPEC, tokenizer, **args)


def test_incompatible_tokenizer_is_refused():
    with pytest.raises(DeltalensError, match="cannot encode S5 swaps"):
        TraceDataset(SPEC, make_tokenizer("statement", "S5", "cycles"), size=2)
    with pytest.raises(DeltalensError, match="knows only 3"):
        make_batch(SPEC, make_tokenizer("code", 3), batch_size=2)
    with pytest.raises(DeltalensError):
        collate([])


@pytest.mark.parametrize("supervision", ["all", "reveal"])
def test_collate_accepts_encoded_traces(tokenizer, supervision):
    data = TraceDataset(SPEC, tokenizer, size=5, seed=4, supervision=supervision)
    from_items = collate([data[i] for i in range(5)])
    encoded = [tokenizer.encode_trace(data.trace(i)) for i in range(5)]
    from_encoded = collate(encoded, supervision=supervision)
    assert set(from_items) == set(from_encoded)
    assert all(torch.equal(from_items[k], from_encoded[k]) for k in from_items)
    # supervision given at collate time replaces the items' own mask
    other = "all" if supervision == "reveal" else "reveal"
    switched = collate([data[i] for i in range(5)], supervision=other)
    assert torch.equal(switched["loss_mask"], collate(encoded, supervision=other)["loss_mask"])
    assert not torch.equal(switched["loss_mask"], from_items["loss_mask"])
    with pytest.raises(DeltalensError, match="supervision must be"):
        collate(encoded, supervision="some")


def test_collate_of_encoded_traces_defaults_to_all_tokens(tokenizer):
    enc = tokenizer.encode_trace(generate_trace(SPEC, 123))
    batch = collate([enc])
    assert batch["loss_mask"][0].tolist() == enc.loss_mask("all")
    assert batch["trace_seeds"].tolist() == [123]
    huge = tokenizer.encode_trace(generate_trace(SPEC, 2**70))
    assert collate([huge])["trace_seeds"].tolist() == [-1]  # not representable in int64
