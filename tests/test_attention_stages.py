"""bench/attention_stages.py: every rewrite still finds its place in the kernel's source (so the table
times what it says), the unrewritten module computes what decode_attention does, and bad points are named."""

import pytest
import torch

from bench import attention_stages
from tileinfer.ops.decode_attention import decode_attention


def test_every_rewrite_applies_and_base_is_the_kernel(tmp_path, device):
    modules = {name: attention_stages.rewritten(name, str(tmp_path)) for name in attention_stages.REWRITES}
    for name, rewrites in attention_stages.REWRITES.items():
        src = (tmp_path / f"decode_attention_{name}.py").read_text()
        assert all(new in src for _, new in rewrites), name
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 16, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(90, 2, 16, generator=g).to(torch.bfloat16).to(device)
    v = torch.randn(90, 2, 16, generator=g).to(torch.bfloat16).to(device)
    kv_len = torch.tensor([80], dtype=torch.int32, device=device)
    got = modules["base"].decode_attention(q, k, v, kv_len, num_splits=2)
    assert torch.equal(got, decode_attention(q, k, v, kv_len, num_splits=2))


def test_bad_points_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        attention_stages.main(["--out", str(tmp_path), "--points", "1024:17:8"])
    assert "kv_len:T:splits" in capsys.readouterr().err
    assert attention_stages.parse_points("1024:1:8,8192:16:4") == [(1024, 1, 8), (8192, 16, 4)]
