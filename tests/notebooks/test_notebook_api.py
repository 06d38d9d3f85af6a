"""The notebook API: `import deltalens as dl`, TransformerLens habits on every architecture, short displays."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer_lens import ActivationCache

import deltalens as dl
from deltalens import models
from deltalens.core.display import progress, set_progress
from deltalens.core.errors import DeltalensError
from deltalens.models.lm.deltanet import HookedDeltaNet
from deltalens.models.lm.hook_names import ACT_NAMES, act_name, deltanet_hook_names
from deltalens.tasks.belief_decay import halving_decay

REPO = Path(__file__).resolve().parents[2]
TEXT = (
    ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b = b, a\n>>> print('a', a)\na 2\n"
    ">>> b, c = c, b\n>>> print(a, b, c)\n2 3 1\n"
)
SHIPPED = {  # one per architecture, and the hook to look at
    "deltanet": ("s3-deltanet-neg-statement", "beta", (1, 15, 4)),
    "transformer": ("s3-transformer-statement", "pattern", (1, 4, 15, 15)),
    "lstm": ("s3-lstm-statement-prob", "hidden", (1, 15, 64)),
}


@pytest.fixture(scope="module")
def loaded(shipped_s3):
    # the DeltaNet is the session's shipped_s3 (tests/conftest.py), opened once for every room's tests
    return {arch: shipped_s3 if arch == "deltanet" else dl.load(name) for arch, (name, _, _) in SHIPPED.items()}


@pytest.mark.parametrize("arch", SHIPPED)
def test_load_by_name_from_outside_the_repo(arch, tmp_path):
    name, hook, shape = SHIPPED[arch]
    code = (
        f"import deltalens as dl; m = dl.load({name!r}); l, c = m.run_with_cache(m.to_tokens({TEXT!r})); "
        "from transformer_lens import ActivationCache; "
        f"print(isinstance(c, ActivationCache), tuple(c[dl.act_name({hook!r}, 0)].shape))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"True {shape}"  # TransformerLens's cache (deltalens's subclass of it)
    assert "Warning" not in result.stderr  # no third-party warnings on the way


def test_import_deltalens_loads_no_torch():
    code = "import sys, deltalens; print(sorted(m for m in ('torch', 'fla', 'transformer_lens') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_names_paths_and_unknown_names(tmp_path, monkeypatch):
    by_path = dl.load(REPO / "checkpoints" / "s3-deltanet-neg-statement")
    assert by_path.checkpoint.spec.group == "S3" and by_path.tokenizer is not None
    with pytest.raises(DeltalensError, match="list_checkpoints"):
        dl.load("no-such-checkpoint")
    with pytest.raises(DeltalensError, match="does not exist"):
        dl.load(tmp_path / "missing")
    shutil.copytree(REPO / "checkpoints" / "s3-deltanet-neg-statement", tmp_path / "mine")
    monkeypatch.setenv("DELTALENS_CHECKPOINTS", str(tmp_path))
    assert dl.load("mine").checkpoint.path == tmp_path / "mine"
    assert "mine" in set(dl.list_checkpoints()["name"])


def test_list_checkpoints_reads_the_saved_metrics():
    frame = dl.list_checkpoints()
    shipped = {p.name for p in (REPO / "checkpoints").iterdir() if (p / "config.json").is_file()}
    assert set(frame["name"]) == shipped
    row = frame.set_index("name").loc["s3-deltanet-neg-statement"]
    assert row["architecture"] == "deltanet" and row["beta_range"] == "[0, 2]" and row["acc_1x"] > 0.99


def test_an_fla_folder_loads_without_a_tokenizer(tmp_path):
    config = models.build("deltanet", vocab_size=12, hidden_size=16, num_heads=2, num_hidden_layers=1).config
    HookedDeltaNet(config).save_pretrained(tmp_path)
    model = dl.load(tmp_path)
    assert isinstance(model, HookedDeltaNet) and model.tokenizer is None
    _, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
    assert isinstance(cache, ActivationCache)
    with pytest.raises(DeltalensError, match="has no tokenizer, .* copy the tokenizer.json"):
        model.to_tokens(TEXT)


SMALL = {
    "deltanet": dict(vocab_size=12, hidden_size=16, num_heads=2, num_hidden_layers=2),
    "transformer": dict(d_vocab=12, d_model=16, n_heads=2, n_layers=2, n_ctx=32),
    "lstm": dict(d_vocab=12, d_model=16, n_layers=2),
}


@pytest.mark.parametrize("arch", SMALL)
def test_every_act_name_is_a_hook_of_the_architecture(arch):
    model = models.build(arch, **SMALL[arch])
    for layer in range(2):
        for name in ACT_NAMES[arch]:
            assert act_name(name, layer) in model.hook_dict, (arch, name)
    if arch == "deltanet":  # every hook the design lists, and nothing else
        named = {act_name(n, layer) for n in ACT_NAMES["deltanet"] for layer in range(2)}
        assert named == set(deltanet_hook_names(2)) == set(model.hook_dict)


def test_act_name_errors_and_pass_through():
    assert act_name("hook_beta", 3) == "blocks.3.attn.hook_beta"
    assert act_name("resid_post", 1) == "blocks.1.hook_resid_post"
    assert act_name("blocks.0.attn.hook_z") == "blocks.0.attn.hook_z" and act_name("embed") == "hook_embed"
    with pytest.raises(DeltalensError, match="give the layer"):
        act_name("beta")
    with pytest.raises(DeltalensError, match="unknown activation"):
        act_name("betta", 0)


@pytest.mark.parametrize("arch", SHIPPED)
def test_strings_and_tokens_round_trip(loaded, arch):
    model = loaded[arch]
    tokens = model.to_tokens(TEXT)
    assert tokens.shape[0] == 1 and int(tokens[0, 0]) == model.tokenizer.bos_id
    assert model.to_string(tokens[0]) == TEXT and model.to_string(tokens) == [TEXT]  # rank 1 / rank 2, as in TL
    pieces = model.to_str_tokens(TEXT)
    assert pieces[0] == "<bos>" and "".join(pieces[1:]) == TEXT and pieces == model.to_str_tokens(tokens)
    two = model.to_tokens([TEXT, ">>> a = 1\n"])
    assert two.shape[0] == 2 and model.to_string(two) == [TEXT, ">>> a = 1\n"]
    with pytest.raises(DeltalensError, match="not in the vocabulary"):
        model.to_tokens(">>> import os\n")


@pytest.mark.parametrize("arch", SHIPPED)
def test_caches_are_activation_caches_with_their_helpers(loaded, arch):
    model = loaded[arch]
    logits, cache = model.run_with_cache(model.to_tokens(TEXT))
    assert isinstance(cache, ActivationCache) and logits.shape[:2] == (1, 15)
    if arch != "lstm":  # the residual stream and its stacks, as in TransformerLens
        assert cache.accumulated_resid().shape == (3, 1, 15, 64)
        assert cache.stack_activation("resid_post").shape == (2, 1, 15, 64)
    name = act_name(SHIPPED[arch][1], 0)
    shape = cache[name].shape
    assert cache.remove_batch_dim()[name].shape == shape[1:]  # in place, as in TransformerLens
    _, single = model.run_with_cache(model.to_tokens(TEXT), remove_batch_dim=True)
    assert single[name].shape == shape[1:]


def test_run_with_hooks_and_hooks_edit_the_forward(loaded):
    model = loaded["deltanet"]
    tokens = model.to_tokens(TEXT)
    clean = model(tokens)
    zero_beta = [(act_name("beta", 0), lambda beta, hook: torch.zeros_like(beta))]
    edited = model.run_with_hooks(tokens, fwd_hooks=zero_beta)
    assert not torch.allclose(clean, edited)
    with model.hooks(fwd_hooks=zero_beta):
        assert torch.allclose(model(tokens), edited)
    assert torch.allclose(model(tokens), clean)  # hooks() removed them again


def test_every_report_shows_one_screen_and_an_html_table(loaded, shipped_s3_batch):
    model = loaded["deltanet"]
    batch = shipped_s3_batch  # = model.checkpoint.batch(16)
    cap = dl.capture(model, batch, names=("beta", "k", "state", "resid"))
    eig = dl.eigenvalue_report(cap)
    prob = dl.load("s3-deltanet-neg-statement-prob")
    shown = {
        "checkpoint": model.checkpoint,
        "capture": cap,
        "eigenvalues": eig,
        "subspace": dl.subspace_report(cap),
        "probes": dl.linear_probes(cap),
        "summary": dl.probe_summary(model, batch),
        "sweep": dl.sweep(model, batch, "beta-range", progress=False),
        "eval": dl.reveal_accuracy(model, batch),
        "belief": dl.belief_kl(prob, prob.tokenizer, prob.checkpoint.spec, n_random=8, n_adversarial=2),
        "decay": halving_decay(),
    }
    for label, obj in shown.items():
        text = repr(obj)
        assert len(text) < 4000 and text.count("\n") < 40, label
        assert "<table" in obj._repr_html_(), label
    layer, head = eig.tracking_head()
    assert f"layer {layer}, head {head}" in repr(eig)
    assert "background-color" in eig._repr_html_()  # the tracking head's row is highlighted
    assert "Intervention(" in repr(dl.rescale_beta(model, layer, head))


def test_progress_bars_follow_the_switch(monkeypatch):
    assert not progress(range(3)).disable
    assert progress(range(3), enabled=False).disable
    set_progress(False)
    try:
        assert progress(range(3)).disable
    finally:
        set_progress(None)
    monkeypatch.setenv("DELTALENS_PROGRESS", "0")
    assert progress(range(3)).disable


def test_long_commands_show_progress_when_piped(tmp_path):
    env = {**os.environ, "DELTALENS_PROGRESS": "1"}
    result = subprocess.run(
        ["deltalens", "eval", "s3-deltanet-neg-statement", "--n-traces", "64", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "eval: 100%" in result.stderr  # the bar, on stderr, though nothing is a terminal
    assert result.stdout.count("\n") == 1  # stdout stays one JSON line
