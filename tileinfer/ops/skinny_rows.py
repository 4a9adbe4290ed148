"""The skinny GEMM's K loops: the fp32 products of a tile's rows of W with x over a range of K
(`_rows_acc`), the part of `skinny_gemm._skinny_gemm_kernel` that streams the weights.

M = 1 multiplies elementwise (the GEMV), keeping the next weight tile in flight; M in 2..16 pads M to 16
and uses `tl.dot` with W as the left operand (swap-AB, so N fills the MMA's M side), its tiles staged in
shared memory by Triton's pipeliner. INT8 tiles are converted to x's dtype in registers (the per-channel
scale waits for the epilogue), avoiding the int->float unit (16 ops/clk/SM on Hopper): with plain casts
the INT8 GEMV ran at 2.3 TB/s effective on an H200 against 3.9 for BF16, i.e. it was conversion-bound.
A folded RMSNorm's Σx² is summed in the same loop, or read from the tiles of the kernel before
(`_given_sums`). L2 prefetches before the grid-dependency wait (`_prefetch_l2`) and inside the loop
(`_prefetch_ahead`) put more HBM reads in flight than the loop's registers or stages hold.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from tileinfer.ops import INTERPRET
from tileinfer.ops.flow import FLOW_CHUNK, flow_ready
from tileinfer.ops.pdl import prefetch_l2

MAX_M = 16
SUM_ROWS: tl.constexpr = tl.constexpr(MAX_M)  # rows of a row_sums tensor [tiles, SUM_ROWS]
SUM_CHUNK: tl.constexpr = tl.constexpr(32)  # tiles of row sums read per load
I8_ASM: tl.constexpr = tl.constexpr(not INTERPRET)  # PTX for the int8 conversion (the interpreter has none)


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
    sums_tiles, res_ptrs, res_mask, flow_ptr, K,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, TWO: tl.constexpr, PDL: tl.constexpr,
    NORM: tl.constexpr, PREFETCH: tl.constexpr, LINES: tl.constexpr, WORDS: tl.constexpr,
    EARLY_SUMS: tl.constexpr, EARLY_RES: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
    FLOW_IN: tl.constexpr,
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
    PREFETCH_AHEAD: every iteration also asks L2 for the weight K-block that many blocks ahead (`_prefetch_ahead`).
    FLOW_IN: x is another GEMM's output still being written (`tileinfer.ops.flow`): no grid-dependency wait;
    the GEMV waits for each K-block's columns of x (flow_ptr's counters, read a block's chunks at once) before
    it reads them from L2, the tl.dot path for its whole K range before its (pipelined) loop. The int8 words'
    GEMV waits between loops (a block per trip of an outer one): waiting inside its K loop took it up to 80
    more registers a thread and a third of its blocks per SM (`tileinfer profile compiled`); the BF16 GEMV
    keeps the wait inside, where the outer loop cost it more."""
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    w_rows2 = w_rows + up_rows * stride_wn
    w_mask = n_mask[:, None]
    if PREFETCH > 0:
        _prefetch_l2(w_ptr, w_rows, w_mask, k_start, k_end, BLOCK_K, LINES, PREFETCH)
        if TWO:
            _prefetch_l2(w_ptr, w_rows2, w_mask, k_start, k_end, BLOCK_K, LINES, PREFETCH)
    if BLOCK_M == 1 and WORDS:
        return _rows_acc_words(x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, stride_wn, up_rows,
                               sums_ptr, sums_tiles, res_ptrs, res_mask, flow_ptr, K, BLOCK_N, BLOCK_K, TWO, PDL, NORM,
                               EARLY_SUMS, EARLY_RES, LINES, PREFETCH_AHEAD, FLOW_IN)
    elif BLOCK_M == 1:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        sq = tl.zeros((BLOCK_K,), dtype=tl.float32)
        offs_k = k_start + tl.arange(0, BLOCK_K)
        w_next, w2_next = _weight_tiles(w_rows, w_rows2, w_mask, offs_k, k_end, 0.0, TWO)
        given, res = _wait_then_inputs(sums_ptr, sums_tiles, 0, res_ptrs, res_mask, BLOCK_M, PDL and not FLOW_IN,
                                       EARLY_SUMS, EARLY_RES)
        SCAN: tl.constexpr = 2 * max(BLOCK_K, FLOW_CHUNK) // FLOW_CHUNK  # the flow chunks a block can touch
        ready = k_start
        for k0 in range(k_start, k_end, BLOCK_K):
            if FLOW_IN:
                ready = flow_ready(flow_ptr, ready, tl.minimum(k0 + BLOCK_K, k_end), K, 1, SCAN)
            acc, acc2, sq, w_next, w2_next = _gemv_step(
                x_ptr, w_ptr, g_ptr, w_rows, w_rows2, w_mask, k0, k_end, acc, acc2, sq, w_next, w2_next,
                BLOCK_K, TWO, NORM, FAST_I8, LINES, PREFETCH_AHEAD, FLOW_IN)
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
        given, res = _wait_then_inputs(sums_ptr, sums_tiles, offs_m, res_ptrs, res_mask, BLOCK_M,
                                       PDL and not FLOW_IN, EARLY_SUMS, EARLY_RES)
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
        if FLOW_IN:  # the whole range at once: a wait inside the loop would leave it unpipelined (no smem ring)
            flow_ready(flow_ptr, k_start, k_end, K, M)
        if AHEAD:
            offs_k = k_start + tl.arange(0, BLOCK_K)
            xs_next = _x_rows(x_rows, offs_k, m_mask, k_end, FLOW_IN)
        for k0 in range(k_start, k_end, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_mask = offs_k < k_end
            _prefetch_ahead(w_ptr, w_rows, w_rows2, w_mask, k0, k_end, BLOCK_K, LINES, TWO, PREFETCH_AHEAD)
            if K_WARPS > 1:
                k3 = k0 + tl.arange(0, K_WARPS)[:, None] * KS + tl.arange(0, KS)[None, :]  # [K_WARPS, KS]
                x3 = x_ptr + offs_m[None, None, :] * stride_xm + k3[:, :, None]
                x3_mask = m_mask[None, None, :] & (k3 < k_end)[:, :, None]
                if FLOW_IN:
                    xt = tl.load(x3, mask=x3_mask, other=0.0, cache_modifier=".cg")
                else:
                    xt = tl.load(x3, mask=x3_mask, other=0.0)
            else:
                x2 = x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None]
                x2_mask = m_mask[None, :] & k_mask[:, None]
                if FLOW_IN:
                    xt = tl.load(x2, mask=x2_mask, other=0.0, cache_modifier=".cg")
                else:
                    xt = tl.load(x2, mask=x2_mask, other=0.0)
            if NORM:
                if AHEAD:
                    xs = xs_next.to(tl.float32)
                    xs_next = _x_rows(x_rows, offs_k + BLOCK_K, m_mask, k_end, FLOW_IN)
                else:
                    xs = _x_rows(x_rows, offs_k, m_mask, k_end, FLOW_IN).to(tl.float32)
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
def _weight_tiles(w_rows, w_rows2, w_mask, offs, end, w2_keep, TWO: tl.constexpr):
    """The weight tiles at column offsets offs (0 from end on): the rows' and, for two halves (TWO), the second
    half's; without TWO the second is w2_keep, unchanged, so a loop carries no second tile."""
    mask = w_mask & (offs < end)[None, :]
    w = tl.load(w_rows + offs[None, :], mask=mask, other=0)
    w2 = w2_keep
    if TWO:
        w2 = tl.load(w_rows2 + offs[None, :], mask=mask, other=0)
    return w, w2


@triton.jit
def _gemv_step(x_ptr, w_ptr, g_ptr, w_rows, w_rows2, w_mask, k0, k_end, acc, acc2, sq, w_next, w2_next,
               BLOCK_K: tl.constexpr, TWO: tl.constexpr, NORM: tl.constexpr, FAST_I8: tl.constexpr,
               LINES: tl.constexpr, PREFETCH_AHEAD: tl.constexpr, FLOW_IN: tl.constexpr):
    """One K-block of the GEMV at k0: the next weight tile asked for, this one's products added (x read from
    L2 when another kernel still writes it, FLOW_IN). Returns the sums and the tiles in flight."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    _prefetch_ahead(w_ptr, w_rows, w_rows2, w_mask, k0, k_end, BLOCK_K, LINES, TWO, PREFETCH_AHEAD)
    w, w2 = w_next, w2_next
    w_next, w2_next = _weight_tiles(w_rows, w_rows2, w_mask, offs_k + BLOCK_K, k_end, w2_next, TWO)
    if FLOW_IN:
        xk = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0, cache_modifier=".cg").to(tl.float32)
    else:
        xk = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
    if NORM:
        sq += xk * xk
        if NORM == 1:
            xk = xk * tl.load(g_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
    xk = xk[None, :]
    if TWO:
        acc2 += _weight_to(w2, tl.float32, FAST_I8) * xk
    acc += _weight_to(w, tl.float32, FAST_I8) * xk
    return acc, acc2, sq, w_next, w2_next


@triton.jit
def _words_step(x_words, g_words, w_ptr, byte_rows, w_rows, w_rows2, w_mask, up_rows, stride_wn, j0, j_end, k_end,
                acc, acc2, sq, w_next, w2_next, BLOCK_K: tl.constexpr, KW: tl.constexpr, TWO: tl.constexpr,
                NORM: tl.constexpr, LINES: tl.constexpr, PREFETCH_AHEAD: tl.constexpr, FLOW_IN: tl.constexpr):
    """`_gemv_step` for int8 weight words (`_rows_acc_words`), at word j0."""
    offs_j = j0 + tl.arange(0, KW)
    _prefetch_ahead(w_ptr, byte_rows, byte_rows + up_rows * stride_wn, w_mask, j0 * 4, k_end, BLOCK_K, LINES, TWO,
                    PREFETCH_AHEAD)
    w, w2 = w_next, w2_next
    w_next, w2_next = _weight_tiles(w_rows, w_rows2, w_mask, offs_j + KW, j_end, w2_next, TWO)
    if FLOW_IN:
        x0, x1, x2, x3 = _bf16_words(tl.load(x_words + offs_j, mask=offs_j < j_end, other=0, cache_modifier=".cg"))
    else:
        x0, x1, x2, x3 = _bf16_words(tl.load(x_words + offs_j, mask=offs_j < j_end, other=0))
    if NORM:
        sq += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3
        if NORM == 1:
            g0, g1, g2, g3 = _bf16_words(tl.load(g_words + offs_j, mask=offs_j < j_end, other=0))
            x0, x1, x2, x3 = x0 * g0, x1 * g1, x2 * g2, x3 * g3
    if TWO:
        acc2 = _words_fma(acc2, w2, x0, x1, x2, x3)
    acc = _words_fma(acc, w, x0, x1, x2, x3)
    return acc, acc2, sq, w_next, w2_next


@triton.jit
def _x_rows(x_rows, offs_k, m_mask, k_end, FLOW_IN: tl.constexpr):
    """x's [BLOCK_M, BLOCK_K] block at offs_k (0 past k_end); from L2 (.cg) when another kernel is still
    writing x (FLOW_IN): never from an L1 line an earlier read left."""
    mask = m_mask[:, None] & (offs_k < k_end)[None, :]
    if FLOW_IN:
        return tl.load(x_rows + offs_k[None, :], mask=mask, other=0.0, cache_modifier=".cg")
    else:
        return tl.load(x_rows + offs_k[None, :], mask=mask, other=0.0)


@triton.jit
def _rows_acc_words(x_ptr, w_ptr, scale_ptr, g_ptr, offs_n, n_mask, k_start, k_end, stride_wn, up_rows, sums_ptr,
                    sums_tiles, res_ptrs, res_mask, flow_ptr, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    TWO: tl.constexpr, PDL: tl.constexpr, NORM: tl.constexpr, EARLY_SUMS: tl.constexpr,
                    EARLY_RES: tl.constexpr, LINES: tl.constexpr, PREFETCH_AHEAD: tl.constexpr, FLOW_IN: tl.constexpr):
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
    w_next, w2_next = _weight_tiles(w_rows, w_rows2, w_mask, offs_j, j_end, 0.0, TWO)
    given, res = _wait_then_inputs(sums_ptr, sums_tiles, 0, res_ptrs, res_mask, 1, PDL and not FLOW_IN, EARLY_SUMS,
                                   EARLY_RES)
    if FLOW_IN:  # each block's wait outside the loop that reads it: inside, it costs a third of the registers
        SCAN: tl.constexpr = 2 * max(BLOCK_K, FLOW_CHUNK) // FLOW_CHUNK
        ready = k_start
        for s0 in range(k_start // 4, j_end, KW):
            block_end = tl.minimum(s0 + KW, j_end)
            ready = flow_ready(flow_ptr, ready, tl.minimum(block_end * 4, k_end), K, 1, SCAN)
            for j0 in range(s0, block_end, KW):  # one trip the compiler cannot see as one
                acc, acc2, sq, w_next, w2_next = _words_step(
                    x_words, g_words, w_ptr, byte_rows, w_rows, w_rows2, w_mask, up_rows, stride_wn, j0, j_end, k_end,
                    acc, acc2, sq, w_next, w2_next, BLOCK_K, KW, TWO, NORM, LINES, PREFETCH_AHEAD, True)
    else:
        for j0 in range(k_start // 4, j_end, KW):
            acc, acc2, sq, w_next, w2_next = _words_step(
                x_words, g_words, w_ptr, byte_rows, w_rows, w_rows2, w_mask, up_rows, stride_wn, j0, j_end, k_end,
                acc, acc2, sq, w_next, w2_next, BLOCK_K, KW, TWO, NORM, LINES, PREFETCH_AHEAD, False)
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
