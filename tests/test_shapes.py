"""The model shapes and the byte model: one home each, agreeing with the configs the engine reads and with
the memory plan's own count."""

from pathlib import Path

import pandas as pd
import pytest
import torch

from tileinfer import byte_model
from tileinfer.config import DFlashConfig, Qwen3Config, build_target_layer_ids
from tileinfer.errors import ConfigError
from tileinfer.kv_cache import KVCache
from tileinfer.memory import MemoryModel
from tileinfer.random_weights import PRESETS, qwen3_config
from tileinfer.shapes import QWEN3, QWEN3_4B, QWEN3_4B_DFLASH, DrafterShape, ModelShape
from tileinfer_profiling.memory_peaks import plan_covers


def configs(size):
    target = Qwen3Config.from_dict(qwen3_config(f"qwen3-{size}"))
    drafter = DFlashConfig.from_dict({**qwen3_config(f"qwen3-{size}"), "num_hidden_layers": 5, "block_size": 16,
                                      "mask_token_id": 0, "num_target_layers": target.num_hidden_layers})
    return target, drafter


@pytest.mark.parametrize("size", list(QWEN3))
def test_shapes_round_trip_through_the_engine_s_configs(size):
    target, drafter = configs(size)
    assert ModelShape.of(target) == QWEN3[size] == ModelShape.of(qwen3_config(f"qwen3-{size}"))
    assert DrafterShape.of(drafter).layers == ModelShape.of(drafter.layers)
    assert QWEN3[size].hf_fields().items() <= PRESETS[f"qwen3-{size}"].items()


def test_the_4b_pair():
    assert [(n, k) for _, n, k in QWEN3_4B.linears()] == [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]
    assert list(QWEN3_4B_DFLASH.target_layer_ids) == build_target_layer_ids(36, 5)
    assert QWEN3_4B_DFLASH.fc == (2560, 5 * 2560)
    assert not QWEN3["8b"].tied and QWEN3["4b"].tied
    with pytest.raises(ConfigError, match="lacks 'vocab_size'"):
        ModelShape.of({k: v for k, v in QWEN3_4B.hf_fields().items() if k != "vocab_size"})


@pytest.mark.parametrize("size", ["0.6b", "4b", "8b"])
@pytest.mark.parametrize("weights", ["bf16", "fp32", "int8"])
def test_the_memory_plan_counts_the_same_weight_bytes(size, weights):
    target, drafter = configs(size)
    plan = MemoryModel.from_configs(target, drafter, weights=weights, cuda=False)
    shape, drafter_shape = ModelShape.of(target), DrafterShape.of(drafter)
    expected = (byte_model.model_weight_bytes(shape, weights)["total"]
                + byte_model.drafter_weight_bytes(drafter_shape, weights))
    assert plan.weights_bytes == expected


@pytest.mark.parametrize("size", list(QWEN3))
def test_one_kv_byte_count(size):
    target, _ = configs(size)
    shape = ModelShape.of(target)
    cache = KVCache(target.num_hidden_layers, target.num_key_value_heads, target.head_dim, torch.bfloat16, "cpu")
    assert byte_model.kv_bytes_per_position(shape, 2) == cache.bytes_per_position()


def test_weight_kinds():
    assert byte_model.linear_weight_bytes(8, 4, "int8") == 8 * 4 + 8 * 4  # one fp32 scale per output row
    assert byte_model.compute_bytes("int8") == 2 and byte_model.compute_bytes("fp32") == 4
    with pytest.raises(ConfigError, match="weights must be one of"):
        byte_model.linear_weight_bytes(8, 4, "fp8")


def test_a_cuda_plan_holds_the_radix_sort_of_top_k_over_qwen3s_vocabulary():
    """Top-p alone on CUDA's reference ops over rows longer than 4,096 sorts by radix: the Qwen3-4B step the
    H200 measured (bench/results/memory_plan_h200.csv, before the Triton backend sampled with
    `ops.sample`) is covered; the CPU's sort holds far less. The Triton backend's radix select holds a few
    hundred KB beside the logits: less than the same step took when it read each row's top-k candidates."""
    target, drafter = configs("4b")
    recorded = pd.read_csv(Path(__file__).parents[1] / "bench" / "results" / "memory_plan_h200.csv")
    four_b = recorded[recorded["model"] == "qwen3-4b"]
    rows = four_b[four_b["what"] == "step, block 16, T=1 top-p"]
    assert len(rows) >= 1

    def step(cuda: bool, filtered: bool, candidates: int = 0, backend: str = "triton") -> int:
        model = MemoryModel.from_configs(target, drafter, cuda=cuda, exact=False, backend=backend)
        return model.sampling(True, filtered, candidates).plan(1024, 32).step_activation_bytes

    for measured_on_the_h200 in four_b[four_b["what"] == "step, block 16, T=1 top-k/p"]["measured_bytes"]:
        assert step(True, True, 1024) < measured_on_the_h200
    for measured_on_the_h200 in rows["measured_bytes"]:
        assert plan_covers(step(True, True, backend="torch"), measured_on_the_h200)
        assert (step(True, True, backend="torch") >= measured_on_the_h200 > step(False, True, backend="torch")
                > step(True, False, backend="torch"))
        assert step(True, True) < measured_on_the_h200 / 10
