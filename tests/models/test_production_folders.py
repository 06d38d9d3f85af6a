"""A transformers folder is read through one checked door (issue 58): its config's sizes, its weight files'
headers and index, and after transformers has read it, every tensor accounted for. Each hostile folder gets
one sentence naming the fault, never a model with a tensor initialised at random."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
from pathlib import Path

import pytest
import torch
from production_standin import put_standin  # noqa: E402
from safetensors.torch import load_file, save_file

import deltalens as dl
from deltalens.core.errors import DeltalensError


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    root = tmp_path_factory.mktemp("standins")
    return {kind: Path(put_standin(kind, root / "hub")[1]) for kind in ("qwen3_5_text", "qwen3_next")}


def copy_of(standins, tmp_path, kind="qwen3_5_text") -> Path:
    folder = tmp_path / kind
    shutil.copytree(standins[kind], folder)
    return folder


def edit_config(folder: Path, **changes) -> Path:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def edit_tensors(folder: Path, change) -> Path:
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def refused(folder: Path, *words: str) -> str:
    with pytest.raises(DeltalensError) as caught:
        dl.load(str(folder))
    text = str(caught.value)
    assert "\n" not in text.strip() and all(word in text for word in words), text
    return text


def test_a_missing_tensor_is_refused_by_name_not_initialised(standins, tmp_path):
    folder = edit_tensors(copy_of(standins, tmp_path), lambda t: t.pop("model.layers.0.linear_attn.dt_bias"))
    refused(folder, "lacks tensor(s)", "model.layers.0.linear_attn.dt_bias")


def test_an_extra_tensor_and_a_wrong_shape_are_refused(standins, tmp_path):
    extra = edit_tensors(copy_of(standins, tmp_path), lambda t: t.__setitem__("model.extra.weight", torch.ones(3)))
    refused(extra, "does not have", "model.extra.weight")
    shutil.rmtree(extra)
    name = "model.layers.0.linear_attn.dt_bias"
    wrong = edit_tensors(copy_of(standins, tmp_path), lambda t: t.__setitem__(name, torch.ones(7)))
    refused(wrong, name)


def test_integer_weights_are_refused_from_the_header(standins, tmp_path):
    name = "lm_head.weight"
    folder = edit_tensors(copy_of(standins, tmp_path), lambda t: t.__setitem__(name, t[name].to(torch.int64)))
    refused(folder, name, "I64")


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"num_hidden_layers": 0}, ("num_hidden_layers=0", "at least 1")),
        ({"num_attention_heads": "four"}, ("num_attention_heads='four'",)),
        ({"layer_types": ["linear_attention"] * 3}, ("3 layer_types", "num_hidden_layers=4")),
        ({"layer_types": ["linear_attention"] * 5}, ("5 layer_types",)),
    ],
)
def test_config_sizes_are_checked_before_anything_is_built(standins, tmp_path, changes, words):
    refused(edit_config(copy_of(standins, tmp_path), **changes), *words)


def test_experts_are_checked_and_a_dense_config_beside_moe_weights_refused(standins, tmp_path):
    refused(edit_config(copy_of(standins, tmp_path, "qwen3_next"), num_experts_per_tok=9), "num_experts_per_tok=9")
    dense = edit_config(copy_of(standins, tmp_path / "b", "qwen3_next"), num_experts=0)
    refused(dense, "belong together")  # the dense MLPs' tensors are missing, the experts' have no place


def test_a_nan_weight_loads_and_is_named_at_the_first_forward(standins, tmp_path):
    name = "model.layers.1.mlp.down_proj.weight"
    folder = edit_tensors(copy_of(standins, tmp_path), lambda t: t[name].view(-1).__setitem__(0, float("nan")))
    model = dl.load(str(folder))
    with pytest.raises(DeltalensError, match=name):
        model(torch.tensor([[1, 5, 9, 13]]))


def _header_bytes(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


def test_damaged_headers_and_indexes_get_one_sentence(standins, tmp_path):
    folder = copy_of(standins, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    name = next(k for k in header if k != "__metadata__")
    past = {**header, name: {**header[name], "data_offsets": [0, len(body) + 64]}}
    weights.write_bytes(_header_bytes(past) + body)
    refused(folder, "past the")
    weights.write_bytes(struct.pack("<Q", 10**15) + data[8:])
    refused(folder, "header")
    shape = {**header, name: {**header[name], "shape": [1]}}
    weights.write_bytes(_header_bytes(shape) + body)
    refused(folder, name, "bytes")
    weights.write_bytes(pickle.dumps({"a": 1}) * 64)  # a pickle named model.safetensors: never unpickled
    refused(folder, "safetensors")


@pytest.mark.parametrize(
    "index, words",
    [
        ("not json {", ("not a JSON shard index",)),
        (json.dumps({"weight_map": ["model.safetensors"]}), ("must map",)),
        (json.dumps({"weight_map": {"lm_head.weight": "../model.safetensors"}}), ("outside its folder",)),
        (json.dumps({"weight_map": {"lm_head.weight": "pytorch_model.bin"}}), ("never reads pickled",)),
    ],
)
def test_a_hostile_shard_index_is_refused(standins, tmp_path, index, words):
    folder = copy_of(standins, tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(index)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"x": 1}))
    refused(folder, *words)


def test_a_big_config_beside_tiny_weights_is_refused_before_it_is_built(standins, tmp_path):
    big = dict(hidden_size=3840, intermediate_size=11008, num_hidden_layers=32, vocab_size=100352)
    big["layer_types"] = ["linear_attention"] * 3 * 8 + ["full_attention"] * 8
    refused(edit_config(copy_of(standins, tmp_path), **big), "do not belong together", "weights")


def test_a_tokenizer_larger_than_the_embedding_is_refused_at_open(standins, tmp_path):
    from production_standin import tiny_config

    model = dl.build("qwen3_5", **tiny_config("qwen3_5_text", vocab_size=200).to_dict())
    folder = tmp_path / "small-vocab"
    model.hf.save_pretrained(str(folder))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(standins["qwen3_5_text"] / name, folder / name)  # the 320-token tokenizer
    refused(folder, "320 tokens", "embedding has 200 rows")
    from deltalens.cli.main import main

    assert main(["eval", str(folder), "--n-traces", "2"]) == 2  # the text-model path of `deltalens eval` too
