"""INT8 quantization of a model, TileInfer's quantized checkpoints, and the compressed-tensors W8A16 export."""

import json
from dataclasses import dataclass, field

import pytest
import torch
from safetensors.torch import load_file, save_file

from tileinfer import quant
from tileinfer.errors import CheckpointError
from tileinfer.ops.linear import Linear
from tileinfer.quant import (
    export_compressed_tensors,
    load_quantized_tensors,
    pack_int8_to_int32,
    quantize_int8,
    save_quantized,
    unpack_int32_to_int8,
)

H, I, HQ, HK, D, V = 16, 24, 2, 1, 8, 40  # hidden, intermediate, q heads, kv heads, head_dim, vocab


@dataclass
class TinyConfig:
    hidden_size: int = H
    intermediate_size: int = I
    num_hidden_layers: int = 1
    num_attention_heads: int = HQ
    num_key_value_heads: int = HK
    head_dim: int = D
    vocab_size: int = V
    tie_word_embeddings: bool = True
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    max_position_embeddings: int = 128
    torch_dtype: str = "bfloat16"
    raw: dict = field(default_factory=dict)


class TinyQwen3:
    """Exactly the surface quant.py uses: config (+ raw), named_linears(), named_tensors()."""

    def __init__(self, tied=True, seed=0):
        g = torch.Generator().manual_seed(seed)
        rnd = lambda *s: (torch.randn(*s, generator=g) * 0.05).to(torch.bfloat16)  # noqa: E731
        self.config = TinyConfig(tie_word_embeddings=tied)
        self.config.raw = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": H,
                           "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
        p = "model.layers.0"
        self.linears = {
            f"{p}.self_attn.qkv_proj": Linear(weight=rnd(HQ * D + 2 * HK * D, H), parts=(
                (f"{p}.self_attn.q_proj", HQ * D), (f"{p}.self_attn.k_proj", HK * D), (f"{p}.self_attn.v_proj", HK * D))),
            f"{p}.self_attn.o_proj": Linear(weight=rnd(H, HQ * D), parts=((f"{p}.self_attn.o_proj", H),)),
            f"{p}.mlp.gate_up_proj": Linear(weight=rnd(2 * I, H), parts=((f"{p}.mlp.gate_proj", I), (f"{p}.mlp.up_proj", I))),
            f"{p}.mlp.down_proj": Linear(weight=rnd(H, I), parts=((f"{p}.mlp.down_proj", H),)),
            "lm_head": Linear(weight=rnd(V, H), parts=(("lm_head", V),)),
        }
        self.tensors = {
            f"{p}.input_layernorm.weight": rnd(H), f"{p}.post_attention_layernorm.weight": rnd(H),
            f"{p}.self_attn.q_norm.weight": rnd(D), f"{p}.self_attn.k_norm.weight": rnd(D),
            "model.norm.weight": rnd(H),
            "model.embed_tokens.weight": self.linears["lm_head"].weight if tied else rnd(V, H),
        }

    def named_linears(self):
        return iter(self.linears.items())

    def named_tensors(self):
        return iter(self.tensors.items())


def test_quantize_int8_in_place():
    model = TinyQwen3()
    before = {n: lin for n, lin in model.named_linears()}
    w = before["lm_head"].weight.float()
    assert quantize_int8(model) is model
    for name, lin in model.named_linears():
        assert lin is before[name] and lin.is_quantized and lin.weight is None
        assert lin.qweight.dtype == torch.int8 and lin.scale.dtype == torch.float32
    head = model.linears["lm_head"]
    assert bool(((w - head.dequantized(torch.float32)).abs() <= head.scale[:, None] / 2 + 1e-8).all())


@pytest.mark.parametrize("tied", [True, False])
def test_save_load_identical(tmp_path, tied):
    model = quantize_int8(TinyQwen3(tied=tied))
    model.linears["model.layers.0.mlp.down_proj"] = Linear(weight=torch.randn(H, I).to(torch.bfloat16),
                                                           parts=(("model.layers.0.mlp.down_proj", H),))
    out = save_quantized(model, tmp_path / "q")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "tileinfer-int8"
    assert cfg["model_type"] == "qwen3"
    loaded = load_quantized_tensors(out)
    for name, lin in model.named_linears():
        got = loaded[name]
        assert got.parts == lin.parts and got.is_quantized == lin.is_quantized
        if lin.is_quantized:
            assert torch.equal(got.qweight, lin.qweight) and torch.equal(got.scale, lin.scale)
        else:
            assert torch.equal(got.weight, lin.weight)
    for name, t in model.named_tensors():
        if tied and name == "model.embed_tokens.weight":
            assert loaded[name] is loaded["lm_head"]  # no second BF16 table
        else:
            assert torch.equal(loaded[name], t)
    assert not list(tmp_path.glob(".q.*"))  # no temp dirs left behind
    save_quantized(model, out)  # overwrite in place
    assert torch.equal(load_quantized_tensors(out)["lm_head"].qweight, model.linears["lm_head"].qweight)


def test_load_errors(tmp_path):
    out = save_quantized(quantize_int8(TinyQwen3()), tmp_path / "q")
    tensors = load_file(str(out / "model.safetensors"))
    scale = tensors.pop("model.layers.0.self_attn.o_proj.scale")
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(CheckpointError, match="no 'model.layers.0.self_attn.o_proj.scale'"):
        load_quantized_tensors(out)
    tensors["model.layers.0.self_attn.o_proj.scale"] = scale
    tensors["model.layers.0.self_attn.o_proj.qweight"] = tensors["model.layers.0.self_attn.o_proj.qweight"].float()
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(CheckpointError, match="expected torch.int8"):
        load_quantized_tensors(out)
    cfg = json.loads((out / "config.json").read_text())
    del cfg["quantization_config"]
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="quantization_config"):
        load_quantized_tensors(out)
    with pytest.raises(CheckpointError, match="config.json"):
        load_quantized_tensors(tmp_path / "missing")


def test_save_failure_leaves_nothing(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(quant, "save_file", disk_full)  # the weights' write fails half-way through the save
    with pytest.raises(OSError, match="No space left on device"):
        save_quantized(quantize_int8(TinyQwen3()), tmp_path / "q")
    assert list(tmp_path.iterdir()) == []


def test_pack_matches_compressed_tensors_convention():
    # compressed-tensors' docstring example: int8 [1, 2] -> unsigned [129, 130] -> 0x00008281 = 33409.
    assert pack_int8_to_int32(torch.tensor([[1, 2]], dtype=torch.int8)).tolist() == [[33409]]
    q = torch.randint(-128, 128, (5, 13), dtype=torch.int8)
    packed = pack_int8_to_int32(q)
    assert packed.dtype == torch.int32 and packed.shape == (5, 4)
    assert torch.equal(unpack_int32_to_int8(packed, 13), q)


@pytest.mark.parametrize("tied", [True, False])
def test_export_compressed_tensors_layout(tmp_path, tied):
    model = quantize_int8(TinyQwen3(tied=tied))
    out = export_compressed_tensors(model, tmp_path / "ct")
    got = load_file(str(out / "model.safetensors"))
    p = "model.layers.0"
    expected = {}  # hand-written: HF projection names, [N, K] per projection
    for name, n, k in [(f"{p}.self_attn.q_proj", HQ * D, H), (f"{p}.self_attn.k_proj", HK * D, H),
                       (f"{p}.self_attn.v_proj", HK * D, H), (f"{p}.self_attn.o_proj", H, HQ * D),
                       (f"{p}.mlp.gate_proj", I, H), (f"{p}.mlp.up_proj", I, H), (f"{p}.mlp.down_proj", H, I)]:
        expected[f"{name}.weight_packed"] = (torch.int32, (n, k // 4))
        expected[f"{name}.weight_scale"] = (torch.bfloat16, (n, 1))
        expected[f"{name}.weight_shape"] = (torch.int64, (2,))
    for name in (f"{p}.input_layernorm.weight", f"{p}.post_attention_layernorm.weight",
                 f"{p}.self_attn.q_norm.weight", f"{p}.self_attn.k_norm.weight", "model.norm.weight"):
        expected[name] = (torch.bfloat16, (H,) if "q_norm" not in name and "k_norm" not in name else (D,))
    expected["model.embed_tokens.weight"] = (torch.bfloat16, (V, H))
    if not tied:
        expected["lm_head.weight"] = (torch.bfloat16, (V, H))
    assert {k: (v.dtype, tuple(v.shape)) for k, v in got.items()} == expected

    # Values: the k_proj rows of the fused qkv weight, packed and scaled.
    qkv = model.linears[f"{p}.self_attn.qkv_proj"]
    rows = slice(HQ * D, HQ * D + HK * D)
    k_name = f"{p}.self_attn.k_proj"
    assert torch.equal(unpack_int32_to_int8(got[f"{k_name}.weight_packed"], H), qkv.qweight[rows])
    assert torch.equal(got[f"{k_name}.weight_scale"], qkv.scale[rows].to(torch.bfloat16)[:, None])
    assert got[f"{k_name}.weight_shape"].tolist() == [HK * D, H]

    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
    assert qc["ignore"] == ["lm_head"]
    group = qc["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"] and group["input_activations"] is None
    assert {k: group["weights"][k] for k in ("num_bits", "type", "symmetric", "strategy", "dynamic")} == \
        {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
