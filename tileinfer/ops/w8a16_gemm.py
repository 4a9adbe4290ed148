"""W8A16 GEMM: y = x @ (qweight * scale[:, None]).T with int8 weights and bf16 (or fp16/fp32) activations.

M <= 16 goes to the skinny kernel (skinny_gemm.py) with HAS_SCALE, which halves the bytes a decode
or verify step reads. Prefill-sized M uses the tiled kernel here: int8 tiles are converted to x's
dtype in registers before `tl.dot` (tensor cores), and the per-channel scale multiplies the fp32
accumulator once in the epilogue. `w8a16_gemm_ref` is the definition (gpt-fast's weight-only INT8).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET
from tileinfer.ops.fit import launch_fitted, shrink
from tileinfer.ops.skinny_gemm import MAX_M, skinny_gemm
from tileinfer.ops.skinny_rows import _weight_to
from tileinfer.ops.tuning import section


def w8a16_gemm_ref(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """F.linear(x, qweight.to(x.dtype)) * scale, in x.dtype."""
    return (F.linear(x, qweight.to(x.dtype)) * scale).to(x.dtype)


@triton.jit
def _w8a16_gemm_kernel(
    x_ptr, w_ptr, scale_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr,
):
    """y[m, n] = scale[n] * sum_k x[m, k] * qweight[n, k]; tiles ordered in GROUP_M bands for L2 reuse."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0)
        if DOT_FP32:
            acc += tl.dot(x.to(tl.float32), tl.trans(_weight_to(w, tl.float32, True)))
        elif DOT_IEEE:
            acc = tl.dot(x, tl.trans(_weight_to(w, x.dtype, True)), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(_weight_to(w, x.dtype, True)), acc)
    acc *= tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@dataclass(frozen=True)
class W8A16Config:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int


DEFAULTS = {"small_m": W8A16Config(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4),
            "large_m": W8A16Config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4)}


def _prefill_config(m: int, device=None) -> W8A16Config:
    """The tiles for M rows: the GPU's tuned "w8a16_gemm" section (small_m: M <= 64, large_m above), else
    DEFAULTS; small tiles under the interpreter, which runs one program at a time."""
    if INTERPRET:
        return W8A16Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)
    which = "small_m" if m <= 64 else "large_m"
    tuned = section(device, "w8a16_gemm").get(which)
    return W8A16Config(**tuned) if tuned else DEFAULTS[which]


def w8a16_gemm_tiled(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, **config) -> torch.Tensor:
    """The tiled W8A16 kernel for any M (used for M > 16); `config` overrides block sizes/warps/stages."""
    m, k = x.shape
    n = qweight.shape[0]
    assert qweight.dtype == torch.int8 and qweight.shape[1] == k and qweight.stride(1) == 1
    if x.stride(1) != 1:
        x = x.contiguous()
    cfg = replace(_prefill_config(m, x.device), **config)
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)

    def launch(c: W8A16Config):
        grid = (triton.cdiv(m, c.BLOCK_M) * triton.cdiv(n, c.BLOCK_N),)
        _w8a16_gemm_kernel[grid](
            x, qweight, scale, y, m, n, k, x.stride(0), qweight.stride(0), n,
            BLOCK_M=c.BLOCK_M, BLOCK_N=c.BLOCK_N, BLOCK_K=c.BLOCK_K, GROUP_M=8,
            DOT_FP32=INTERPRET, DOT_IEEE=x.dtype == torch.float32,
            num_warps=c.num_warps, num_stages=c.num_stages,
        )

    key = ("w8a16_gemm", x.dtype, cfg, x.device)
    launch_fitted(key, shrink(cfg, blocks=(("BLOCK_K", 16), ("BLOCK_N", 16))), launch)
    return y


def w8a16_gemm(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """y = x @ (qweight * scale[:, None]).T for x [M, K]; skinny kernel for M <= 16, tiled above."""
    if x.shape[0] <= MAX_M:
        return skinny_gemm(x, qweight, scale)
    return w8a16_gemm_tiled(x, qweight, scale)
