"""The two passes around cuBLAS in an INT8 linear of many rows (`linear.linear_ref` is the definition):
the int8 weight widened to the activations' dtype (exact), and the per-output-channel scale applied to
the product in place, in fp32 with one rounding. PyTorch's own kernels for these mixed-dtype element
ops reach about a quarter of the H200's bandwidth: 62 ms of the 8k INT8 prefill of the Qwen3-4B shape
against the 79 ms of its GEMMs (bench/results/prefill_profile_h200.csv)."""

import torch
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET

_WIDEN_BLOCK = 4096
_SCALE_BLOCK_M, _SCALE_BLOCK_N = 16, 256
PTX: tl.constexpr = tl.constexpr(not INTERPRET)  # the interpreter runs no inline PTX


def widen_int8_ref(qweight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return qweight.to(dtype)


def scale_columns_ref(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """y[m, n] *= scale[n], in place: computed in fp32, rounded once to y's dtype."""
    return y.mul_(scale)


@triton.jit
def _widen_kernel(q_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    q = tl.load(q_ptr + offs, mask=mask).to(tl.float32)  # exact; the interpreter has no int8 -> bf16
    tl.store(out_ptr + offs, q.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def column_scaled(x, scale_ptr, cols, mask, ON: tl.constexpr):
    """With ON, x (as loaded, in its dtype) times the scales of its columns `cols`, in fp32, rounded to that
    dtype: the scale pass's arithmetic, which a kernel reading an unscaled product applies as it loads it
    (`linear.linear_unscaled`)."""
    if ON:
        scale = tl.load(scale_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if x.dtype == tl.float32 and PTX:
            # rounded on its own, as the pass stores it: left to the compiler, an fp32 product and the add
            # that reads it (the norm's residual) become one fma, one rounding fewer
            x = tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [x, scale], dtype=tl.float32,
                                          is_pure=True, pack=1)
        else:
            x = (x.to(tl.float32) * scale).to(x.dtype)
    return x


@triton.jit
def _scale_columns_kernel(y_ptr, scale_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    ptrs = y_ptr + rows[:, None] * stride_m + cols[None, :]
    y = tl.load(ptrs, mask=mask, other=0.0)
    tl.store(ptrs, column_scaled(y, scale_ptr, cols[None, :], (cols < N)[None, :], True), mask=mask)


def widen_int8(qweight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`widen_int8_ref` in one launch: int8 -> dtype, contiguous, same shape; every int8 value is exact in
    bf16, fp16 and fp32."""
    if qweight.dtype != torch.int8:
        raise ValueError(f"widen_int8: takes an int8 tensor, got {qweight.dtype}")
    qweight = qweight.contiguous()
    out = torch.empty(qweight.shape, dtype=dtype, device=qweight.device)
    n = qweight.numel()
    if n:
        _widen_kernel[(triton.cdiv(n, _WIDEN_BLOCK),)](qweight, out, n, BLOCK=_WIDEN_BLOCK, num_warps=4)
    return out


def scale_columns_(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`scale_columns_ref` in one launch, bit for bit: y [M, N] (rows contiguous), scale [N] fp32/bf16/fp16."""
    if y.dim() != 2 or y.stride(1) != 1:
        raise ValueError(f"scale_columns_: y must be 2-D with contiguous rows, got {tuple(y.shape)} "
                         f"strides {y.stride()}")
    if scale.shape != (y.shape[1],):
        raise ValueError(f"scale_columns_: scale {tuple(scale.shape)} does not match {y.shape[1]} columns")
    M, N = y.shape
    scale = scale.contiguous()
    if M and N:
        grid = (triton.cdiv(M, _SCALE_BLOCK_M), triton.cdiv(N, _SCALE_BLOCK_N))
        _scale_columns_kernel[grid](y, scale, M, N, y.stride(0), BLOCK_M=_SCALE_BLOCK_M,
                                    BLOCK_N=_SCALE_BLOCK_N, num_warps=4)
    return y
