"""Bad input gets a clear TileInferError and leaves nothing half-done."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import tileinfer
from tests.helpers import tiny_pair, tiny_target
from tileinfer.errors import CheckpointError, ConfigError, DrafterMismatchError, RequestError, TileInferError


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def engine(pair):
    return tileinfer.load(pair[0], draft=pair[1], weights="fp32")


def edit_tensors(src, dst, edit):
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def edit_config(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_missing_path(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        tileinfer.load(tmp_path / "nowhere")


def test_hub_id_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache") as e:
        tileinfer.load("Qwen/Qwen3-4B")
    assert "`hf download Qwen/Qwen3-4B`" in str(e.value)  # the command huggingface_hub installs today


def test_hub_id_resolves_through_the_local_cache(pair, tmp_path, monkeypatch):
    snapshot = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    shutil.copytree(pair[0], snapshot)
    (tmp_path / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert tileinfer.load("acme/tiny", weights="fp32").path == snapshot


def test_hub_id_without_a_main_ref_is_not_guessed(pair, tmp_path, monkeypatch):
    shutil.copytree(pair[0], tmp_path / "models--acme--tiny" / "snapshots" / "abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache"):
        tileinfer.load("acme/tiny")


def test_directory_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        tileinfer.load(tmp_path / "empty")


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "missing tensors"),
    (lambda t: t.__setitem__("model.layers.9.extra.weight", torch.zeros(3)), "unexpected tensors"),
    (lambda t: t.__setitem__("model.norm.weight", torch.zeros(7)), "shape"),
    (lambda t: t.__setitem__("model.norm.weight", torch.zeros(64, dtype=torch.int32)), "dtype"),
])
def test_bad_tensors(pair, tmp_path, edit, match):
    bad = edit_tensors(pair[0], tmp_path / "bad", edit)
    with pytest.raises(CheckpointError, match=match):
        tileinfer.load(bad)


def test_truncated_weights(pair, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(pair[0], bad)
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot read"):
        tileinfer.load(bad)


def test_sharded_checkpoint_loads(pair, tmp_path):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copy(pair[0] / "config.json", sharded)
    tensors = load_file(str(pair[0] / "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        file = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(sharded / file))
        weight_map |= {n: file for n in part}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ids = list(range(1, 12))
    a = tileinfer.load(pair[0], weights="fp32").generate(ids, 8, stop_ids=[]).tokens
    assert tileinfer.load(sharded, weights="fp32").generate(ids, 8, stop_ids=[]).tokens == a


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.__setitem__("model_type", "llama"), "model_type"),
    (lambda c: c.pop("hidden_size"), "hidden_size"),
    (lambda c: c.__setitem__("num_key_value_heads", 3), "multiple"),
    (lambda c: c.__setitem__("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "RoPE scaling"),
])
def test_not_a_qwen3_config(pair, tmp_path, edit, match):
    with pytest.raises(ConfigError, match=match):
        tileinfer.load(edit_config(pair[0], tmp_path / "bad", edit))


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.__setitem__("hidden_size", 32), "hidden size"),
    (lambda c: c.__setitem__("vocab_size", 99), "vocab size"),
    (lambda c: c["dflash_config"].__setitem__("target_layer_ids", [1, 7]), "outside the target"),
    (lambda c: c["dflash_config"].__setitem__("mask_token_id", 500), "mask_token_id"),
    (lambda c: c.__setitem__("num_target_layers", 36), "num_target_layers"),
])
def test_drafter_that_does_not_fit(pair, tmp_path, edit, match):
    bad = edit_config(pair[1], tmp_path / "bad", edit)
    with pytest.raises(DrafterMismatchError, match=match):
        tileinfer.load(pair[0], draft=bad)


def test_drafter_config_fields_at_the_top_level(pair, tmp_path):
    def flatten(c):
        c.update(c.pop("dflash_config"))
        c.pop("target_layer_ids")  # derived from the layer counts by the DFlash rule
    flat = edit_config(pair[1], tmp_path / "flat", flatten)
    engine = tileinfer.load(pair[0], draft=flat, weights="fp32")
    assert engine.drafter.config.target_layer_ids == [1, 1]  # 4 target layers, 2 drafter layers
    assert engine.drafter.config.mask_token_id == 159


def test_drafter_missing_tensor(pair, tmp_path):
    bad = edit_tensors(pair[1], tmp_path / "bad", lambda t: t.pop("fc.weight"))
    with pytest.raises(CheckpointError, match="fc.weight"):
        tileinfer.load(pair[0], draft=bad)


@pytest.mark.parametrize("call, error, match", [
    (lambda e: e.generate([], 4), RequestError, "empty"),
    (lambda e: e.generate([1, 2, 160], 4), RequestError, "outside the vocabulary"),
    (lambda e: e.generate([1, 2], 0), RequestError, "max_new_tokens"),
    (lambda e: e.generate([1, 2], 511), RequestError, "context"),
    (lambda e: e.generate([1, 2], 4, block_size=17), RequestError, "block_size"),
    (lambda e: e.generate([1, 2], 4, block_size=0), RequestError, "block_size"),
    (lambda e: e.generate([1, 2], 4, num_splits=0), ConfigError, "num_splits"),
    (lambda e: e.generate("text", 4), RequestError, "tokenizer"),
])
def test_bad_requests(engine, call, error, match):
    capacity = engine.cache.capacity
    with pytest.raises(error, match=match):
        call(engine)
    assert engine.cache.capacity == capacity  # nothing was allocated


def test_bad_settings(pair):
    with pytest.raises(ConfigError, match="weights"):
        tileinfer.load(pair[0], weights="int4")
    with pytest.raises(ConfigError, match="backend"):
        tileinfer.load(pair[0], backend="cuda")
    with pytest.raises(RequestError, match="block_size"):
        tileinfer.load(pair[0]).generate([1, 2], 4, block_size=2)  # no drafter


def test_errors_share_a_base():
    for error in (CheckpointError, ConfigError, DrafterMismatchError, RequestError):
        assert issubclass(error, TileInferError)
