"""Linear layer: the skinny BF16 / W8A16 Triton kernels and the tiled W8A16 kernel against x @ dequant(W).T."""

import pytest
import torch
import triton
import triton.language as tl

from tests.conftest import assert_close
from tests.helpers import gemm_operands
from tileinfer.errors import CheckpointError
from tileinfer.ops.gemm_configs import GemmConfig, get_config, heuristic_config, m_bucket
from tileinfer.ops.dequant import scale_columns_
from tileinfer.ops.linear import (DEFER_SCALES, DEQUANT_MIN_M, Linear, embedding, linear, linear_ref,
                                  linear_swiglu, linear_unscaled, quantize_linear)
from tileinfer.ops.skinny_gemm import skinny_gemm, skinny_gemm_ref
from tileinfer.ops.skinny_rows import _weight_to
from tileinfer.ops.swiglu import silu_mul, silu_mul_ref
from tileinfer.ops.w8a16_gemm import w8a16_gemm, w8a16_gemm_ref, w8a16_gemm_tiled

# Error relative to max|ref|: bf16 output rounding dominates (8 significant bits).
TOL = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3, torch.float32: 2e-5}
SHAPES = [(37, 50), (100, 130), (64, 32)]
MS = [1, 2, 5, 16, 40]


def _check(y, x, w_deq, dtype, what):
    ref = (x.double() @ w_deq.double().T)
    assert y.dtype == dtype and y.shape == ref.shape, (y.dtype, y.shape)
    scale = ref.abs().max().item()
    assert_close(y.double(), ref, atol=TOL[dtype] * scale, rtol=0, what=what)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", MS)
def test_linear_matches_dequant_reference(device, dtype, n, k, m):
    gen = torch.Generator().manual_seed(n * 1000 + k * 10 + m)
    w = torch.randn(n, k, generator=gen).to(device)
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    lin = Linear(weight=w.to(dtype))
    _check(linear(x, lin), x, lin.weight, dtype, f"bf16-path {dtype} M={m} {n}x{k}")
    q = quantize_linear(lin)
    _check(linear(x, q), x, q.dequantized(torch.float64), dtype, f"int8-path {dtype} M={m} {n}x{k}")
    _check(linear_ref(x, q), x, q.dequantized(torch.float64), dtype, "linear_ref int8")


@pytest.mark.parametrize("split_k", [1, 2, 3])
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("quantized", [False, True])
def test_skinny_split_k_and_blocks(device, split_k, m, quantized):
    n, k = 100, 130
    gen = torch.Generator().manual_seed(7 + split_k)
    w = torch.randn(n, k, generator=gen).to(device)
    x = torch.randn(m, k, generator=gen).to(device, torch.bfloat16)
    cfg = GemmConfig(block_n=16 if m == 1 else 32, block_k=32, split_k=split_k)
    if quantized:
        q = quantize_linear(Linear(weight=w))
        y = skinny_gemm(x, q.qweight, q.scale, config=cfg)
        y_slow = skinny_gemm(x, q.qweight, q.scale, config=GemmConfig(**{**cfg.as_dict(), "fast_i8": False}))
        assert torch.equal(y, y_slow)
        w_deq = q.dequantized(torch.float64)
    else:
        w = w.to(torch.bfloat16)
        y = skinny_gemm(x, w, config=cfg)
        w_deq = w
    _check(y, x, w_deq, torch.bfloat16, f"skinny split_k={split_k} M={m} q={quantized}")
    assert_close(y, skinny_gemm_ref(x, *((q.qweight, q.scale) if quantized else (w,))), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("i,k", [(37, 50), (48, 130)])
@pytest.mark.parametrize("m", [1, 2, 5, 16, 40])
@pytest.mark.parametrize("quantized", [False, True])
def test_swiglu_epilogue_equals_gate_up_then_silu_mul(device, dtype, i, k, m, quantized):
    """The gate_up GEMM with SwiGLU in its epilogue: the bits of the two launches it replaces, in and out
    of exact mode, and close to the PyTorch definition."""
    gen = torch.Generator().manual_seed(i * 100 + k + m)
    lin = Linear(weight=(torch.randn(2 * i, k, generator=gen) * k ** -0.5).to(device, dtype))
    lin = quantize_linear(lin) if quantized else lin
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    for exact in (False, True):
        y = linear_swiglu(x, lin, exact)
        assert y.shape == (m, i) and y.dtype == dtype
        assert torch.equal(y, silu_mul(linear(x, lin, exact))), f"exact={exact}"
    ref = silu_mul_ref(linear_ref(x, lin).double()).to(dtype)
    assert_close(y.double(), ref.double(), atol=TOL[dtype] * max(ref.abs().max().item(), 1), rtol=TOL[dtype],
                 what=f"swiglu {dtype} M={m} q={quantized}")


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("quantized", [False, True])
def test_swiglu_epilogue_after_split_k(device, split_k, m, quantized):
    gen = torch.Generator().manual_seed(31 + split_k)
    w = torch.randn(96, 130, generator=gen).to(device, torch.bfloat16)
    x = torch.randn(m, 130, generator=gen).to(device, torch.bfloat16)
    args = quantize_linear(Linear(weight=w)) if quantized else Linear(weight=w)
    weights = (args.qweight, args.scale) if quantized else (args.weight,)
    cfg = GemmConfig(block_n=16 if m == 1 else 32, block_k=32, split_k=split_k)
    fused = skinny_gemm(x, *weights, config=cfg, swiglu=True)
    assert torch.equal(fused, silu_mul(skinny_gemm(x, *weights, config=cfg)))


@pytest.mark.parametrize("k_warps", [2, 4])
@pytest.mark.parametrize("m", [5, 16])
@pytest.mark.parametrize("quantized", [False, True])
def test_k_warps_slices_take_the_same_products(device, k_warps, m, quantized):
    """A tl.dot config whose warps split each K-block (`k_warps`) against the same config without: plain,
    with a split K, the RMSNorm on the way in, the SwiGLU and the residual epilogues (K = 130: a partial
    last block, and slices of it past K)."""
    lin, weights, x, g, res = gemm_operands(96, 130, m, quantized, 11 * k_warps + m, device)
    base = GemmConfig(block_n=32, block_k=64, num_warps=4)
    for split_k in (1, 2):
        one = GemmConfig(**{**base.as_dict(), "split_k": split_k})
        sliced = GemmConfig(**{**one.as_dict(), "k_warps": k_warps})
        for what, kw in (("plain", {}), ("norm", {"norm": g}), ("swiglu", {"swiglu": True})):
            y, y1 = (skinny_gemm(x, *weights, config=c, **kw) for c in (sliced, one))
            assert_close(y.double(), y1.double(), atol=2e-2 * y1.abs().max().item(), rtol=0,
                         what=f"{what} k_warps={k_warps} split_k={split_k}")
        y, y1 = (skinny_gemm(x, *weights, config=c, residual=res.clone()) for c in (sliced, one))
        assert_close(y.double(), y1.double(), atol=2e-2 * y1.abs().max().item(), rtol=0, what="residual")
    _check(skinny_gemm(x, *weights, config=GemmConfig(**{**base.as_dict(), "k_warps": k_warps})), x,
           lin.dequantized(torch.float64) if quantized else lin.weight, torch.bfloat16, f"k_warps={k_warps}")


def test_k_warps_leave_the_gemv_alone():
    from tileinfer.ops.skinny_gemm import _k_warps
    cfg = GemmConfig(block_n=32, block_k=256, num_warps=4, k_warps=8)
    assert _k_warps(cfg, 1, 256) == 1
    assert _k_warps(cfg, 16, 256) == 4       # no more than its warps
    assert _k_warps(cfg, 16, 32) == 2        # slices at least 16 deep
    assert _k_warps(GemmConfig(block_n=32, block_k=96, num_warps=8, k_warps=3), 16, 96) == 2  # a power of two


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("quantized", [False, True])
def test_prefetch_ahead_leaves_the_bits_alone(device, m, quantized):
    """L2 prefetches in the K loop (`prefetch_ahead`) change no result: plain, split K, the RMSNorm on the way
    in, the SwiGLU and residual epilogues, the GEMV (int8 on int32 words too) and tl.dot paths; K = 1000 is
    a partial last block, so the blocks ahead run past the end of a split and of K."""
    lin, weights, x, g, res = gemm_operands(96, 1000, m, quantized, 7 + m, device)
    for split_k in (1, 3):
        base = GemmConfig(block_n=32, block_k=128, split_k=split_k, num_warps=4, num_stages=3)
        ahead = GemmConfig(**{**base.as_dict(), "prefetch_ahead": 2})
        for what, kw in (("plain", {}), ("norm", {"norm": g}), ("swiglu", {"swiglu": True})):
            y, y0 = (skinny_gemm(x, *weights, config=c, **kw) for c in (ahead, base))
            assert torch.equal(y, y0), f"{what} split_k={split_k}"
        y, y0 = (skinny_gemm(x, *weights, config=c, residual=res.clone()) for c in (ahead, base))
        assert torch.equal(y, y0), f"residual split_k={split_k}"
    _check(skinny_gemm(x, *weights, config=GemmConfig(block_n=32, block_k=128, prefetch_ahead=4)), x,
           lin.dequantized(torch.float64) if quantized else lin.weight, torch.bfloat16, "prefetch_ahead=4")


def test_swiglu_epilogue_rows_do_not_depend_on_m(device):
    gen = torch.Generator().manual_seed(5)
    lin = Linear(weight=torch.randn(2 * 40, 70, generator=gen).to(device, torch.bfloat16))
    x = torch.randn(16, 70, generator=gen).to(device, torch.bfloat16)
    rows = linear_swiglu(x, lin, exact=True)
    for m in (1, 3):
        assert torch.equal(linear_swiglu(x[:m], lin, exact=True), rows[:m])


@pytest.mark.parametrize("m", [3, 17, 40])
def test_w8a16_tiled_and_dispatch(device, m):
    gen = torch.Generator().manual_seed(m)
    q = quantize_linear(Linear(weight=torch.randn(37, 50, generator=gen).to(device)))
    x = torch.randn(m, 50, generator=gen).to(device, torch.bfloat16)
    ref = q.dequantized(torch.float64)
    _check(w8a16_gemm_tiled(x, q.qweight, q.scale), x, ref, torch.bfloat16, f"tiled M={m}")
    _check(w8a16_gemm(x, q.qweight, q.scale), x, ref, torch.bfloat16, f"w8a16_gemm M={m}")
    _check(w8a16_gemm_ref(x, q.qweight, q.scale), x, ref, torch.bfloat16, "w8a16_gemm_ref")


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int8_prefill_rows_take_the_definition(device, dtype, scale_dtype, monkeypatch):
    """From DEQUANT_MIN_M rows an INT8 linear is linear_ref itself (weight widened, cuBLAS, scale in place):
    the same bits; below it, the W8A16 kernel."""
    gen = torch.Generator().manual_seed(3)
    q = quantize_linear(Linear(weight=torch.randn(37, 50, generator=gen).to(device)))
    q = Linear(qweight=q.qweight, scale=q.scale.to(scale_dtype))
    x = torch.randn(DEQUANT_MIN_M + 3, 50, generator=gen).to(device, dtype)
    assert torch.equal(linear(x, q), linear_ref(x, q))
    assert torch.equal(linear(x[:DEQUANT_MIN_M], q), linear_ref(x[:DEQUANT_MIN_M], q))
    below = x[:DEQUANT_MIN_M - 1]
    assert torch.equal(linear(below, q), w8a16_gemm(below, q.qweight, q.scale))
    gate_up = Linear(qweight=q.qweight[:36], scale=q.scale[:36])  # on a GPU its scale goes into the SwiGLU
    for rows in (x, x[:DEQUANT_MIN_M], below):
        assert torch.equal(linear_swiglu(rows, gate_up), silu_mul(linear(rows, gate_up)))
        y, scale = linear_unscaled(rows, q)  # on a GPU the scale is left to the kernel that reads y
        assert (scale is not None) == (rows.is_cuda and len(rows) >= DEQUANT_MIN_M)
        assert torch.equal(y if scale is None else scale_columns_(y, scale), linear(rows, q))
    monkeypatch.setattr(DEFER_SCALES, "on", False)  # a scale pass after each product instead
    y, scale = linear_unscaled(x, q)
    assert scale is None and torch.equal(y, linear(x, q))
    assert torch.equal(linear_swiglu(x, gate_up), silu_mul(linear(x, gate_up)))


def test_linear_keeps_leading_dims_and_bf16_scale(device):
    q = quantize_linear(Linear(weight=torch.randn(37, 50).to(device)))
    q16 = Linear(qweight=q.qweight, scale=q.scale.to(torch.bfloat16))
    x = torch.randn(2, 3, 50).to(device, torch.bfloat16)
    y = linear(x, q16)
    assert y.shape == (2, 3, 37)
    _check(y.reshape(6, 37), x.reshape(6, 50), q16.dequantized(torch.float64), torch.bfloat16, "bf16 scale")


@triton.jit
def _convert_kernel(w_ptr, o_ptr, DTYPE: tl.constexpr):
    offs = tl.arange(0, 256)
    tl.store(o_ptr + offs, _weight_to(tl.load(w_ptr + offs), DTYPE, True))


@pytest.mark.parametrize("tl_dtype,dtype", [(tl.bfloat16, torch.bfloat16), (tl.float16, torch.float16),
                                            (tl.float32, torch.float32)])
def test_fast_int8_conversion_is_exact(device, tl_dtype, dtype):
    w = torch.arange(-128, 128, dtype=torch.int32).to(device, torch.int8)
    out = torch.empty(256, dtype=dtype, device=device)
    _convert_kernel[(1,)](w, out, DTYPE=tl_dtype)
    assert torch.equal(out.float(), w.float())


def test_quantize_linear_round_trip_bound():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(37, 130, generator=gen) * torch.logspace(-3, 1, 37)[:, None]
    w[5] = 0.0  # an all-zero row must not divide by zero
    q = quantize_linear(Linear(weight=w, parts=(("a", 30), ("b", 7))))
    assert q.qweight.dtype == torch.int8 and q.scale.dtype == torch.float32 and q.parts == (("a", 30), ("b", 7))
    assert int(q.qweight.abs().max()) <= 127
    err = (w - q.dequantized(torch.float32)).abs()
    assert bool((err <= q.scale[:, None] / 2 * (1 + 1e-6)).all())
    assert torch.equal(q.qweight[5], torch.zeros(130, dtype=torch.int8))
    assert quantize_linear(q) is q


def test_linear_properties():
    lin = Linear(weight=torch.randn(37, 50, dtype=torch.bfloat16))
    q = quantize_linear(lin)
    assert (lin.out_features, lin.in_features, lin.is_quantized, lin.nbytes) == (37, 50, False, 37 * 50 * 2)
    assert (q.out_features, q.in_features, q.is_quantized, q.nbytes) == (37, 50, True, 37 * 50 + 37 * 4)


def test_embedding_rows():
    w = torch.randn(20, 8)
    ids = torch.tensor([[3, 0, 19]])
    assert torch.equal(embedding(ids, Linear(weight=w)), w[ids])
    q = quantize_linear(Linear(weight=w))
    e = embedding(ids, q)
    assert e.dtype == torch.bfloat16 and e.shape == (1, 3, 8)
    assert_close(e, q.dequantized(torch.float32)[ids], atol=0, rtol=4e-3, what="quantized embedding")


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(CheckpointError, match="without a scale"):
        Linear(qweight=torch.zeros(4, 8, dtype=torch.int8))
    with pytest.raises(CheckpointError, match="int8"):
        Linear(qweight=torch.zeros(4, 8, dtype=torch.int32), scale=torch.ones(4))
    with pytest.raises(CheckpointError, match="scale has 3 entries"):
        Linear(qweight=torch.zeros(4, 8, dtype=torch.int8), scale=torch.ones(3))
    with pytest.raises(CheckpointError, match="exactly one"):
        Linear()
    with pytest.raises(CheckpointError, match="parts"):
        Linear(weight=torch.zeros(4, 8), parts=(("a", 3),))
    lin = Linear(weight=torch.zeros(4, 8))
    for fn in (linear, linear_ref):
        with pytest.raises(ValueError, match="in_features"):
            fn(torch.zeros(2, 9), lin)


def test_configs_lookup_and_heuristic():
    assert [m_bucket(m) for m in (1, 2, 4, 5, 16)] == [1, 4, 4, 16, 16]
    with pytest.raises(ValueError):
        m_bucket(17)
    cfg = heuristic_config(1024, 4096, 1, "bf16")
    assert cfg.split_k > 1  # too few row tiles for 132 SMs without splitting K
    assert heuristic_config(151936, 2560, 1, "bf16").split_k == 1
    assert heuristic_config(1024, 4096, 16, "bf16").split_k == 2  # above M = 1, K is split in two at most
    many_rows = heuristic_config(2560, 4096, 16, "int8")
    assert many_rows.block_k >= 128 and not many_rows.fast_i8  # tl.dot tiles convert by cvt
    assert heuristic_config(37, 50, 1, "int8").block_k == 64  # a short K is not padded past its power of two
    assert isinstance(get_config(37, 50, 1, "int8"), GemmConfig)
