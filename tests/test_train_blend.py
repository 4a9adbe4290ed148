"""python -m tools.train blend: two drafters averaged weight by weight, bad inputs named, nothing written."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tools.train.__main__ import main

CONFIG = {"architectures": ["DFlashDraftModel"], "block_size": 16, "hidden_size": 8}


def drafter_dir(path, tensors, config=CONFIG):
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_blend_weighs_each_tensor(tmp_path):
    g = torch.Generator().manual_seed(0)
    a = {"fc.weight": torch.randn(8, 16, generator=g).bfloat16(), "norm.weight": torch.ones(8).bfloat16()}
    b = {"fc.weight": torch.randn(8, 16, generator=g).bfloat16(), "norm.weight": torch.zeros(8).bfloat16()}
    main(["blend", "--a", str(drafter_dir(tmp_path / "a", a)), "--b", str(drafter_dir(tmp_path / "b", b)),
          "--weight", "0.25", "--out", str(tmp_path / "out")])
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert got.keys() == a.keys() and all(v.dtype == torch.bfloat16 for v in got.values())
    assert torch.equal(got["norm.weight"], torch.full((8,), 0.75).bfloat16())
    assert torch.equal(got["fc.weight"], (0.75 * a["fc.weight"].float() + 0.25 * b["fc.weight"].float()).bfloat16())
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == CONFIG


def test_blend_refuses_drafters_that_do_not_match(tmp_path):
    a = drafter_dir(tmp_path / "a", {"fc.weight": torch.zeros(8, 16).bfloat16()})
    wide = drafter_dir(tmp_path / "wide", {"fc.weight": torch.zeros(8, 32).bfloat16()})
    other = drafter_dir(tmp_path / "other", {"fc.weight": torch.zeros(8, 16).bfloat16()}, {**CONFIG, "block_size": 8})
    cases = [(wide, "0.5", "different tensors: fc.weight"), (other, "0.5", "different configs (block_size differ)"),
             (a, "1.5", "--weight 1.5"), (tmp_path / "none", "0.5", "not a drafter directory")]
    for b, weight, message in cases:
        with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
            main(["blend", "--a", str(a), "--b", str(b), "--weight", weight, "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
