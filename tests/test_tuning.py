"""Per-GPU tuning data: one file per GPU, one section per kernel, defaults in code for anything missing."""

import dataclasses
import json

import pytest

from tileinfer.ops import tuning
from tileinfer.ops.attention import MAX_NUM_SPLITS, default_num_splits
from tileinfer.ops.gemm_configs import _lookup, heuristic_config
from tileinfer.ops.w8a16_gemm import DEFAULTS
from tileinfer.shapes import QWEN3_4B


def test_the_h200_file_holds_every_kernel_section():
    h200 = tuning.gpu_configs("NVIDIA H200")
    assert h200["gpu"] == "NVIDIA H200" and tuning.config_path("NVIDIA H200").name == "nvidia_h200.json"
    assert {"skinny_gemm", "w8a16_gemm", "decode_attention", "prefill_attention", "norm_rope"} <= set(h200)
    assert h200["decode_attention"]["max_num_splits"] == MAX_NUM_SPLITS
    assert {tuple(sorted(v)) for v in h200["w8a16_gemm"].values()} == {("BLOCK_K", "BLOCK_M", "BLOCK_N",
                                                                         "num_stages", "num_warps")}
    # the Qwen3-4B linears are tuned at all three M buckets for both weight kinds; other sizes' entries
    # hold the buckets tuned so far (the rest fall back to the heuristic); LM heads also with their argmax
    kinds = {"bf16", "int8", "bf16_argmax", "int8_argmax"}
    for shape, entry in h200["skinny_gemm"].items():
        assert set(entry) <= {"m1", "m4", "m16"} and all(set(e) <= kinds for e in entry.values()), shape
        assert all(not set(e) - {"bf16", "int8"} or shape.startswith("151936x") for e in entry.values()), shape
    for _, n, k in QWEN3_4B.linears():
        entry = h200["skinny_gemm"][f"{n}x{k}"]
        assert set(entry) == {"m1", "m4", "m16"} and all(set(e) == {"bf16", "int8"} for e in entry.values())


def test_an_argmax_entry_serves_only_the_argmax_epilogue():
    plain = _lookup("NVIDIA H200", 132, 151936, 1024, 1, "bf16")
    with_argmax = _lookup("NVIDIA H200", 132, 151936, 1024, 1, "bf16", True)
    assert with_argmax != plain and with_argmax.block_n > plain.block_n
    assert _lookup("NVIDIA H200", 132, 6144, 2560, 1, "bf16", True) == _lookup("NVIDIA H200", 132, 6144, 2560, 1, "bf16")


def test_a_gpu_without_a_file_gets_the_defaults():
    assert tuning.gpu_configs("Some Future GPU") == {}
    assert tuning.section("cpu", "decode_attention") == {}
    assert _lookup("Some Future GPU", 132, 6144, 2560, 16, "bf16") == heuristic_config(6144, 2560, 16, "bf16", 132)
    assert default_num_splits(8192) == MAX_NUM_SPLITS and default_num_splits(8192, max_splits=4) == 4
    assert DEFAULTS["small_m"].BLOCK_M == 64


def test_write_section_replaces_one_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CONFIG_DIR", tmp_path)
    tuning.gpu_configs.cache_clear()
    try:
        path = tuning.write_section("Test GPU 9", "decode_attention", {"num_warps": 8})
        tuning.write_section("Test GPU 9", "prefill_attention", {"block_m": 32})
        assert path == tmp_path / "test_gpu_9.json"
        data = json.loads(path.read_text())
        assert data == {"gpu": "Test GPU 9", "decode_attention": {"num_warps": 8}, "prefill_attention": {"block_m": 32}}
        assert tuning.gpu_configs("Test GPU 9")["decode_attention"] == {"num_warps": 8}
    finally:
        tuning.gpu_configs.cache_clear()


@pytest.mark.parametrize("gpu,slug", [("NVIDIA H200", "nvidia_h200"), ("NVIDIA GeForce RTX 4080 SUPER",
                                                                        "nvidia_geforce_rtx_4080_super")])
def test_file_names(gpu, slug):
    assert tuning.gpu_slug(gpu) == slug


@pytest.mark.parametrize("field,shape,m,value,message", [
    ("prefetch_k", (6144, 2560), 16, 4, "prefetch blocks"),
    ("prefetch_ahead", (6144, 2560), 1, 8, "prefetch-ahead blocks"),
    ("stream_k", (19456, 2560), 16, 2, "stream-K programs per SM"),
])
def test_given_fields_apply_to_configs_that_set_none_and_reject_negatives(field, shape, m, value, message):
    from tileinfer.ops import gemm_configs
    setter = getattr(gemm_configs, f"set_{field}")
    tuned = gemm_configs.get_config(*shape, m, "bf16")
    assert getattr(tuned, field) == 0
    try:
        setter(value)
        assert gemm_configs.get_config(*shape, m, "bf16") == dataclasses.replace(tuned, **{field: value})
        assert getattr(gemm_configs, field)() == value
        with pytest.raises(ValueError, match=message):
            setter(-1)
    finally:
        setter(0)
    assert gemm_configs.get_config(*shape, m, "bf16") == tuned
