"""The LM head with its argmax in one launch: the ids of `linear(x, lm_head).argmax(-1)`, no logits."""

import pytest
import torch

from tileinfer.ops.argmax_keys import EMPTY, argmax_keys_ref
from tileinfer.ops.counters import argmax_slots
from tileinfer.ops.gemm_configs import GemmConfig
from tileinfer.ops.linear import Linear, linear, linear_argmax, quantize_linear
from tileinfer.ops.skinny_gemm import skinny_gemm

SPLIT = GemmConfig(block_n=16, block_k=64, split_k=3, num_warps=4, num_stages=2)


def _head(device, n, k, dtype, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.1
    if ties:  # equal rows: equal logits in every row, the first column must win
        w[n // 3] = w[n - 2] = w[5] = w[n // 2] * 3
    return Linear(weight=w.to(device, dtype))


def test_keys_order_values_then_the_first_column():
    v = torch.tensor([[1.0, 3.0, 3.0, -0.0, 2.0], [-0.0, 0.0, -1.0, -5.0, -0.0], [-2.0, -1.0, float("inf"), 1.0, 7.0],
                      [float("-inf"), -3.0, -3.0, -7.0, float("nan")]])
    keys = argmax_keys_ref(v)
    assert torch.equal(4294967295 - (keys & 4294967295), v.argmax(dim=-1))
    assert (keys > EMPTY).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k", [(203, 64), (1000, 130)])
def test_ids_equal_the_logits_argmax(device, dtype, m, n, k):
    head = _head(device, n, k, dtype, seed=m + n, ties=True)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(device, dtype)
    for exact in (False, True):
        ids = linear_argmax(x, head, exact)
        assert ids.dtype == torch.int64 and ids.shape == (m,)
        assert torch.equal(ids, linear(x, head, exact).argmax(dim=-1)), f"M={m} exact={exact}"
    assert (argmax_slots(x.device, 16)[:16] == EMPTY).all(), "the last tile leaves the slots for the next launch"


@pytest.mark.parametrize("m", [1, 5])
def test_split_k_and_int8(device, m):
    head = _head(device, 300, 192, torch.bfloat16, seed=7)
    x = torch.randn(m, 192, generator=torch.Generator().manual_seed(m)).to(device, torch.bfloat16)
    ids = skinny_gemm(x, head.weight, config=SPLIT, argmax=True)
    assert torch.equal(ids, skinny_gemm(x, head.weight, config=SPLIT).argmax(dim=-1))
    q = quantize_linear(head)
    assert torch.equal(linear_argmax(x, q), linear(x, q).argmax(dim=-1))


def test_rows_do_not_depend_on_m_in_exact_mode(device):
    head = _head(device, 517, 96, torch.bfloat16, seed=3)
    x = torch.randn(16, 96, generator=torch.Generator().manual_seed(4)).to(device, torch.bfloat16) * 4
    block = linear_argmax(x, head, exact=True)
    alone = torch.cat([linear_argmax(x[i:i + 1], head, exact=True) for i in range(16)])
    assert torch.equal(block, alone)


def test_more_rows_than_the_skinny_gemm_fall_back_to_the_logits(device):
    head = _head(device, 64, 32, torch.bfloat16, seed=5)
    x = torch.randn(2, 20, 32, generator=torch.Generator().manual_seed(6)).to(device, torch.bfloat16)
    ids = linear_argmax(x, head)
    assert ids.shape == (2, 20) and torch.equal(ids, linear(x, head).argmax(dim=-1))


def test_argmax_refuses_an_epilogue_it_cannot_share(device):
    w = torch.randn(64, 32).to(device, torch.bfloat16)
    x = torch.randn(2, 32).to(device, torch.bfloat16)
    with pytest.raises(AssertionError, match="argmax takes a plain projection"):
        skinny_gemm(x, w, swiglu=True, argmax=True)


@pytest.mark.parametrize("m", [1, 4])
def test_many_groups_of_tiles(device, m, monkeypatch):
    """Tiles count in groups: a last group shorter than the others, and the slots left for the next launch."""
    monkeypatch.setattr("tileinfer.ops.skinny_gemm.ARGMAX_GROUP", 4)
    head = _head(device, 16 * 11 - 3, 64, torch.bfloat16, seed=11, ties=True)
    x = torch.randn(m, 64, generator=torch.Generator().manual_seed(12)).to(device, torch.bfloat16)
    tiles16 = GemmConfig(block_n=16, block_k=64, split_k=1, num_warps=4, num_stages=2)
    for _ in range(2):
        ids = skinny_gemm(x, head.weight, config=tiles16, argmax=True)
        assert torch.equal(ids, skinny_gemm(x, head.weight, config=tiles16).argmax(dim=-1))
    assert (argmax_slots(x.device, 16)[:16] == EMPTY).all()
