"""Under Triton's interpreter a `tl.dot` output's bits come from its own row and column only (as on a GPU),
whatever the machine's BLAS would do with the tile's shape (`tileinfer.ops.interpreter`)."""

import pytest
import torch
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET


@triton.jit
def _dot_kernel(x_ptr, w_ptr, out_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    x = tl.load(x_ptr + m[:, None] * K + k[None, :])
    w = tl.load(w_ptr + k[:, None] * N + n[None, :])
    tl.store(out_ptr + m[:, None] * N + n[None, :], tl.dot(x, w, input_precision="ieee"))


def dot(x, w):
    out = torch.empty(x.shape[0], w.shape[1], dtype=torch.float32)
    _dot_kernel[(1,)](x, w, out, M=x.shape[0], K=x.shape[1], N=w.shape[1])
    return out


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's dot")
@pytest.mark.parametrize("k", [64, 512])
def test_a_rows_bits_do_not_depend_on_the_other_rows_or_columns(k):
    gen = torch.Generator().manual_seed(k)
    x, w = torch.randn(16, k, generator=gen), torch.randn(k, 64, generator=gen)
    full = dot(x, w)
    other = x.clone()
    other[1:] = torch.randn(15, k, generator=gen)
    assert torch.equal(dot(other, w)[0], full[0])
    assert torch.equal(dot(x[:1].repeat(16, 1), w)[0], full[0])   # the row alone in the tile
    assert torch.equal(dot(x, w[:, :16].contiguous()), full[:, :16])  # fewer columns
    torch.testing.assert_close(full.double(), x.double() @ w.double(), rtol=1e-5, atol=1e-4)
