"""INT8 weights end to end: agreement with BF16, lossless DFlash, save → load."""

import pytest
import torch

import tileinfer
from tests.helpers import tiny_pair
from tileinfer.quant import save_quantized


def agreement(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.slow
def test_int8_greedy_against_bf16_and_lossless_dflash(tmp_path, capsys):
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16)
    bf16 = tileinfer.load(target, draft=draft, weights="bf16")
    int8 = tileinfer.load(target, draft=draft, weights="int8")
    assert int8.target.lm_head.is_quantized and int8.drafter.fc.is_quantized
    assert int8.target.embed_tokens is int8.target.lm_head  # tied: rows dequantized from the INT8 head
    ids = torch.randint(0, 150, (17,), generator=torch.Generator().manual_seed(4)).tolist()
    ref = bf16.generate(ids, 40, stop_ids=[], block_size=1).tokens
    plain = int8.generate(ids, 40, stop_ids=[], block_size=1).tokens
    with capsys.disabled():
        print(f"\nINT8 vs BF16 greedy agreement: {agreement(ref, plain)} of 40 tokens")
    for block in (4, 16):
        assert int8.generate(ids, 40, stop_ids=[], block_size=block).tokens == plain


def test_quantized_checkpoint_round_trip(tmp_path):
    target, _ = tiny_pair(tmp_path, dtype=torch.bfloat16)
    engine = tileinfer.load(target, weights="int8")
    save_quantized(engine.target, tmp_path / "q", tokenizer_from=target)
    again = tileinfer.load(tmp_path / "q", weights="int8")
    for (name, a), (_, b) in zip(engine.target.named_linears(), again.target.named_linears()):
        assert torch.equal(a.qweight, b.qweight) and torch.equal(a.scale, b.scale), name
    ids = torch.randint(0, 150, (9,), generator=torch.Generator().manual_seed(5)).tolist()
    assert again.generate(ids, 12, stop_ids=[]).tokens == engine.generate(ids, 12, stop_ids=[]).tokens
