"""Skinny GEMM for M <= 16 (decode and DFlash verify/draft): y = x @ W.T, weights streamed once.

At these M every linear is a pass over its weight, so the kernel is built for bandwidth: each program
owns BLOCK_N rows of W and one of SPLIT_K slices of K, loads [BLOCK_N, BLOCK_K] tiles contiguous
along K (16-byte loads), and accumulates in fp32. M = 1 multiplies elementwise (GEMV); M in 2..16 pads
M to 16 and uses `tl.dot` with W as the left operand (swap-AB, so N fills the MMA's M side). The
small Qwen3-4B shapes (o 2560x4096, down 2560x9728) have too few row tiles to fill 132 SMs, hence
split-K: each split writes fp32 partials, and the last program of an N-tile to arrive (an arrival
counter it resets, tileinfer.ops.counters) sums them in split order: deterministic, one launch, and
CUDA-graph safe.

Exact mode (`exact=True`) makes a row's result independent of how many rows share the call: every
M in 1..16 takes the tl.dot path with M padded to 16, and the config (tiles, split-K, warps, stages)
is chosen by N and K alone. A row computed in a 16-token DFlash verify pass then has the bits it has
in a one-token decode step, which is what makes greedy DFlash return exactly greedy decoding's tokens.

The same kernel serves INT8 weights (HAS_SCALE): int8 tiles are converted to x's dtype in registers
and the per-channel scale is applied in the epilogue. The conversion avoids the int->float unit
(16 ops/clk/SM on Hopper): with plain casts the INT8 GEMV ran at 2.3 TB/s effective on an H200 against
3.9 for BF16, i.e. it was conversion-bound. `skinny_gemm_ref` is the definition.

`swiglu=True` serves the MLP's fused gate_up: each program streams its gate rows and the matching up rows
in one K loop and stores silu(gate) * up, so the activation needs no launch and gate_up is never written.

`norm=` folds the RMSNorm before the projection in: the products take x·g, the K loop also sums x² (x is
small and in L2: a second load of each tile), and the epilogue scales the sums by the row's 1/RMS (no
normed x written). `unit_norm=True` is the same for a W that carries the norm's weight.
`residual=` folds the residual add after it in: the product, rounded to the model dtype, is added to the
residual stream in place; with `row_sums=True` each tile also writes the Σ of its columns' squares of the
new stream, so the next folded norm (`norm_sums=`) reads its statistics instead of summing x² itself —
after its K loop, or right after the grid-dependency wait with `set_early_epilogue` (as the residual rows; the
same bits).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops import INTERPRET
from tileinfer.ops.argmax_keys import argmax_keys, key_column
from tileinfer.ops.counters import argmax_slots, arrival_counters
from tileinfer.ops.fit import launch_fitted, shrink
from tileinfer.ops.gemm_configs import NUM_SMS_GUESS, GemmConfig, _device_info, get_config
from tileinfer.ops.pdl import launch_options, prefetch_l2
from tileinfer.ops.switches import Switch

MAX_M = 16
SUM_ROWS: tl.constexpr = tl.constexpr(MAX_M)  # rows of a row_sums tensor [tiles, SUM_ROWS]
SUM_CHUNK: tl.constexpr = tl.constexpr(32)  # tiles of row sums read per load
ARGMAX_GROUP = 256  # tiles per argmax arrival counter
I8_ASM: tl.constexpr = tl.constexpr(not INTERPRET)  # PTX for the int8 conversion (the interpreter has none)
KEY_CHUNK: tl.constexpr = tl.constexpr(64)  # tiles' argmax keys read per load
COUNTER_STRIDE: tl.constexpr = tl.constexpr(32)  # int32s between the argmax's counters: one 128-byte line each


# The epilogue's inputs from the kernel before — a folded norm's row sums (`norm_sums=`), the residual
# stream's rows (`residual=`) — loaded right after the grid-dependency wait, beside the first weight tiles,
# instead of after the K loop. The bits are the same either way; off: on the H200 the steps' times moved
# less than between runs (floor_early_epilogue_h200.csv).
EARLY_EPILOGUE = Switch("TILEINFER_EARLY_EPILOGUE")
set_early_epilogue, early_epilogue_label = EARLY_EPILOGUE.set, EARLY_EPILOGUE.label


def _k_warps(c: GemmConfig, block_m: int, block_k: int) -> int:
    """The K slices of a tl.dot config's K-block (`_rows_acc`'s K_WARPS): at most its warps, each slice at
    least 16 deep (one MMA's K); 1 for the GEMV."""
    if block_m == 1:
        return 1
    k_warps = min(c.k_warps, c.num_warps, block_k // 16)
    return max(1, 1 << (k_warps.bit_length() - 1))


def skinny_gemm_ref(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ (w * scale[:, None]).T in x.dtype, computed in fp32."""
    wf = w.float() if scale is None else w.float() * scale.float()[:, None]
    return (x.float() @ wf.T).to(x.dtype)


@triton.jit
def _int8_to_f32(w):
    """Exact int8 -> fp32 by integer ops: the bits 0x4B000000 + (w + 128) are the float 2**23 + w + 128."""
    return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


@triton.jit
def _weight_to(w, dtype: tl.constexpr, FAST_I8: tl.constexpr):
    """A weight tile in `dtype`; int8 via `_int8_to_f32` when FAST_I8 (|w| <= 128 fits bf16's 8 significant
    bits, so dropping the low 16 bits of the exact fp32 is an exact bf16)."""
    if FAST_I8:
        f = _int8_to_f32(w)
        if dtype == tl.bfloat16:
            return (f.to(tl.int32, bitcast=True) >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)
        else:
            return f.to(dtype)
    else:
        return w.to(dtype)


@triton.jit
def _int8_words_to_f32(words):
    """The four int8 weights of each int32 word (bytes 0..3: k = 4j..4j+3) as exact fp32, as `_int8_to_f32`.
    On a GPU one XOR biases a word's four bytes and one PRMT per weight places a byte under the exponent:
    the int8 tiles' own conversion took ~2 PRMT a weight for the sign extensions and the GEMV was bound
    by the integer pipe, not by its bytes."""
    if I8_ASM:
        b0, b1, b2, b3 = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 u;
            xor.b32 u, $4, 0x80808080;
            prmt.b32 $0, u, 0x4B000000, 0x7650;
            prmt.b32 $1, u, 0x4B000000, 0x7651;
            prmt.b32 $2, u, 0x4B000000, 0x7652;
            prmt.b32 $3, u, 0x4B000000, 0x7653;
            }""",
            constraints="=r,=r,=r,=r,r", args=[words], dtype=(tl.float32, tl.float32, tl.float32, tl.float32),
            is_pure=True, pack=1)
    else:
        u = words ^ -2139062144  # 0x80808080
        b0 = ((u & 0xFF) | 0x4B000000).to(tl.float32, bitcast=True)
        b1 = (((u >> 8) & 0xFF) | 0x4B000000).to(tl.float32, bitcast=True)
        b2 = (((u >> 16) & 0xFF) | 0x4B000000).to(tl.float32, bitcast=True)
        b3 = (((u >> 24) & 0xFF) | 0x4B000000).to(tl.float32, bitcast=True)
    return b0 - 8388736.0, b1 - 8388736.0, b2 - 8388736.0, b3 - 8388736.0


@triton.jit
def _bf16_words(words):
    """The four bf16 values of each int64 word (k = 4j..4j+3) as fp32: a bf16 is the top half of its fp32."""
    lo = words.to(tl.int32)
    hi = (words >> 32).to(tl.int32)
    return ((lo << 16).to(tl.float32, bitcast=True), (lo & -65536).to(tl.float32, bitcast=True),
            (hi << 16).to(tl.float32, bitcast=True), (hi & -65536).to(tl.float32, bitcast=True))


@triton.jit
def _words_fma(acc, words, x0, x1, x2, x3):
    """acc [BLOCK_N, KW] + Σ_b W[:, 4j + b] * x[4j + b] for int8 weight words and the x of their four bytes."""
    w0, w1, w2, w3 = _int8_words_to_f32(words)
    return acc + w0 * x0[None, :] + w1 * x1[None, :] + w2 * x2[None, :] + w3 * x3[None, :]


@triton.jit
def _prefetch_l2(w_ptr, w_rows, w_mask, k_start, k_end, BLOCK_K: tl.constexpr, LINES: tl.constexpr,
                 BLOCKS: tl.constexpr):
    """Ask L2 for the first BLOCKS K-blocks of this program's weight rows, one prefetch per 128-byte line
    (LINES per row and block), before the grid-dependency wait: they stream from HBM while the kernel
    before still runs, and the main loop finds them in L2. Lines past the matrix ask for w_ptr instead."""
    for b in tl.static_range(BLOCKS):
        offs = k_start + b * BLOCK_K + tl.arange(0, LINES) * (BLOCK_K // LINES)
        prefetch_l2(tl.where(w_mask & (offs < k_end)[None, :], w_rows + offs[None, :], w_ptr))


@triton.jit
def _prefetch_ahead(w_ptr, w_rows, w_rows2, w_mask, k0, k_end, BLOCK_K: tl.constexpr, LINES: tl.constexpr,
                    TWO: tl.constexpr, BLOCKS_AHEAD: tl.constexpr):
    """In the K loop at block k0: ask L2 for the rows' K-block BLOCKS_AHEAD blocks on (not past k_end), so
    HBM has that many blocks of each program in flight while only the pipeline's stages hold shared memory
    or registers. Nothing when BLOCKS_AHEAD is 0."""
    if BLOCKS_AHEAD > 0:
        _prefetch_l2(w_ptr, w_rows, w_mask, k0 + BLOCKS_AHEAD * BLOCK_K, k_end, BLOCK_K, LINES, 1)
        if TWO:
            _prefetch_l2(w_ptr, w_rows2, w_mask, k0 + BLOCKS_AHEAD * BLOCK_K, k_end, BLOCK_K, LINES, 1)


@triton.jit
def _wait_then_inputs(sums_ptr, sums_tiles, offs_m, res_ptrs, res_mask, BLOCK_M: tl.constexpr, PDL: tl.constexpr,
                      EARLY_SUMS: tl.constexpr, EARLY_RES: tl.constexpr):
    """The grid-dependency wait, then what the epilogue takes from the kernel before when read early: the
    Σx² its tiles left (`_given_sums`) and the residual stream's tile at res_ptrs (each 0.0 when not)."""
    if PDL:
        gdc_wait()
    given = 0.0
    if EARLY_SUMS:
        given = _given_sums(sums_ptr, sums_tiles, offs_m, BLOCK_M)
    res = 0.0
    if EARLY_RES:
        res = tl.load(res_ptrs, mask=res_mask, other=0.0)
    return given, res


@triton.jit
def _rows_acc(
    x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, M, stride_xm, stride_wn, up_rows, sums_ptr,
    sums_tiles, res_ptrs, res_mask,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, TWO: tl.constexpr, PDL: tl.constexpr,
    NORM: tl.constexpr, PREFETCH: tl.constexpr, LINES: tl.constexpr, WORDS: tl.constexpr,
    EARLY_SUMS: tl.constexpr, EARLY_RES: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
):
    """fp32 sum over k in [k_start, k_end) of x[m, k] * W[n, k] (* scale[n]) for the rows offs_n of W:
    [BLOCK_N] when BLOCK_M == 1 (GEMV), else [BLOCK_N, BLOCK_M] (swap-AB tl.dot, M padded). TWO: also the
    rows up_rows + offs_n, in the same K loop (twice the loads in flight), returned second. NORM: x[m, k]
    is taken times g[k] (NORM == 1; 2: g is in W already) and the third result is Σ_k x[m, k]² over the
    same range (a scalar for the GEMV, [BLOCK_M] else): the RMSNorm's statistics, gathered in the K loop.

    The GEMV keeps the next weight tile in flight while it multiplies the current one, and loads its first
    tile before the grid-dependency wait: weights never depend on the kernel before, x does. WORDS (int8
    W, bf16 x and g): the GEMV reads W as int32 words of four weights and x, g as int64 words of four
    values, and multiplies byte b of word j with x[4j + b] (`_words_fma`), BLOCK_K // 4 words a row.
    EARLY_SUMS: the third result is the Σx² another kernel's tiles left at sums_ptr (`_given_sums`), read
    right after the wait, while the first weight tiles are still on their way, not after the K loop.
    EARLY_RES: the fourth is the residual stream's tile at res_ptrs, read there too (else a placeholder).
    K_WARPS (tl.dot): each K-block is cut in K_WARPS slices, one batch of a batched dot each, which puts
    that many warps on one tile's rows; the slices' sums are added once, after the loop.
    PREFETCH_AHEAD: every iteration also asks L2 for the weight K-block that many blocks ahead (`_prefetch_ahead`)."""
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    w_rows2 = w_rows + up_rows * stride_wn
    w_mask = n_mask[:, None]
    if PREFETCH > 0:
        _prefetch_l2(w_ptr, w_rows, w_mask, k_start, k_end, BLOCK_K, LINES, PREFETCH)
        if TWO:
            _prefetch_l2(w_ptr, w_rows2, w_mask, k_start, k_end, BLOCK_K, LINES, PREFETCH)
    if BLOCK_M == 1 and WORDS:
        return _rows_acc_words(x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, stride_wn, up_rows,
                               sums_ptr, sums_tiles, res_ptrs, res_mask, BLOCK_N, BLOCK_K, TWO, PDL, NORM, EARLY_SUMS,
                               EARLY_RES, LINES, PREFETCH_AHEAD)
    elif BLOCK_M == 1:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        sq = tl.zeros((BLOCK_K,), dtype=tl.float32)
        offs_k = k_start + tl.arange(0, BLOCK_K)
        w_next = tl.load(w_rows + offs_k[None, :], mask=w_mask & (offs_k < k_end)[None, :], other=0.0)
        w2_next = w_next
        if TWO:
            w2_next = tl.load(w_rows2 + offs_k[None, :], mask=w_mask & (offs_k < k_end)[None, :], other=0.0)
        given, res = _wait_then_inputs(sums_ptr, sums_tiles, 0, res_ptrs, res_mask, BLOCK_M, PDL, EARLY_SUMS,
                                       EARLY_RES)
        for k0 in range(k_start, k_end, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            _prefetch_ahead(w_ptr, w_rows, w_rows2, w_mask, k0, k_end, BLOCK_K, LINES, TWO, PREFETCH_AHEAD)
            w = w_next
            w2 = w2_next
            ahead = offs_k + BLOCK_K
            w_next = tl.load(w_rows + ahead[None, :], mask=w_mask & (ahead < k_end)[None, :], other=0.0)
            if TWO:
                w2_next = tl.load(w_rows2 + ahead[None, :], mask=w_mask & (ahead < k_end)[None, :], other=0.0)
            xk = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
            if NORM:
                sq += xk * xk
                if NORM == 1:
                    xk = xk * tl.load(g_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
            xk = xk[None, :]
            if TWO:
                acc2 += _weight_to(w2, tl.float32, FAST_I8) * xk
            acc += _weight_to(w, tl.float32, FAST_I8) * xk
        out = tl.sum(acc, axis=1)
        out2 = tl.sum(acc2, axis=1)
        ss = tl.sum(sq, axis=0)
        if EARLY_SUMS:
            ss = given
        if HAS_SCALE:
            out *= tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
            if TWO:
                out2 *= tl.load(scale_ptr + up_rows + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        return out, out2, ss, res
    else:
        offs_m = tl.arange(0, BLOCK_M)
        m_mask = offs_m < M
        given, res = _wait_then_inputs(sums_ptr, sums_tiles, offs_m, res_ptrs, res_mask, BLOCK_M, PDL, EARLY_SUMS,
                                       EARLY_RES)
        KS: tl.constexpr = BLOCK_K // K_WARPS
        if K_WARPS > 1:
            acc = tl.zeros((K_WARPS, BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc2 = tl.zeros((K_WARPS, BLOCK_N, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc2 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        if EARLY_SUMS:
            ss = given
        # Σx² from loads of their own: summing the dot's operand (staged in shared memory by the pipeliner)
        # gave wrong rows on the H200 when other kernels shared the GPU. Where the tile is small (the BF16
        # wgmma configs) it is loaded one K-block ahead, so the sum does not wait out L2's latency in every
        # iteration; the large INT8 tiles would spill.
        AHEAD: tl.constexpr = NORM > 0 and BLOCK_M * BLOCK_K <= 2048
        x_rows = x_ptr + offs_m[:, None] * stride_xm
        if AHEAD:
            offs_k = k_start + tl.arange(0, BLOCK_K)
            xs_next = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & (offs_k < k_end)[None, :], other=0.0)
        for k0 in range(k_start, k_end, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_mask = offs_k < k_end
            _prefetch_ahead(w_ptr, w_rows, w_rows2, w_mask, k0, k_end, BLOCK_K, LINES, TWO, PREFETCH_AHEAD)
            if K_WARPS > 1:
                k3 = k0 + tl.arange(0, K_WARPS)[:, None] * KS + tl.arange(0, KS)[None, :]  # [K_WARPS, KS]
                xt = tl.load(x_ptr + offs_m[None, None, :] * stride_xm + k3[:, :, None],
                             mask=m_mask[None, None, :] & (k3 < k_end)[:, :, None], other=0.0)
            else:
                xt = tl.load(
                    x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None],
                    mask=m_mask[None, :] & k_mask[:, None], other=0.0,
                )
            if NORM:
                if AHEAD:
                    xs = xs_next.to(tl.float32)
                    ahead = offs_k + BLOCK_K
                    xs_next = tl.load(x_rows + ahead[None, :], mask=m_mask[:, None] & (ahead < k_end)[None, :],
                                      other=0.0)
                else:
                    xs = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                                 other=0.0).to(tl.float32)
                ss += tl.sum(xs * xs, axis=1)
                if NORM == 1:
                    if K_WARPS > 1:
                        g = tl.load(g_ptr + k3, mask=k3 < k_end, other=0.0).to(tl.float32)
                        xt = (xt.to(tl.float32) * g[:, :, None]).to(x_ptr.dtype.element_ty)
                    else:
                        g = tl.load(g_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
                        xt = (xt.to(tl.float32) * g[:, None]).to(x_ptr.dtype.element_ty)
            if K_WARPS > 1:
                w_mask3 = w_mask[None, :, :] & (k3 < k_end)[:, None, :]
                w = tl.load(w_rows[None, :, :] + k3[:, None, :], mask=w_mask3, other=0.0)
                if TWO:
                    w2 = tl.load(w_rows2[None, :, :] + k3[:, None, :], mask=w_mask3, other=0.0)
            else:
                w = tl.load(w_rows + offs_k[None, :], mask=w_mask & k_mask[None, :], other=0.0)
                if TWO:
                    w2 = tl.load(w_rows2 + offs_k[None, :], mask=w_mask & k_mask[None, :], other=0.0)
            if TWO:
                acc2 = _dot_acc(w2, xt, acc2, DOT_FP32, DOT_IEEE, FAST_I8)
            acc = _dot_acc(w, xt, acc, DOT_FP32, DOT_IEEE, FAST_I8)
        if K_WARPS > 1:
            acc = tl.sum(acc, axis=0)
            acc2 = tl.sum(acc2, axis=0)
        if HAS_SCALE:
            acc *= tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
            if TWO:
                acc2 *= tl.load(scale_ptr + up_rows + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
        return acc, acc2, ss, res


@triton.jit
def _rows_acc_words(x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, stride_wn, up_rows, sums_ptr,
                    sums_tiles, res_ptrs, res_mask, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TWO: tl.constexpr,
                    PDL: tl.constexpr, NORM: tl.constexpr, EARLY_SUMS: tl.constexpr, EARLY_RES: tl.constexpr,
                    LINES: tl.constexpr, PREFETCH_AHEAD: tl.constexpr):
    """`_rows_acc`'s GEMV for int8 weights read as int32 words (WORDS): same results up to summation order."""
    KW: tl.constexpr = BLOCK_K // 4
    byte_rows = w_ptr + offs_n[:, None] * stride_wn
    row_words = stride_wn // 4
    w_rows = w_ptr.to(tl.pointer_type(tl.int32)) + offs_n[:, None] * row_words
    w_rows2 = w_rows + up_rows * row_words
    x_words = x_ptr.to(tl.pointer_type(tl.int64))
    g_words = g_ptr.to(tl.pointer_type(tl.int64))
    w_mask = n_mask[:, None]
    j_end = k_end // 4
    acc = tl.zeros((BLOCK_N, KW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, KW), dtype=tl.float32)
    sq = tl.zeros((KW,), dtype=tl.float32)
    offs_j = k_start // 4 + tl.arange(0, KW)
    w_next = tl.load(w_rows + offs_j[None, :], mask=w_mask & (offs_j < j_end)[None, :], other=0)
    w2_next = w_next
    if TWO:
        w2_next = tl.load(w_rows2 + offs_j[None, :], mask=w_mask & (offs_j < j_end)[None, :], other=0)
    given, res = _wait_then_inputs(sums_ptr, sums_tiles, 0, res_ptrs, res_mask, 1, PDL, EARLY_SUMS, EARLY_RES)
    for j0 in range(k_start // 4, j_end, KW):
        offs_j = j0 + tl.arange(0, KW)
        _prefetch_ahead(w_ptr, byte_rows, byte_rows + up_rows * stride_wn, w_mask, j0 * 4, k_end, BLOCK_K, LINES, TWO,
                        PREFETCH_AHEAD)
        w = w_next
        w2 = w2_next
        ahead = offs_j + KW
        w_next = tl.load(w_rows + ahead[None, :], mask=w_mask & (ahead < j_end)[None, :], other=0)
        if TWO:
            w2_next = tl.load(w_rows2 + ahead[None, :], mask=w_mask & (ahead < j_end)[None, :], other=0)
        x0, x1, x2, x3 = _bf16_words(tl.load(x_words + offs_j, mask=offs_j < j_end, other=0))
        if NORM:
            sq += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3
            if NORM == 1:
                g0, g1, g2, g3 = _bf16_words(tl.load(g_words + offs_j, mask=offs_j < j_end, other=0))
                x0, x1, x2, x3 = x0 * g0, x1 * g1, x2 * g2, x3 * g3
        if TWO:
            acc2 = _words_fma(acc2, w2, x0, x1, x2, x3)
        acc = _words_fma(acc, w, x0, x1, x2, x3)
    out = tl.sum(acc, axis=1) * tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    out2 = tl.sum(acc2, axis=1)
    if TWO:
        out2 *= tl.load(scale_ptr + up_rows + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    ss = tl.sum(sq, axis=0)
    if EARLY_SUMS:
        ss = given
    return out, out2, ss, res


@triton.jit
def _dot_acc(w, xt, acc, DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr):
    """acc + W_tile @ x_tile^T (swap-AB), in the precision the inputs call for."""
    if DOT_FP32:
        return acc + tl.dot(_weight_to(w, tl.float32, FAST_I8), xt.to(tl.float32))
    elif DOT_IEEE:
        return tl.dot(_weight_to(w, xt.dtype, FAST_I8), xt, acc, input_precision="ieee")
    else:
        return tl.dot(_weight_to(w, xt.dtype, FAST_I8), xt, acc)


@triton.jit
def _silu_mul(g, u, dtype: tl.constexpr):
    """silu(g) * u as the SwiGLU kernel computes it from g and u stored in `dtype`."""
    g = g.to(dtype).to(tl.float32)
    u = u.to(dtype).to(tl.float32)
    return g * tl.sigmoid(g) * u


@triton.jit
def _sum_splits(part_ptr, offs_n, n_mask, M, num_splits, stride_ps, stride_pm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Σ_s part[s, m, n] over the splits in order, for one tile: [BLOCK_N] or [BLOCK_N, BLOCK_M]."""
    if BLOCK_M == 1:
        ptrs = part_ptr + offs_n
        mask = n_mask
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    else:
        offs_m = tl.arange(0, BLOCK_M)
        ptrs = part_ptr + offs_m[None, :] * stride_pm + offs_n[:, None]
        mask = n_mask[:, None] & (offs_m < M)[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for s in range(0, num_splits):
        # .cg: other programs wrote these; read them from L2, never from a stale L1 line
        acc += tl.load(ptrs + s * stride_ps, mask=mask, other=0.0, cache_modifier=".cg")
    return acc


@triton.jit
def _rms_scale(ss, inv_k, eps):
    """1 / RMS of rows whose squares sum to `ss` over 1 / inv_k features: RMSNorm's deferred factor
    (inv_k from the host: no int -> float conversion in the kernel)."""
    return tl.rsqrt(ss * inv_k + eps)


# M is never specialized (Triton compiles M = 1 and multiples of 16 apart): exact rows come from one compiled
# kernel whatever the number of rows.
@triton.jit(do_not_specialize=["M", "sums_in_tiles", "units"])
def _skinny_gemm_kernel(
    x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr, sums_in_ptr,
    sums_out_ptr,
    M, N, K, k_per_split, half, inv_k, eps, sums_in_tiles, tiles, k_blocks, units,
    stride_xm, stride_wn, stride_ym,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, SWIGLU: tl.constexpr,
    PARTIAL: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, PDL: tl.constexpr,
    PREFETCH: tl.constexpr, LINES: tl.constexpr, SUMS_OUT: tl.constexpr, ARGMAX_GROUP: tl.constexpr,
    WORDS: tl.constexpr, EARLY: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
    STREAM_K: tl.constexpr,
):
    """y[m, n] = sum_k x[m, k] * W[n, k]  (* scale[n]), in x's dtype; K in splits along program_id(1).

    With several splits (PARTIAL) each program writes fp32 partials [SPLIT_K, M, N] to part_ptr and the
    last program of an N-tile to arrive sums them in split order and writes y. SWIGLU: W is a fused
    gate_up [2 * half, K]; program n computes gate rows n and up rows half + n and y = silu(gate) * up
    [M, half] (the gate_up never leaves the kernel).

    STREAM_K: the `tiles` x `k_blocks` K-blocks of the whole product ("units", tile-major) are cut in equal
    shares, one per program along program_id(0): program p takes units [p·units // P, (p+1)·units // P),
    each tile in it from its first K-block in the share to its last. A tile one program covers whole is
    finished there; the programs sharing a tile write partials to its slots in program order (slot 0 the
    first), and the last to arrive sums them in slot order: the same bits whoever comes last. Every program
    reads the same bytes within one K-block, where whole tiles leave the SMs a wave's remainder to finish.

    NORM (1, or 2 for a unit weight already folded into W): x is RMSNorm'ed with weight g on the way in,
    y = rmsnorm(x) @ W.T: the products take x·g (x with 2) and the row's 1/RMS multiplies the sums (with
    splits, each split's Σx² goes to ss_ptr [SPLIT_K, tiles, BLOCK_M] and the last program adds them in
    split order); NORM 3: W carries g and Σx² comes from sums_in_ptr [sums_in_tiles, SUM_ROWS], summed over
    its tiles (another kernel's SUMS_OUT). RESIDUAL: y holds the residual stream and becomes
    y + x @ W.T, the product rounded to y's dtype first (as a separate add would see it); SUMS_OUT: each
    tile also writes Σ_n y[m, n]² over its columns to sums_out_ptr [tiles, SUM_ROWS].
    ARGMAX: y [M] int64 gets each row's argmax over n of the product rounded to x's dtype (the first
    column of the largest value): each tile stores its keys to tile_keys_ptr [tiles, BLOCK_M], the last
    tile of each ARGMAX_GROUP folds the group's into key_ptr's slots by atomic max, and the last group to
    arrive writes the ids and resets the slots (counters after the tiles' own, COUNTER_STRIDE apart).
    EARLY: the epilogue's inputs from the kernel before (NORM 3's sums, RESIDUAL's rows) are loaded right after
    the grid-dependency wait, in `_rows_acc`, not after the K loop.
    """
    if PDL:
        gdc_launch_dependents()  # _rows_acc waits for the kernel before once its first weights are in flight
    if STREAM_K:
        p = tl.program_id(0)
        programs = tl.num_programs(0)
        u0 = p * units // programs
        u1 = (p + 1) * units // programs
        for t in range(u0 // k_blocks, (u1 - 1) // k_blocks + 1):
            first = ((t * k_blocks + 1) * programs - 1) // units  # the program holding the tile's first unit
            last = ((t + 1) * k_blocks * programs - 1) // units   # and its last
            k_start = (tl.maximum(u0, t * k_blocks) - t * k_blocks) * BLOCK_K
            k_end = tl.minimum((tl.minimum(u1, (t + 1) * k_blocks) - t * k_blocks) * BLOCK_K, K)
            _tile(x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr,
                  sums_in_ptr, sums_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles, tiles,
                  t, p - first, last - first + 1, k_start, k_end, stride_xm, stride_wn, stride_ym,
                  HAS_SCALE, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, True, NORM, RESIDUAL,
                  ARGMAX, PDL, PREFETCH, LINES, SUMS_OUT, ARGMAX_GROUP, WORDS, EARLY, K_WARPS, PREFETCH_AHEAD)
    else:
        pid_k = tl.program_id(1)
        k_start = pid_k * k_per_split
        _tile(x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr,
              sums_in_ptr, sums_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles, tiles,
              tl.program_id(0), pid_k, tl.num_programs(1), k_start, tl.minimum(k_start + k_per_split, K),
              stride_xm, stride_wn, stride_ym,
              HAS_SCALE, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, PARTIAL, NORM, RESIDUAL,
              ARGMAX, PDL, PREFETCH, LINES, SUMS_OUT, ARGMAX_GROUP, WORDS, EARLY, K_WARPS, PREFETCH_AHEAD)


@triton.jit
def _tile(
    x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr, sums_in_ptr,
    sums_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles, tiles, pid_n, slot, slots, k_start, k_end,
    stride_xm, stride_wn, stride_ym,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, SWIGLU: tl.constexpr,
    PARTIAL: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, PDL: tl.constexpr,
    PREFETCH: tl.constexpr, LINES: tl.constexpr, SUMS_OUT: tl.constexpr, ARGMAX_GROUP: tl.constexpr,
    WORDS: tl.constexpr, EARLY: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
):
    """N-tile pid_n over K in [k_start, k_end): the products, then, where the tile's K is shared (PARTIAL and
    `slots` > 1), this share's partial in slot `slot` and the arrival count; the last share to arrive, or a
    tile computed whole, runs the epilogue."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < (half if SWIGLU else N)
    LOOP_NORM: tl.constexpr = NORM if NORM < 3 else 0
    EARLY_SUMS: tl.constexpr = EARLY and NORM == 3
    EARLY_RES: tl.constexpr = EARLY and RESIDUAL
    if BLOCK_M == 1:
        y_ptrs = y_ptr + offs_n
        part_ptrs = part_ptr + slot * M * N + offs_n
        mask = n_mask
        offs_m = 0
    else:
        offs_m = tl.arange(0, BLOCK_M)
        y_ptrs = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
        part_ptrs = part_ptr + slot * M * N + offs_m[None, :] * N + offs_n[:, None]
        mask = n_mask[:, None] & (offs_m < M)[None, :]
    acc, up, ss, res = _rows_acc(x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, M, stride_xm,
                                 stride_wn, half, sums_in_ptr, sums_in_tiles, y_ptrs, mask, HAS_SCALE, BLOCK_M,
                                 BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, PDL, LOOP_NORM, PREFETCH,
                                 LINES, WORDS, EARLY_SUMS, EARLY_RES, K_WARPS, PREFETCH_AHEAD)
    done = True
    if PARTIAL:
        done = slots == 1
        if slots > 1:
            tl.store(part_ptrs, acc, mask=mask)
            if SWIGLU:
                tl.store(part_ptrs + half, up, mask=mask)
            if LOOP_NORM:
                tl.store(ss_ptr + (slot * tiles + pid_n) * BLOCK_M + offs_m, ss)
            # Every thread's partial stores come before the counter's release; the program that counts last
            # acquires them all, sums the shares, and leaves the counter at 0 for the next launch or replay.
            tl.debug_barrier()
            arrived = tl.atomic_add(counters_ptr + pid_n, 1, sem="acq_rel")
            done = arrived == slots - 1
            if done:
                acc = _sum_splits(part_ptr, offs_n, n_mask, M, slots, M * N, N, BLOCK_M, BLOCK_N)
                if SWIGLU:
                    up = _sum_splits(part_ptr + half, offs_n, n_mask, M, slots, M * N, N, BLOCK_M, BLOCK_N)
                if LOOP_NORM:
                    ss = tl.load(ss_ptr + pid_n * BLOCK_M + offs_m, cache_modifier=".cg")
                    for s in range(1, slots):
                        ss += tl.load(ss_ptr + (s * tiles + pid_n) * BLOCK_M + offs_m, cache_modifier=".cg")
                tl.atomic_xchg(counters_ptr + pid_n, 0, sem="relaxed")
    if done:
        if NORM == 3:
            if not EARLY_SUMS:
                ss = _given_sums(sums_in_ptr, sums_in_tiles, offs_m, BLOCK_M)
        if NORM:
            r = _rms_scale(ss, inv_k, eps)
            if BLOCK_M > 1:
                r = r[None, :]
            acc *= r
            if SWIGLU:
                up *= r
        if SWIGLU:
            acc = _silu_mul(acc, up, y_ptr.dtype.element_ty)
        if ARGMAX:
            _argmax_epilogue(acc.to(x_ptr.dtype.element_ty).to(tl.float32), offs_n, n_mask, offs_m, M, y_ptr,
                             key_ptr, tile_keys_ptr, counters_ptr + tiles, pid_n, tiles, BLOCK_M, ARGMAX_GROUP)
        else:
            out = acc.to(y_ptr.dtype.element_ty)
            if RESIDUAL:
                if EARLY_RES:
                    stream = res
                else:
                    stream = tl.load(y_ptrs, mask=mask, other=0.0)
                out = (out.to(tl.float32) + stream.to(tl.float32)).to(y_ptr.dtype.element_ty)
            tl.store(y_ptrs, out, mask=mask)
            if SUMS_OUT:
                sq = out.to(tl.float32)
                sq = tl.where(mask, sq * sq, 0.0)
                tl.store(sums_out_ptr + pid_n * SUM_ROWS + offs_m, tl.sum(sq, axis=0))


@triton.jit
def _given_sums(sums_ptr, tiles, offs_m, BLOCK_M: tl.constexpr):
    """Σ over another kernel's tiles of its per-tile Σx² of each row ([BLOCK_M], or a scalar): SUM_CHUNK
    tiles per load, so the epilogue waits for a few L2 round trips, not one per tile."""
    chunk = tl.arange(0, SUM_CHUNK)
    if BLOCK_M == 1:
        acc = tl.zeros([SUM_CHUNK], tl.float32)
        for t0 in range(0, tiles, SUM_CHUNK):
            acc += tl.load(sums_ptr + (t0 + chunk) * SUM_ROWS, mask=t0 + chunk < tiles, other=0.0,
                           cache_modifier=".cg")
    else:
        acc = tl.zeros([SUM_CHUNK, BLOCK_M], tl.float32)
        for t0 in range(0, tiles, SUM_CHUNK):
            acc += tl.load(sums_ptr + (t0 + chunk)[:, None] * SUM_ROWS + offs_m[None, :],
                           mask=(t0 + chunk < tiles)[:, None], other=0.0, cache_modifier=".cg")
    return tl.sum(acc, axis=0)


@triton.jit
def _argmax_epilogue(vals, offs_n, n_mask, offs_m, M, ids_ptr, key_ptr, tile_keys_ptr, counter_ptr, pid, tiles,
                     BLOCK_M: tl.constexpr, GROUP: tl.constexpr):
    """Each tile stores its rows' keys; the last tile of each GROUP to arrive folds the group's keys into the
    argmax slots, and the last group writes the ids and resets the slots. Counting in groups keeps the
    arrivals on one counter to GROUP (a vocabulary of 152k rows is ~38k tiles: their atomics on one
    address cost more than the LM head's weights take to stream)."""
    if BLOCK_M == 1:
        tl.store(tile_keys_ptr + pid, tl.max(argmax_keys(vals, offs_n, n_mask), axis=0))
    else:
        cols = tl.broadcast_to(offs_n[:, None], vals.shape)
        keys = argmax_keys(vals, cols, tl.broadcast_to(n_mask[:, None], vals.shape))
        tl.store(tile_keys_ptr + pid * BLOCK_M + offs_m, tl.max(keys, axis=0))
    # Every thread's stores come before the counter's release; the tile that counts last acquires them.
    tl.debug_barrier()
    group = pid // GROUP
    first = group * GROUP
    groups = tl.cdiv(tiles, GROUP)
    group_counter = counter_ptr + group * COUNTER_STRIDE  # a line each: arrivals on different counters overlap
    # Arrivals only release (no acquire, no L1 invalidation, on every tile); the last one then acquires them.
    arrived = tl.atomic_add(group_counter, 1, sem="release")
    if arrived == tl.minimum(GROUP, tiles - first) - 1:
        tl.atomic_add(group_counter, 0, sem="acquire")
        t = tl.arange(0, KEY_CHUNK)
        if BLOCK_M == 1:
            best = tl.full([KEY_CHUNK], -9223372036854775808, tl.int64)
            for c in range(0, GROUP, KEY_CHUNK):
                tile_ids = first + c + t
                best = tl.maximum(best, tl.load(tile_keys_ptr + tile_ids, mask=(c + t < GROUP) & (tile_ids < tiles),
                                                other=-9223372036854775808, cache_modifier=".cg"))
            tl.atomic_max(key_ptr, tl.max(best, axis=0), sem="relaxed")
        else:
            best = tl.full([KEY_CHUNK, BLOCK_M], -9223372036854775808, tl.int64)
            for c in range(0, GROUP, KEY_CHUNK):
                tile_ids = first + c + t
                ok = (c + t < GROUP) & (tile_ids < tiles)
                best = tl.maximum(best, tl.load(tile_keys_ptr + tile_ids[:, None] * BLOCK_M + offs_m[None, :],
                                                mask=ok[:, None], other=-9223372036854775808, cache_modifier=".cg"))
            tl.atomic_max(key_ptr + offs_m, tl.max(best, axis=0), mask=offs_m < M, sem="relaxed")
        tl.atomic_xchg(group_counter, 0, sem="relaxed")
        tl.debug_barrier()
        last_counter = counter_ptr + groups * COUNTER_STRIDE
        if tl.atomic_add(last_counter, 1, sem="acq_rel") == groups - 1:
            if BLOCK_M == 1:
                tl.store(ids_ptr, key_column(tl.atomic_xchg(key_ptr, -9223372036854775808)))
            else:
                live = offs_m < M
                final = tl.atomic_xchg(key_ptr + offs_m, tl.full(offs_m.shape, -9223372036854775808, tl.int64),
                                       mask=live)
                tl.store(ids_ptr + offs_m, key_column(final), mask=live)
            tl.atomic_xchg(last_counter, 0, sem="relaxed")


@lru_cache(maxsize=1024)
def stream_k_slots(tiles: int, k_blocks: int, programs: int) -> int:
    """The most programs that share one tile when `programs` take equal shares of tiles × k_blocks K-blocks
    (`_skinny_gemm_kernel`'s STREAM_K): the partial slots a tile needs."""
    units = tiles * k_blocks

    def holder(u):  # the program whose share holds unit u
        return ((u + 1) * programs - 1) // units
    return max(holder((t + 1) * k_blocks - 1) - holder(t * k_blocks) + 1 for t in range(tiles))


def _num_sms(device: torch.device) -> int:
    """The SMs stream-K shares the product among (a guess where there is no GPU)."""
    if device.type != "cuda":
        return NUM_SMS_GUESS
    return _device_info(device.index if device.index is not None else torch.cuda.current_device())[1]


def _pow2_at_least(v: int, lo: int = 16) -> int:
    return max(lo, 1 << (max(v, 1) - 1).bit_length())


def reads_words(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None, norm: torch.Tensor | None) -> bool:
    """Whether a GEMV (M = 1) of these operands reads int8 W in int32 words and bf16 x (and norm weight) in
    int64 words of four (`_rows_acc_words`): rows a multiple of 4 bytes, x and g 8-byte aligned."""
    return (scale is not None and x.dtype == torch.bfloat16 and x.shape[-1] % 4 == 0 and w.stride(0) % 4 == 0
            and w.data_ptr() % 16 == 0 and x.data_ptr() % 8 == 0
            and (norm is None or (norm.dtype == torch.bfloat16 and norm.data_ptr() % 8 == 0)))


def skinny_gemm(
    x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None = None, config: GemmConfig | None = None,
    exact: bool = False, swiglu: bool = False, norm: torch.Tensor | None = None, eps: float = 1e-6,
    residual: torch.Tensor | None = None, unit_norm: bool = False, argmax: bool = False, row_sums: bool = False,
    norm_sums: torch.Tensor | None = None,
):
    """y = x @ W.T for x [M <= 16, K] and W [N, K] (float, or int8 with `scale` [N]); y in x.dtype.

    `config` overrides the tuned/heuristic launch config (the tuner and the tests use it). `exact`: each
    row's bits independent of M (one instruction path and one config for every M). `swiglu`: W is a fused
    gate_up [2I, K] and y = silu(gate) * up [M, I], with the bits of `silu_mul(skinny_gemm(x, W))` in one
    launch and no gate_up written. `norm` [K]: y = rms_norm(x, norm, eps) @ W.T without a normed x written
    (the 1/RMS is applied to the sums, so bits differ from the two-launch path by rounding). `residual`
    [M, N]: residual += x @ W.T in place (the product rounded to x.dtype first), and residual is returned.
    `unit_norm`: y = rms_norm(x, 1, eps) @ W.T, for a W whose columns already carry the norm's weight
    (`linear.fold_norm_weight`): the x tiles go to the tensor cores untouched, only their squares are summed.
    `argmax`: y [M] int64, each row's `torch.argmax` of the product rounded to x.dtype, with no product
    written (the LM head of a greedy step).
    `row_sums` (with `residual`): returns (residual, sums), sums [tiles, 16] fp32 holding each tile's Σ of
    the new residual's squares per row. `norm_sums`: such sums of x's rows, for a W that carries the norm's
    weight: y = rms_norm(x, 1, eps) @ W.T with Σx² summed from them instead of from x.
    """
    m, k = x.shape
    n = w.shape[0]
    assert 1 <= m <= MAX_M, f"skinny_gemm takes M <= {MAX_M}, got {m}"
    assert w.shape[1] == k and w.stride(1) == 1, (tuple(w.shape), w.stride())
    assert (w.dtype == torch.int8) == (scale is not None), "int8 weights need a scale, float weights none"
    assert not swiglu or n % 2 == 0, f"a fused gate_up has an even number of rows, got {n}"
    assert norm is None or (norm.shape == (k,) and norm.is_contiguous()), "norm takes a contiguous weight [K]"
    assert not (unit_norm and norm is not None), "unit_norm means the norm's weight is in W: pass no `norm`"
    assert not (argmax and (swiglu or residual is not None)), "argmax takes a plain projection (the LM head)"
    assert not row_sums or residual is not None, "row_sums are the new residual stream's: pass `residual`"
    if norm_sums is not None:
        assert norm is None and not unit_norm, "norm_sums means the norm's weight is in W: pass no `norm`"
        assert norm_sums.dim() == 2 and norm_sums.shape[1] == MAX_M and norm_sums.dtype == torch.float32 \
            and norm_sums.is_contiguous(), f"norm_sums must be [tiles, {MAX_M}] fp32, got {tuple(norm_sums.shape)}"
    norm_mode = 1 if norm is not None else 2 if unit_norm else 3 if norm_sums is not None else 0
    if residual is not None:
        assert not swiglu, "a residual add follows o_proj or down_proj, not the gate_up"
        assert residual.shape == (m, n) and residual.dtype == x.dtype and residual.stride(1) == 1, \
            f"residual must be [{m}, {n}] {x.dtype} with contiguous rows, got {tuple(residual.shape)} {residual.dtype}"
    if x.stride(1) != 1:
        x = x.contiguous()
    block_m = 16 if exact or m > 1 else 1
    cfg = config or get_config(n, k, MAX_M if exact else m, "int8" if scale is not None else "bf16", x.device,
                               argmax)
    half = n // 2
    sums_out = None
    if argmax:
        y = torch.empty(m, device=x.device, dtype=torch.int64)
    else:
        y = residual if residual is not None else torch.empty(m, half if swiglu else n, device=x.device,
                                                              dtype=x.dtype)

    words = block_m == 1 and reads_words(x, w, scale, norm)
    early = EARLY_EPILOGUE.on and (norm_mode == 3 or residual is not None)

    def launch(c: GemmConfig):
        nonlocal sums_out
        block_k = min(c.block_k, _pow2_at_least(k))
        tiles = triton.cdiv(half if swiglu else n, c.block_n)
        k_blocks = triton.cdiv(k, block_k)
        # tl.dot tiles only: the argmax epilogue counts a tile per program, and the GEMV (M = 1 configs launch
        # 2-5 programs an SM already) in the tile loop fails Triton 3.6's layout pass for sm_90
        stream = bool(c.stream_k) and not argmax and block_m > 1
        if stream:
            programs = min(c.stream_k * _num_sms(x.device), tiles * k_blocks)
            grid, k_per_split = (programs, 1), k
            slots = stream_k_slots(tiles, k_blocks, programs)
        else:
            k_per_split = triton.cdiv(triton.cdiv(k, c.split_k), block_k) * block_k
            slots = triton.cdiv(k, k_per_split)  # never an empty split
            grid = (tiles, slots)
        shared = slots > 1
        part = torch.empty(slots, m, n, device=x.device, dtype=torch.float32) if shared else y
        groups = triton.cdiv(tiles, ARGMAX_GROUP) if argmax else 0
        counters = (arrival_counters(x.device, tiles + (groups + 1) * COUNTER_STRIDE.value)
                    if shared or argmax else part)
        tile_keys = torch.empty(tiles, block_m, device=x.device, dtype=torch.int64) if argmax else part
        sums = (torch.empty(slots, tiles, block_m, device=x.device, dtype=torch.float32)
                if norm_mode in (1, 2) and shared else part)
        if row_sums:
            sums_out = torch.empty(tiles, MAX_M, device=x.device, dtype=torch.float32)
        _skinny_gemm_kernel[grid](
            x, w, scale if scale is not None else w, norm if norm is not None else x, y, part, sums, counters,
            argmax_slots(x.device, MAX_M) if argmax else y, tile_keys,
            norm_sums if norm_sums is not None else part, sums_out if row_sums else part,
            m, n, k, k_per_split, half, 1.0 / k, eps, norm_sums.shape[0] if norm_sums is not None else 0,
            tiles, k_blocks, tiles * k_blocks,
            x.stride(0), w.stride(0), y.stride(0),
            HAS_SCALE=scale is not None, BLOCK_M=block_m, BLOCK_N=c.block_n, BLOCK_K=block_k,
            DOT_FP32=INTERPRET, DOT_IEEE=x.dtype == torch.float32, FAST_I8=scale is not None and c.fast_i8,
            SWIGLU=swiglu, PARTIAL=shared, NORM=norm_mode, RESIDUAL=residual is not None, ARGMAX=argmax,
            PREFETCH=0 if INTERPRET else min(c.prefetch_k, triton.cdiv(k_per_split, block_k)),
            LINES=max(1, block_k * w.element_size() // 128), SUMS_OUT=row_sums, ARGMAX_GROUP=ARGMAX_GROUP,
            WORDS=words and c.fast_i8, EARLY=early, K_WARPS=_k_warps(c, block_m, block_k),
            PREFETCH_AHEAD=0 if INTERPRET else c.prefetch_ahead, STREAM_K=stream,
            num_warps=c.num_warps, num_stages=c.num_stages, **launch_options(x.device),
        )

    key = ("skinny_gemm", n, k, block_m, x.dtype, w.dtype, cfg, x.device, swiglu, norm_mode, residual is not None,
           argmax, row_sums, words, early)
    launch_fitted(key, shrink(cfg, blocks=(("block_k", 32), ("block_n", 16))), launch)
    return (y, sums_out) if row_sums else y
