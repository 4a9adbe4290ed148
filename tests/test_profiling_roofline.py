import json
import math

import pytest

from tileinfer.byte_model import kv_bytes_per_position
from tileinfer.config import DFlashConfig, Qwen3Config
from tileinfer.errors import ConfigError
from tileinfer.shapes import QWEN3_4B, QWEN3_4B_DFLASH
from tileinfer_profiling import ceilings as ceilings_mod
from tileinfer_profiling.ceilings import H200, cache_path, measure
from tileinfer_profiling.roofline import (achieved, add_achieved, attention_bytes, attention_flops, dflash_step_bytes,
                                          floor_ms, floor_table, linear_bytes, linear_flops, step_bytes)

QWEN3_4B_HF = dict(QWEN3_4B.hf_fields(), model_type="qwen3", max_position_embeddings=40960)
QWEN3_4B_DFLASH_HF = dict(QWEN3_4B_HF, num_hidden_layers=5, block_size=16, target_layer_ids=[1, 9, 17, 25, 33],
                          mask_token_id=151669, num_target_layers=36)


def test_linear_bytes_and_flops_qwen3_4b_shapes():
    shapes = {name: (n, k) for name, n, k in QWEN3_4B.linears()}
    assert shapes == {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560), "down": (2560, 9728)}
    # gate_up at M = 1: 19456·2560·2 B of weight + 2560·2 in + 19456·2 out
    assert linear_bytes(19456, 2560, 1, "bf16") == 99_614_720 + 5_120 + 38_912
    # INT8: one byte per weight + one fp32 scale per output row
    assert linear_bytes(19456, 2560, 16, "int8") == 49_807_360 + 19456 * 4 + 16 * 2560 * 2 + 16 * 19456 * 2
    assert linear_flops(6144, 2560, 16) == 2 * 16 * 6144 * 2560
    with pytest.raises(ConfigError):
        linear_bytes(8, 8, 1, "fp8")


def test_attention_bytes_and_flops():
    # 8k positions, 8 KV heads, d 128, bf16: K+V = 8192·8·128·2·2 = 33.55 MB
    kv = 8192 * 8 * 128 * 2 * 2
    assert kv == 33_554_432
    q_out = 2 * 16 * 32 * 128 * 2
    assert attention_bytes(8192, 16, 8, 128, 2, num_q_heads=32) == kv + q_out
    partials = 2 * 8 * 16 * 32 * 129 * 4
    assert attention_bytes(8192, 16, 8, 128, 2, num_q_heads=32, num_splits=8) == kv + q_out + partials
    assert attention_flops(8192, 1, 32, 128) == 4 * 32 * 128 * 8192
    # causal block of 16 at the end: query i sees 8192 - 16 + i + 1 keys
    assert attention_flops(8192, 16, 32, 128, causal=True) == 4 * 32 * 128 * sum(8176 + i + 1 for i in range(16))


def test_step_bytes_match_facts():
    parts = step_bytes(QWEN3_4B, 0, breakdown=True)
    assert parts["layers"] / 1e9 == pytest.approx(7.26, abs=0.01)
    assert parts["lm_head"] / 1e9 == pytest.approx(0.78, abs=0.005)
    assert parts["total"] / 1e9 == pytest.approx(8.04, abs=0.01)
    assert kv_bytes_per_position(QWEN3_4B) == 147_456
    assert kv_bytes_per_position(QWEN3_4B_DFLASH.layers) == 20_480
    assert step_bytes(QWEN3_4B, 1024) - step_bytes(QWEN3_4B, 0) == 1024 * 147_456
    assert step_bytes(QWEN3_4B, 0, weights="int8") / 1e9 == pytest.approx(4.02, abs=0.02)
    # plain BF16 step floor at 4.19 TB/s: 1.92 ms
    assert step_bytes(QWEN3_4B, 0) / 4.19e12 * 1e3 == pytest.approx(1.92, abs=0.005)


def test_dflash_step_bytes_match_facts():
    parts = dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 1024, breakdown=True)
    assert parts["drafter_layers"] / 1e9 == pytest.approx(1.07, abs=0.01)
    assert parts["drafter_lm_head"] == parts["target_lm_head"]
    assert dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 1024) / 4.19e12 * 1e3 == pytest.approx(2.40, abs=0.01)
    assert dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 8192) / 4.19e12 * 1e3 == pytest.approx(2.69, abs=0.01)
    # Hugging Face fields, the drafter's taps at the top level or under dflash_config
    assert dflash_step_bytes(QWEN3_4B_HF, QWEN3_4B_DFLASH_HF, 1024) == dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 1024)
    nested = {k: v for k, v in QWEN3_4B_DFLASH_HF.items() if k != "target_layer_ids"}
    nested["dflash_config"] = {"target_layer_ids": [1, 9, 17, 25, 33]}
    assert dflash_step_bytes(QWEN3_4B, nested, 1024) == dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 1024)
    with pytest.raises(ConfigError, match="target_layer_ids"):
        dflash_step_bytes(QWEN3_4B, {k: v for k, v in nested.items() if k != "dflash_config"}, 1024)


def test_dflash_step_bytes_from_engine_configs():
    target = Qwen3Config.from_dict(QWEN3_4B_HF)
    drafter = DFlashConfig.from_dict(QWEN3_4B_DFLASH_HF)
    assert dflash_step_bytes(target, drafter, 8192) == dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, 8192)


def test_floor_table_at_the_h200_ceiling():
    table = floor_table(ceilings=H200).set_index(["weights", "kv_len", "step"])
    assert table.loc[("bf16", 1024, "DFlash step"), "floor_ms"] == pytest.approx(2.40, abs=0.01)
    assert table.loc[("int8", 1024, "plain decode"), "GB_per_step"] < table.loc[("bf16", 1024, "plain decode"), "GB_per_step"]


def test_achieved_and_floor():
    out = achieved(4.19e9, 1.0, flops=0, ceilings=H200)
    assert out["gbs"] == pytest.approx(4190) and out["frac_read_bw"] == pytest.approx(1.0)
    assert floor_ms(8.04e9, 0, H200) == pytest.approx(1.919, abs=1e-3)
    # compute-bound: 2·8192³ flops at 679 TFLOP/s
    assert floor_ms(3 * 8192**2 * 2, 2 * 8192**3, H200) == pytest.approx(2 * 8192**3 / 679e12 * 1e3)
    assert math.isnan(floor_ms(1e9, 0, None))
    import pandas as pd
    df = add_achieved(pd.DataFrame({"bytes": [4.19e6], "flops": [0], "time_us": [1.0]}), H200.as_dict())
    assert df["frac_read_bw"].iloc[0] == pytest.approx(1.0) and df["floor_us"].iloc[0] == pytest.approx(1.0)


def test_ceilings_on_cpu_are_labelled():
    c = measure("cpu")
    assert c.gpu == "cpu" and c.device == "cpu" and "cpu" in c.method
    assert c.read_gbs > 0 and c.copy_gbs > 0 and c.bf16_tflops > 0


def test_ceilings_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setattr(ceilings_mod, "gpu_name", lambda device: "NVIDIA H200")
    path = cache_path("NVIDIA H200", tmp_path)
    assert path.name == "ceilings-nvidia-h200.json"
    path.write_text(json.dumps(H200.as_dict()))
    assert ceilings_mod.load("cpu", tmp_path) == H200
    assert isinstance(ceilings_mod.load("cpu", tmp_path / "empty"), type(None))


def test_gpu_device_without_gpu_is_a_clear_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        measure("cuda")
