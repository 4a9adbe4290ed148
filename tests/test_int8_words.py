"""The INT8 GEMV that reads its weights in int32 words of four (one PRMT a weight on a GPU): the same
products as the reference, with a fused norm, a fused SwiGLU, split K and the argmax epilogue, and the
operands it cannot read so (misaligned x, fp32 x) left to the element-wise path."""

import pytest
import torch

from tileinfer.ops.gemm_configs import GemmConfig
from tileinfer.ops.linear import quantize_weight
from tileinfer.ops.rmsnorm import rms_norm_ref
from tileinfer.ops.skinny_gemm import reads_words, skinny_gemm, skinny_gemm_ref

SPLIT = GemmConfig(block_n=16, block_k=64, split_k=3, num_warps=4, num_stages=2)


def _int8(n, k, device, seed):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(device, torch.bfloat16)
    return quantize_weight(w)


def _x(k, device, seed, dtype=torch.bfloat16, offset=0):
    buf = torch.randn(k + offset, generator=torch.Generator().manual_seed(seed)).to(device, dtype)
    return buf[offset:].view(1, k)


def _close(y, ref, tol=1e-2):
    assert ((y.float() - ref.float()).norm() / ref.float().norm()).item() < tol


@pytest.mark.parametrize("n,k", [(37, 100), (130, 256), (64, 1028)])
@pytest.mark.parametrize("config", [None, SPLIT])
def test_words_gemv_matches_the_reference(device, n, k, config):
    q, s = _int8(n, k, device, seed=n + k)
    x = _x(k, device, seed=k)
    assert reads_words(x, q, s, None)
    _close(skinny_gemm(x, q, s, config=config), skinny_gemm_ref(x, q, s))


def test_norm_swiglu_and_argmax_read_words_too(device):
    """Against the element-wise path on the same values (tested against its references elsewhere)."""
    k, half = 96, 40
    q, s = _int8(2 * half, k, device, seed=3)
    x = _x(k, device, seed=4)
    elementwise = _x(k, device, seed=4, offset=1)
    elementwise.copy_(x)
    g = (torch.rand(k, generator=torch.Generator().manual_seed(5)) + 0.5).to(device, torch.bfloat16)
    assert reads_words(x, q, s, g) and not reads_words(elementwise, q, s, g)
    normed = rms_norm_ref(x, g, 1e-6)[0]
    _close(skinny_gemm(x, q, s, norm=g), skinny_gemm_ref(normed, q, s))
    for fused in (dict(norm=g), dict(norm=g, swiglu=True), dict(unit_norm=True), dict(swiglu=True)):
        _close(skinny_gemm(x, q, s, **fused), skinny_gemm(elementwise, q, s, **fused), tol=1e-3)
    assert torch.equal(skinny_gemm(x, q, s, argmax=True), skinny_gemm(x, q, s).argmax(dim=-1))


def test_operands_that_cannot_be_read_in_words_take_the_element_path(device):
    q, s = _int8(48, 64, device, seed=6)
    odd = _x(64, device, seed=7, offset=1)  # 2-byte aligned
    assert not reads_words(odd, q, s, None)
    _close(skinny_gemm(odd, q, s), skinny_gemm_ref(odd, q, s))
    f32 = _x(64, device, seed=7, dtype=torch.float32)
    assert not reads_words(f32, q, s, None)
    _close(skinny_gemm(f32, q, s), skinny_gemm_ref(f32, q, s))
    aligned = odd.clone()  # the same values read in words: the same products up to summation order
    assert reads_words(aligned, q, s, None)
    _close(skinny_gemm(aligned, q, s), skinny_gemm(odd, q, s))
