"""bench/tuned_override.py: a GPU's tuned configs with some values replaced, for an A/B without editing them."""

import json

import pytest

from bench import tuned_override
from tileinfer.ops import gemm_configs, tuning

H200 = "NVIDIA H200"
O_M1 = {"skinny_gemm": {"2560x4096": {"m1": {"bf16": {"prefetch_k": 64}}}}}


def test_merge_replaces_fields_and_keeps_the_rest_of_an_entry():
    base = {"a": {"x": 1, "y": {"z": 2, "w": 3}}, "b": 4}
    assert tuned_override.merged(base, {"a": {"y": {"z": 9}}}) == {"a": {"x": 1, "y": {"z": 9, "w": 3}}, "b": 4}
    assert tuned_override.merged(base, {"a": {"new": 5}})["a"] == {"x": 1, "y": {"z": 2, "w": 3}, "new": 5}
    assert base == {"a": {"x": 1, "y": {"z": 2, "w": 3}}, "b": 4}
    with pytest.raises(KeyError, match="'a.nope'"):
        tuned_override.merged(base, {"a": {"nope": {"z": 1}}})


def test_parse_and_label(tmp_path):
    assert tuned_override.parse("none") == {} == tuned_override.parse("")
    assert tuned_override.parse('{"prefill_attention": {"tma": false}}') == {"prefill_attention": {"tma": False}}
    path = tmp_path / "o.json"
    path.write_text(json.dumps(O_M1))
    assert tuned_override.parse(str(path)) == O_M1
    for bad in ("[1, 2]", "{tma: false}", str(tmp_path / "missing.json")):
        with pytest.raises(ValueError, match="an override is a JSON object"):
            tuned_override.parse(bad)
    assert tuned_override.label({}) == "none"
    assert tuned_override.label({"b": 1, "a": {"c": True}}) == '{"a":{"c":true},"b":1}'


def test_check_names_what_the_configs_lack():
    tuned_override.check(O_M1, H200)
    tuned_override.check({}, "cpu")
    with pytest.raises(ValueError, match="'skinny_gemm.1x1'"):
        tuned_override.check({"skinny_gemm": {"1x1": {"m1": {}}}}, H200)
    with pytest.raises(ValueError, match="cpu has no tuned configs"):
        tuned_override.check(O_M1, "cpu")


def test_inside_the_override_the_kernels_read_the_patched_values_and_after_it_the_tuned_ones():
    tuned = gemm_configs._lookup(H200, 132, 2560, 4096, 1, "bf16")
    patch = {**O_M1, "prefill_attention": {"tma": False}}
    with tuned_override.overridden(patch):
        o = gemm_configs._lookup(H200, 132, 2560, 4096, 1, "bf16")
        assert o.prefetch_k == 64 and o.block_k == tuned.block_k and o.split_k == tuned.split_k
        assert gemm_configs._lookup(H200, 132, 6144, 2560, 1, "bf16").prefetch_k == \
            tuning.gpu_configs(H200)["skinny_gemm"]["6144x2560"]["m1"]["bf16"].get("prefetch_k", 0)
        assert tuning.gpu_configs(H200)["prefill_attention"]["tma"] is False
        assert tuning.gpu_configs(H200)["prefill_attention"]["block_m"] == 128
        assert tuning.gpu_configs("cpu") == {}
    assert gemm_configs._lookup(H200, 132, 2560, 4096, 1, "bf16") == tuned
    assert tuning.gpu_configs(H200)["prefill_attention"]["tma"] is True


def test_the_benches_refuse_an_override_this_machine_cannot_apply(tmp_path, capsys):
    """Refused before anything runs: a section no GPU's configs have, anywhere; on a machine without a GPU,
    any override (it has no tuned configs to change). On a GPU an applicable override would run the bench."""
    import torch

    from bench import floor_bench, prefill_profile

    cases = [({"no_such_kernel": {"block_m": 64}}, ("'no_such_kernel'", "has no tuned configs"))]
    if not torch.cuda.is_available():
        cases.append((O_M1, ("cpu has no tuned configs",)))
    for patch, reasons in cases:
        for main in (floor_bench.main, prefill_profile.main):
            with pytest.raises(SystemExit):
                main(["--out", str(tmp_path / "out"), "--override", json.dumps(patch)])
            err = capsys.readouterr().err
            assert "--override:" in err and any(why in err for why in reasons)
    assert not list(tmp_path.iterdir())


def test_a_whole_configs_file_stands_in_for_its_gpus_and_only_inside(tmp_path):
    """`replaced`: the file's entries and nothing else of the installed file (an entry it lacks gets the
    heuristic); other GPUs keep theirs; the installed file again after."""
    path = tmp_path / "before.json"
    path.write_text(json.dumps({"gpu": H200, "skinny_gemm": {"2560x4096": {"m1": {"bf16": {"block_n": 4, "block_k": 128}}}}}))
    tuned = gemm_configs._lookup(H200, 132, 6144, 2560, 1, "bf16")
    with tuned_override.replaced(tuned_override.read_configs(str(path), H200)):
        assert gemm_configs._lookup(H200, 132, 2560, 4096, 1, "bf16") == gemm_configs.GemmConfig(block_n=4, block_k=128)
        assert gemm_configs._lookup(H200, 132, 6144, 2560, 1, "bf16") == gemm_configs.heuristic_config(6144, 2560, 1, "bf16")
        assert "decode_attention" not in tuning.gpu_configs(H200)
        assert tuning.gpu_configs("NVIDIA H100 80GB HBM3")["skinny_gemm"]
    assert gemm_configs._lookup(H200, 132, 6144, 2560, 1, "bf16") == tuned
    assert "decode_attention" in tuning.gpu_configs(H200)


def test_a_configs_file_that_cannot_stand_in_is_named(tmp_path):
    other = tmp_path / "h100.json"
    other.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "skinny_gemm": {}}))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds the configs of 'NVIDIA H100 80GB HBM3', this machine's GPU is 'NVIDIA H200'"):
        tuned_override.read_configs(str(other), H200)
    with pytest.raises(ValueError, match="a configs file is a JSON object, got list"):
        tuned_override.read_configs(str(listed), H200)
    with pytest.raises(ValueError, match="missing.json"):
        tuned_override.read_configs(str(tmp_path / "missing.json"), H200)
