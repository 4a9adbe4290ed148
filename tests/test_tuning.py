"""Per-GPU tuning data: one file per GPU, one section per kernel, defaults in code for anything missing."""

import dataclasses
import json

import pytest
import torch

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
    tuning.clear_cache()
    try:
        path = tuning.write_section("Test GPU 9", "decode_attention", {"num_warps": 8})
        tuning.write_section("Test GPU 9", "prefill_attention", {"block_m": 32})
        assert path == tmp_path / "test_gpu_9.json"
        data = json.loads(path.read_text())
        assert data == {"gpu": "Test GPU 9", "decode_attention": {"num_warps": 8}, "prefill_attention": {"block_m": 32}}
        assert tuning.gpu_configs("Test GPU 9")["decode_attention"] == {"num_warps": 8}
    finally:
        tuning.clear_cache()


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


@pytest.fixture
def kin_files(tmp_path, monkeypatch):
    """Two tuned sm_90 GPUs of 132 SMs (80 and 141 GiB) and one of 114; visible GPUs as the test says."""
    monkeypatch.setattr(tuning, "CONFIG_DIR", tmp_path)
    files = {
        "Big 80": {"capability": [9, 0], "sms": 132, "memory_gib": 79.2, "decode_attention": {"num_warps": 4},
                   "norm_rope": {"block_t": 16}},
        "Big 141": {"capability": [9, 0], "sms": 132, "memory_gib": 139.8, "decode_attention": {"num_warps": 8},
                    "norm_rope": {"block_t": 32}, "skinny_gemm": {"64x64": {}}},
        "Small": {"capability": [9, 0], "sms": 114, "memory_gib": 79.2, "norm_rope": {"block_t": 64}},
    }
    for gpu, data in files.items():
        (tmp_path / f"{tuning.gpu_slug(gpu)}.json").write_text(json.dumps({"gpu": gpu, **data}))
    visible = {}
    monkeypatch.setattr(tuning, "identity", visible.get)
    tuning.clear_cache()
    yield visible
    tuning.clear_cache()


def test_a_gpu_without_a_file_takes_the_sections_of_its_nearest_kin(kin_files):
    kin_files["Big 94"] = {"capability": [9, 0], "sms": 132, "memory_gib": 93.0}
    assert tuning.kin_of("Big 94") == "Big 80"
    configs = tuning.gpu_configs("Big 94")
    assert configs == {"gpu": "Big 94", "decode_attention": {"num_warps": 4}, "norm_rope": {"block_t": 16}}
    assert tuning.borrowed_sections("Big 94") == {"decode_attention": "Big 80", "norm_rope": "Big 80"}
    kin_files["Huge"] = {"capability": [9, 0], "sms": 132, "memory_gib": 144.0}
    assert tuning.kin_of("Huge") == "Big 141" and "skinny_gemm" in tuning.gpu_configs("Huge")


def test_own_sections_win_and_only_missing_ones_are_borrowed(kin_files):
    kin_files["Big 141"] = {"capability": [9, 0], "sms": 132, "memory_gib": 139.8}
    assert tuning.kin_of("Big 141") == "Big 80"  # never itself
    configs = tuning.gpu_configs("Big 141")
    assert configs["decode_attention"] == {"num_warps": 8} and configs["skinny_gemm"] == {"64x64": {}}
    assert tuning.borrowed_sections("Big 141") == {}
    assert tuning.own_configs("Big 141")["memory_gib"] == 139.8 and configs["memory_gib"] == 139.8


@pytest.mark.parametrize("who", [{"capability": [8, 0], "sms": 132, "memory_gib": 79.2},  # another architecture
                                 {"capability": [9, 0], "sms": 78, "memory_gib": 96.0}])  # SMs no file has
def test_no_kin_leaves_the_defaults(kin_files, who):
    kin_files["Other"] = who
    assert tuning.kin_of("Other") is None and tuning.gpu_configs("Other") == {}
    assert tuning.kin_of("Not visible") is None and tuning.gpu_configs("Not visible") == {}


def test_a_new_file_records_what_its_gpu_is(kin_files):
    kin_files["New"] = {"capability": [9, 0], "sms": 114, "memory_gib": 94.0}
    path = tuning.write_section("New", "norm_rope", {"block_t": 8})
    assert json.loads(path.read_text()) == {"gpu": "New", "capability": [9, 0], "sms": 114, "memory_gib": 94.0,
                                            "norm_rope": {"block_t": 8}}
    assert tuning.kin_of("New") == "Small" and tuning.gpu_configs("New")["norm_rope"] == {"block_t": 8}


def test_the_installed_files_say_what_their_gpus_are():
    for path in sorted(tuning.CONFIG_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        assert tuning.config_path(data["gpu"]) == path
        assert len(data["capability"]) == 2 and data["sms"] > 0 and data["memory_gib"] > 0, path.name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_gpu_in_use_finds_what_its_file_says_and_its_kin():
    gpu = tuning.gpu_of(torch.device("cuda"))
    tuning.clear_cache()
    me = tuning.identity(gpu)
    assert me["sms"] == torch.cuda.get_device_properties(0).multi_processor_count
    own = tuning.own_configs(gpu)
    if own:
        assert own["capability"] == me["capability"] and own["sms"] == me["sms"]
        assert abs(own["memory_gib"] - me["memory_gib"]) < 2
    tuned = {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    if gpu in tuned:
        assert tuning.kin_of(gpu) == (tuned - {gpu}).pop() and tuning.borrowed_sections(gpu) == {}
        assert tuning.gpu_configs(gpu) == own
