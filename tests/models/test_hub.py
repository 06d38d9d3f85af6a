"""Models by Hugging Face Hub id, from a local cache in the Hub's layout with HF_HUB_OFFLINE=1 (nothing
reaches the Hub): dl.load("org/name"), revisions, the folder's own tokenizer, the CLI, and the
sentences for what cannot be opened."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import torch
from hub_cache import put_in_hub_cache

import deltalens as dl
from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.tasks.tokenizers.hf import HFTokenizer
from deltalens.tasks.tokenizers.repl_bpe import train_repl_bpe
from deltalens.tasks.traces import TraceSpec

OLD, NEW = "1" * 40, "2" * 40  # two commits of one repository


def _fla_folder(folder, tokenizer_file, seed):
    """An fla-format DeltaNet folder (no deltalens section) with a tokenizer.json, as a hub model has."""
    from tests.conftest import build_tiny

    tokenizer = HFTokenizer.from_file(tokenizer_file)
    model = build_tiny("deltanet", seed=seed, vocab_size=tokenizer.vocab_size)
    model.save_pretrained(folder)
    for name, text in tokenizer.files().items():
        (folder / name).write_text(text)
    return model


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """HF_HOME with org/tiny at two revisions (refs/main = NEW) and a llama and a hybrid config."""
    root = tmp_path_factory.mktemp("hub")
    tokenizer_file = train_repl_bpe(TraceSpec(group="S3", actions=8, spacing=2), root / "tok.json", 300, 200)
    cache = root / "hf" / "hub"
    models = {}
    for revision, seed in ((OLD, 1), (NEW, 2)):
        source = root / f"src-{seed}"
        models[revision] = _fla_folder(source, tokenizer_file, seed)
        put_in_hub_cache(source, cache, "org/tiny", revision)
    for repo, change in (("org/llama", {"model_type": "llama"}), ("org/hybrid", {"attnres_block_size": 2})):
        source = root / repo.replace("/", "-")
        source.mkdir()
        config = json.loads((root / "src-1" / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, **change}))
        put_in_hub_cache(source, cache, repo)
    return {"home": root / "hf", "models": models}


@pytest.fixture
def offline(hub, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hub["home"]))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def _same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_load_by_hub_id_opens_the_cached_snapshot_with_its_tokenizer(offline):
    model = dl.load("org/tiny")
    assert _same_weights(model, offline["models"][NEW])  # refs/main
    assert str(model.checkpoint.path).endswith(f"models--org--tiny/snapshots/{NEW}")
    assert isinstance(model.tokenizer, HFTokenizer)
    tokens = model.to_tokens(">>> a = 1\n>>> b = 2\n")
    assert tokens[0, 0] == model.tokenizer.bos_id
    assert "".join(model.to_str_tokens(">>> a = 1\n")[1:]) == ">>> a = 1\n"
    out = model.generate(">>> a = 1\n", max_new_tokens=4)
    assert out.startswith(">>> a = 1\n") and len(out) > len(">>> a = 1\n")
    batch = model.checkpoint.batch(4)  # a model without a task: S3 text traces by default
    assert int(batch["reveal_mask"].sum()) > 0


def test_revisions_pin_what_is_read(offline):
    assert _same_weights(dl.load("org/tiny", revision=OLD), offline["models"][OLD])
    assert _same_weights(dl.load(f"org/tiny@{OLD}"), offline["models"][OLD])
    with pytest.raises(DeltalensError, match="pins revision"):
        dl.load(f"org/tiny@{OLD}", revision=NEW)
    with pytest.raises(DeltalensError, match="HF_HUB_OFFLINE"):
        dl.load("org/tiny", revision="v9")


def test_what_cannot_be_opened_is_said_in_one_sentence(offline, monkeypatch):
    with pytest.raises(DeltalensError, match=r"org/absent is not in the Hugging Face cache .* HF_HUB_OFFLINE"):
        dl.load("org/absent")
    with pytest.raises(DeltalensError, match=r"'llama' model; deltalens opens .*'delta_net'"):
        dl.load("org/llama")
    with pytest.raises(DeltalensError, match=r"attnres_block_size"):
        dl.load("org/hybrid")
    monkeypatch.setenv("DELTALENS_MAX_MODEL_GB", "0.00001")
    with pytest.raises(DeltalensError, match=r"more than the .*DELTALENS_MAX_MODEL_GB"):
        dl.load("org/tiny")
    with pytest.raises(DeltalensError, match="revision"):
        dl.load("s3-deltanet-neg-statement", revision=OLD)


def test_the_cli_takes_hub_ids(offline, capsys):
    assert main(["eval", "org/tiny", "--n-traces", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["path"].endswith(NEW) and report["n_reveals"] == sum(row["count"] for row in report["rows"])
    assert report["chance"] == pytest.approx(1 / 3)
    assert main(["probe", f"org/tiny@{OLD}", "--n-traces", "4", "--no-probes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["intervene", "org/tiny", "--layer", "0", "--head", "1", "--beta-range", "0", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["eval", "org/absent"]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err


def test_a_folder_from_elsewhere_keeps_its_tokenizer(offline, tmp_path):
    folder = tmp_path / "mine"
    shutil.copytree(offline["home"] / "hub" / "models--org--tiny" / "snapshots" / NEW, folder)
    model = dl.load(str(folder))
    assert isinstance(model.tokenizer, HFTokenizer) and _same_weights(model, offline["models"][NEW])


def test_the_published_1p3b_deltanet_config_has_fla_hubs_tensors_and_parameters():
    """fla-hub/delta_net-1.3B-100B (revision b4dcbbaf...) holds 339 tensors and 1,365,677,056 parameters;
    the same config built here on the meta device (nothing allocated) has exactly those, and the memory
    check before a Hub download counts the same bytes."""
    from deltalens import models
    from deltalens.models.build import weight_bytes

    config = dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=24, num_heads=16, expand_k=1, expand_v=1)
    with torch.device("meta"):
        model = models.build("deltanet", **config)
    state = model.state_dict()
    assert len(state) == 339
    assert sum(t.numel() for t in state.values()) == 1_365_677_056
    extra = weight_bytes("deltanet", **config) - 4 * 1_365_677_056
    assert 0 <= extra <= 24 * 128  # and a few small buffers (per-layer beta-range bounds), counted as well


def test_a_hub_id_load_reads_config_json_once_and_checks_memory_once(offline, monkeypatch):
    """The folder is read and checked once (models/io/model_folder.py) and that reading passed down:
    before it, dl.load("org/tiny") opened config.json 5 times, checked the memory bound 5 times and built
    the model 4 times on the meta device for an exact count."""
    import builtins
    import io

    from deltalens.models.io import footprint

    opened, budgets, metas = [], [], []
    real_open, real_budget = io.open, footprint.memory_budget
    meta_bytes = sys.modules["deltalens.models.build"]._meta_bytes

    def counting_open(file, *args, **kwargs):
        if os.path.basename(str(file)) == "config.json":
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(footprint, "memory_budget", lambda: budgets.append(1) or real_budget())
    monkeypatch.setattr(
        sys.modules["deltalens.models.build"], "_meta_bytes", lambda *a: metas.append(1) or meta_bytes(*a)
    )
    # the tokenizer's own check of a folder's config.json (no auto_map code) is a read apart, counted apart
    from deltalens.tasks.tokenizers import hf

    tokenizer_checks, refuse = [], hf.refuse_folder_code
    monkeypatch.setattr(hf, "refuse_folder_code", lambda file: tokenizer_checks.append(file.name) or refuse(file))
    model = dl.load("org/tiny")
    assert _same_weights(model, offline["models"][NEW])
    model_reads = len(opened) - tokenizer_checks.count("config.json")
    assert (model_reads, len(budgets), len(metas)) == (1, 1, 0), opened


def test_a_cached_snapshot_without_its_config_is_called_a_partial_download(offline):
    config = offline["home"] / "hub" / "models--org--tiny" / "snapshots" / NEW / "config.json"  # refs/main
    kept = config.read_bytes()
    config.unlink()
    try:
        with pytest.raises(DeltalensError, match=r"org/tiny is in the Hugging Face cache, but its snapshot .* lacks"):
            dl.load("org/tiny")
        assert _same_weights(dl.load("org/tiny", revision=OLD), offline["models"][OLD])  # that revision is whole
        with pytest.raises(DeltalensError, match="is not in the Hugging Face cache"):
            dl.load("org/tiny", revision="v9")  # a revision the cache does not hold: not a partial download
    finally:
        config.write_bytes(kept)  # the cache is the module's
