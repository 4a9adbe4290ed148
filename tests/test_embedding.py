"""The one-launch embedding against its definition (`linear.embedding`): bit for bit on a GPU. Triton's
interpreter narrows fp32 to bf16 by truncation where a GPU rounds to nearest even, so on the CPU a row
dequantized to bf16 may differ from the definition by one bf16 step and nothing more."""

import pytest
import torch

from tileinfer.ops.embedding import embedding
from tileinfer.ops.linear import Linear, embedding as embedding_ref, quantize_linear


def _table(vocab: int, hidden: int, device: str, dtype=torch.bfloat16, seed: int = 0) -> Linear:
    g = torch.Generator().manual_seed(seed)
    return Linear(weight=(torch.randn(vocab, hidden, generator=g) * 0.5).to(dtype).to(device))


def _assert_same(got, want, rounded: bool):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.is_cuda or not rounded or want.dtype == torch.float32:
        assert torch.equal(got, want)
    else:
        step = want.float().abs() * 2.0**-7
        assert torch.all((got.float() - want.float()).abs() <= step)


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("vocab,hidden", [(37, 1), (151, 96), (300, 1029), (64, 2560)])
def test_rows_match_the_definition(device, quantized, vocab, hidden):
    lin = _table(vocab, hidden, device)
    lin = quantize_linear(lin) if quantized else lin
    ids = torch.tensor([0, vocab - 1, 5 % vocab, 5 % vocab, 17 % vocab], dtype=torch.int64, device=device)
    _assert_same(embedding(ids, lin), embedding_ref(ids, lin), rounded=quantized)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_dtype_and_int32_ids(device, dtype):
    ids = torch.tensor([3, 49, 0], dtype=torch.int32, device=device)
    lin = quantize_linear(_table(50, 40, device, seed=1))
    _assert_same(embedding(ids, lin, dtype), embedding_ref(ids, lin, dtype), rounded=True)
    plain = _table(50, 40, device, dtype=torch.float32, seed=2)
    _assert_same(embedding(ids, plain, dtype), embedding_ref(ids, plain, dtype), rounded=True)


def test_no_ids_no_rows(device):
    lin = _table(10, 8, device)
    assert embedding(torch.zeros(0, dtype=torch.int64, device=device), lin).shape == (0, 8)


def test_bad_ids_are_named(device):
    lin = _table(10, 8, device)
    with pytest.raises(ValueError, match="int32/int64"):
        embedding(torch.tensor([1.0], device=device), lin)
    with pytest.raises(ValueError, match="one-dimensional"):
        embedding(torch.tensor([[1]], device=device), lin)
