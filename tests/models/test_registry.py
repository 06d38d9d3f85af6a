"""One record per architecture: a family registered in one place (here, in the test) is built, saved,
loaded, opened with its task and captured by the same code as the built-in ones, with no table to edit."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

import deltalens as dl
from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.interp.capture import capture
from deltalens.models.architecture import architecture_of, article_of, is_delta_rule
from deltalens.models.io.config_from_dict import config_from_dict
from deltalens.models.io.footprint import weights_lower_bound
from deltalens.models.io.model_folder import read_model_folder
from deltalens.models.lm import hook_names
from deltalens.models.registry import Family, architectures, families, family, register, unregister

SHIPPED = "s3-deltanet-neg-statement"


@dataclass
class ToyConfig:
    d_vocab: int = 16
    d_model: int = 8
    n_layers: int = 2


class ToyBlock(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.mix = nn.Linear(d_model, d_model)
        self.hook_resid_post = HookPoint()  # (batch, pos, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_resid_post(x + torch.tanh(self.mix(x)).cumsum(1) / x.shape[1])


class HookedToy(HookedRootModule):
    """A residual stack that mixes positions by a running sum: small, causal, hooked."""

    arch = "toy"

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.d_vocab, config.d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([ToyBlock(config.d_model) for _ in range(config.n_layers)])
        self.unembed = nn.Linear(config.d_model, config.d_vocab, bias=False)
        self.setup()

    @property
    def model_config(self) -> dict:
        return asdict(self.config)

    @property
    def cfg(self) -> SimpleNamespace:
        return SimpleNamespace(n_layers=self.config.n_layers, n_heads=0, d_vocab=self.config.d_vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.hook_embed(self.embed(tokens))
        for block in self.blocks:
            x = block(x)
        return self.unembed(x)


TOY = Family(
    arch="toy",
    display="Toy",
    article="a Toy",
    model=HookedToy,
    class_name="HookedToy",
    config=lambda config: config_from_dict(ToyConfig, config, "toy"),
    act_names=("embed", "resid_post"),
    layers_field="n_layers",
    hooks="(none per head)",
    interventions="none",
    vocab_field="d_vocab",
    weights=lambda config: 2 * config.get("d_vocab", 16) * config.get("d_model", 8),
)


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister("toy")


@pytest.fixture(scope="module")
def task():
    """A shipped checkpoint's task (tokenizer, held-out traces), borrowed by the toy model."""
    return dl.open_checkpoint(SHIPPED, load_model=False)


def test_the_built_in_families_are_registered_once_each():
    builtin = ("deltanet", "gated_deltanet", "deltaproduct", "transformer", "lstm")
    assert architectures()[:5] == builtin and len(set(architectures())) == len(architectures())
    assert [f.arch for f in families() if f.delta_rule][:3] == ["deltanet", "gated_deltanet", "deltaproduct"]
    assert family("deltaproduct").model_types == ("gated_deltaproduct",)
    with pytest.raises(DeltalensError, match="unknown architecture 'nope'; choose one of deltanet, gated_deltanet"):
        family("nope")
    with pytest.raises(DeltalensError, match="registered already"):
        register(family("lstm"))
    with pytest.raises(DeltalensError, match="model_type 'delta_net' belongs to 'deltanet'"):
        register(Family("x", "X", "an X", HookedToy, "X", (), "n", model_types=("delta_net",)))


def test_a_family_registered_in_one_place_is_built_saved_loaded_and_captured(task, tmp_path):
    assert "toy" not in dl.FAMILY and "toy" not in hook_names.ACT_NAMES  # asked before it is registered
    register(TOY)
    try:
        _toy_round_trip(TOY, task, tmp_path)
    finally:
        unregister("toy")


def _toy_round_trip(toy, task, tmp_path):
    vocab = task.tokenizer.vocab_size
    assert "toy" in models.ARCHITECTURES and dl.FAMILY["toy"] is toy  # read from the registry when asked
    assert hook_names.ACT_NAMES["toy"] == ("embed", "resid_post") and hook_names.act_name("resid_post", 1)
    assert article_of("toy") == "a Toy" and not is_delta_rule("toy")
    model = models.build("toy", vocab_size=vocab, d_model=8)  # fla's vocab_size name is taken, as everywhere
    assert isinstance(model, HookedToy) and model.config.d_vocab == vocab
    with pytest.raises(DeltalensError, match="unknown toy config key"):
        models.build("toy", widht=3)

    folder = models.save(
        model, tmp_path / "toy", extra={"tokenizer": task.meta["tokenizer"], "task": task.meta["task"]}
    )
    read = read_model_folder(folder)
    assert read.arch == "toy" and read.build_config == model.model_config
    assert weights_lower_bound("toy", read.build_config) == 4 * 2 * vocab * 8

    opened = dl.load(folder)  # the model with its task and tokenizer, as for a built-in family
    tokens = task.batch(2)["tokens"]
    assert architecture_of(opened) == "toy" and torch.equal(opened(tokens), model.eval()(tokens))
    acts = capture(opened, opened.checkpoint.batch(4), names=("resid",))
    assert set(acts.acts) == {"hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"}
    with pytest.raises(DeltalensError, match="this model is a Toy, which has no beta"):
        capture(opened, opened.checkpoint.batch(4), names=("beta",))


def test_an_unregistered_family_is_named_in_one_sentence(toy, task, tmp_path):
    folder = models.save(models.build("toy"), tmp_path / "toy")
    unregister("toy")
    with pytest.raises(DeltalensError, match="names architecture 'toy', which deltalens does not know"):
        models.load(folder)
