"""Loading a checkpoint builds its model without random initial weights (models/init_skipped.py):
every weight comes from the file, the global RNG stream is left alone, other threads are not affected."""

import threading
from pathlib import Path

import pytest
import torch

from deltalens import models
from deltalens.models.init_skipped import RANDOM_INITS, random_init_skipped

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def test_inside_the_block_random_inits_draw_nothing_and_torch_is_restored_after():
    originals = {name: getattr(torch.nn.init, name) for name in RANDOM_INITS}
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
    assert {name: getattr(torch.nn.init, name) for name in RANDOM_INITS} == originals
    torch.nn.Linear(64, 64)
    assert not torch.equal(torch.get_rng_state(), state)


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


@pytest.mark.parametrize("name", ["s3-deltanet-neg-statement", "s3-lstm-statement-prob", "s3-transformer-statement"])
def test_a_loaded_checkpoint_is_its_file_and_loading_leaves_the_rng_alone(name):
    from safetensors.torch import load_file

    torch.manual_seed(1234)
    model = models.load(CHECKPOINTS / name)
    after_load = torch.rand(4)
    torch.manual_seed(1234)
    assert torch.equal(after_load, torch.rand(4))  # building drew no random numbers
    saved = load_file(str(CHECKPOINTS / name / "model.safetensors"))
    state = model.state_dict()
    assert saved and all(torch.equal(state[key].to(tensor.dtype), tensor) for key, tensor in saved.items())
