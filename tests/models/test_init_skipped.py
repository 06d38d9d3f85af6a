"""Loading a checkpoint builds its model without random initial weights (models/init_skipped.py):
every weight comes from the file, the global RNG stream is left alone, other threads are not affected."""

import threading
from pathlib import Path

import pytest
import torch

from deltalens import models
from deltalens.models.init_skipped import RANDOM_INITS, random_init_skipped

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def test_inside_the_block_random_inits_draw_nothing_and_outside_they_are_torchs_own():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with random_init_skipped():
        torch.nn.Linear(64, 64)
        torch.nn.LSTM(8, 8)
        with random_init_skipped():  # nested: still skipping after the inner block ends
            pass
        torch.nn.Embedding(10, 4)
        assert torch.equal(torch.get_rng_state(), state)
        bias = torch.nn.init.zeros_(torch.full((3,), 7.0))  # deterministic initialisers still run
        assert torch.equal(bias, torch.zeros(3))
    torch.manual_seed(0)
    outside = torch.nn.init.normal_(torch.empty(5))
    torch.manual_seed(0)
    assert torch.equal(outside, torch.nn.init.normal_.__wrapped__(torch.empty(5)))  # the very same draw
    for name in RANDOM_INITS:  # wrapped once, however often the block is used
        wrapper = getattr(torch.nn.init, name)
        assert wrapper.__name__ == name and not getattr(wrapper.__wrapped__, "skippable", False)


def test_another_thread_initialises_as_usual_meanwhile():
    inside, done = threading.Event(), threading.Event()
    drawn = {}

    def other():
        inside.wait(timeout=30)
        drawn["weight"] = torch.nn.init.normal_(torch.zeros(1000))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with random_init_skipped():
        inside.set()
        assert done.wait(timeout=30)
        assert torch.equal(torch.nn.init.normal_(torch.zeros(5)), torch.zeros(5))  # this thread: skipped
    thread.join()
    assert drawn["weight"].std() > 0.5  # the other thread's draw was a real N(0, 1)


def gated_folder(tmp_path_factory) -> Path:
    """A tiny Gated DeltaNet saved here: its decay parameters are drawn at build time too."""
    folder = tmp_path_factory.mktemp("gated") / "gated"
    config = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_heads=2, head_dim=16)
    models.build("gated_deltanet", **config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "name", ["s3-deltanet-neg-statement", "s3-lstm-statement-prob", "s3-transformer-statement", "gated"]
)
def test_a_loaded_checkpoint_is_its_file_and_loading_leaves_the_rng_alone(name, tmp_path_factory):
    from safetensors.torch import load_file

    folder = gated_folder(tmp_path_factory) if name == "gated" else CHECKPOINTS / name
    torch.manual_seed(1234)
    model = models.load(folder)
    after_load = torch.rand(4)
    torch.manual_seed(1234)
    assert torch.equal(after_load, torch.rand(4))  # building drew no random numbers
    saved = load_file(str(folder / "model.safetensors"))
    state = model.state_dict()
    assert saved and all(torch.equal(state[key].to(tensor.dtype), tensor) for key, tensor in saved.items())
