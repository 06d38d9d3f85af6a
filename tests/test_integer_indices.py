"""Indices picked off a report (numpy integers, 0-d tensors) work wherever a layer, head or factor is asked for,
with the results a Python int gives; a float or a bool is still refused in words."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import deltalens as dl
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import as_index

INDEX_PARAMETERS = {"layer", "head", "layers", "factor", "on_head"}


def _public_callables():
    for name in sorted(dir(dl)):
        value = getattr(dl, name)
        if callable(value) and not inspect.isclass(value):
            try:
                parameters = inspect.signature(value).parameters
            except (TypeError, ValueError):
                continue
            if INDEX_PARAMETERS & set(parameters):
                yield name, value


def test_every_public_tool_that_takes_an_index_converts_it():  # a new tool joins by its parameter names
    found = dict(_public_callables())
    assert len(found) >= 20
    assert [name for name, fn in found.items() if not hasattr(fn, "__wrapped__")] == []


def test_as_index_converts_integer_scalars_only():
    assert as_index(np.int64(3)) == 3 and type(as_index(np.int64(3))) is int
    assert as_index(torch.tensor(2)) == 2 and as_index((np.int32(1), torch.tensor(0))) == (1, 0)
    assert as_index([np.int16(4)]) == [4]
    for kept in (True, 1.5, torch.tensor(1.0), torch.tensor([1, 2]), "0", None):
        assert as_index(kept) is kept


def test_numpy_and_tensor_indices_give_the_int_results(shipped_s3, shipped_s3_batch):
    model, batch = shipped_s3, shipped_s3_batch
    layer, head = np.unravel_index(np.argmax(np.eye(2, 4)[:, ::-1]), (2, 4))  # (np.int64(0), np.int64(3))
    assert (layer, head) == (0, 3) and not isinstance(layer, int)
    assert dl.accuracy_under(model, batch, dl.rescale_beta(model, layer, torch.tensor(head))) == dl.accuracy_under(
        model, batch, dl.rescale_beta(model, 0, 3)
    )
    assert dl.act_name("state", np.int64(1)) == "blocks.1.attn.hook_state"
    cap = dl.capture(model, batch, names=("beta",), layers=[np.int64(1)])
    assert cap.names == ["blocks.1.attn.hook_beta"]
    _, cache = model.run_with_cache(batch["tokens"][:2], names_filter="blocks.0.attn.hook_state")
    dl.patch_state(layer, head, cache)  # builds; its effect is the int one's (tests/interp/test_interventions.py)
    for bad in (0.0, True):
        with pytest.raises(DeltalensError, match="out of range"):
            dl.rescale_beta(model, bad, 3)
