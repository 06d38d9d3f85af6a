"""The offline stand-in for a pretrained LM, end to end with HF_HUB_OFFLINE=1: the shipped BPE DeltaNet
(checkpoints/s3-deltanet-bpe, its own byte-level BPE tokenizer) put into a Hugging Face cache as
deltalens/s3-deltanet-bpe, then loaded by Hub id -> scored by actions since last reveal -> heads ranked
by the beta-range sweep -> the top head verified by a beta rescale -> its state probed."""

from __future__ import annotations

import pytest
from hub_standin import REPO, put_standin  # noqa: E402

import deltalens as dl
from deltalens.tasks.tokenizers.hf import HFTokenizer
from deltalens.training.text_eval import evaluate_since_reveal


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    put_standin(home)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(home))
        patch.delenv("HF_HUB_CACHE", raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        model = dl.load(REPO)
        yield model, model.checkpoint.batch(24)


def test_standin_tracks_beyond_the_last_revealed_value(standin):
    model, _ = standin
    assert isinstance(model.tokenizer, HFTokenizer) and model.checkpoint.meta.get("task") is None
    report = evaluate_since_reveal(model, model.tokenizer, model.checkpoint.spec, n_traces=24)
    assert report.reveal_accuracy > 0.95
    assert report.last_value_baseline < 0.7 and report.chance == pytest.approx(1 / 3)
    far = [row for row in report.rows if row["count"] >= 10 and row["last_value_baseline"] < 0.6]
    assert far and all(row["accuracy"] > 0.9 for row in far)  # right where copying the last print fails


def test_standin_tracking_head_ranked_verified_and_probed(standin):
    model, batch = standin
    result = dl.sweep(model, batch, "beta-range", progress=False)
    layer, head = result.highlight()
    drops = result.frame.set_index(["layer", "head"])["drop"]
    assert result.baseline > 0.95
    assert drops[(layer, head)] > 0.3  # rescaling the top head's beta to [0, 1] costs much of the accuracy
    assert (drops.drop((layer, head)) < drops[(layer, head)] / 2).all()  # and no other head comes close
    again = dl.accuracy_under(model, batch, dl.rescale_beta(model, layer, head, to=(0.0, 1.0)))
    assert again == pytest.approx(result.baseline - drops[(layer, head)], abs=1e-9)
    probes = dl.linear_probes(model, batch, sites=("state",), targets=("value",), seed=0).by_head()
    row = probes[(probes["layer"] == layer) & (probes["head"] == head)].iloc[0]
    assert row["probe_accuracy_value"] > 0.6  # the head's state holds the values (chance 1/3)
