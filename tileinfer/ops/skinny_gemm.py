"""Skinny GEMM for M <= 16 (decode and DFlash verify/draft): y = x @ W.T, weights streamed once.

At these M every linear is a pass over its weight, so the kernel is built for bandwidth: each program
owns BLOCK_N rows of W and one of SPLIT_K slices of K, loads [BLOCK_N, BLOCK_K] tiles contiguous
along K (16-byte loads), and accumulates in fp32 (the K loops: `skinny_rows`). The small Qwen3-4B shapes
(o 2560x4096, down 2560x9728) have too few row tiles to fill 132 SMs, hence split-K: each split writes
fp32 partials, and the last program of an N-tile to arrive (an arrival counter it resets,
tileinfer.ops.counters) sums them in split order: deterministic, one launch, and CUDA-graph safe. A
config's `stream_k` instead gives programs equal shares of all tiles' K-blocks (the kernel's STREAM_K).

Exact mode (`exact=True`) makes a row's result independent of how many rows share the call: every
M in 1..16 takes the tl.dot path with M padded to 16, and the config (tiles, split-K, warps, stages)
is chosen by N and K alone. A row computed in a 16-token DFlash verify pass then has the bits it has
in a one-token decode step, which is what makes greedy DFlash return exactly greedy decoding's tokens.

The same kernel serves INT8 weights (HAS_SCALE): int8 tiles are converted to x's dtype in registers
and the per-channel scale is applied in the epilogue. `skinny_gemm_ref` is the definition.

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

from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops import INTERPRET
from tileinfer.ops.argmax_keys import argmax_keys, key_column
from tileinfer.ops.counters import argmax_slots, arrival_counters
from tileinfer.ops.fit import launch_fitted, shrink
from tileinfer.ops.flow import consumed, consumer_counters, consumer_partials, flow_finish, flow_signal, produced
from tileinfer.ops.gemm_configs import GemmConfig, get_config, num_sms
from tileinfer.ops.pdl import launch_options
from tileinfer.ops.skinny_rows import MAX_M, SUM_ROWS, _given_sums, _rows_acc
from tileinfer.ops.switches import Switch

ARGMAX_GROUP = 256  # tiles per argmax arrival counter
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
    sums_out_ptr, flow_in_ptr, flow_out_ptr,
    M, N, K, k_per_split, half, inv_k, eps, sums_in_tiles, tiles, k_blocks, units,
    stride_xm, stride_wn, stride_ym,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, SWIGLU: tl.constexpr,
    PARTIAL: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, PDL: tl.constexpr,
    PREFETCH: tl.constexpr, LINES: tl.constexpr, SUMS_OUT: tl.constexpr, ARGMAX_GROUP: tl.constexpr,
    WORDS: tl.constexpr, EARLY: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
    STREAM_K: tl.constexpr, FLOW: tl.constexpr,
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
    FLOW (`tileinfer.ops.flow`), bits: 1, x is the output of the kernel launched just before, read as
    flow_in_ptr's counters say its columns are stored (no grid-dependency wait before the K loop); the last
    program to finish clears them, and each waits for the producer's grid before it exits. 2, this GEMM is
    such a producer: each finished tile counts its stored columns into flow_out_ptr. 3, both (a chain).
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
                  sums_in_ptr, sums_out_ptr, flow_in_ptr, flow_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles,
                  tiles, t, p - first, last - first + 1, k_start, k_end, stride_xm, stride_wn, stride_ym,
                  HAS_SCALE, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, True, NORM, RESIDUAL,
                  ARGMAX, PDL, PREFETCH, LINES, SUMS_OUT, ARGMAX_GROUP, WORDS, EARLY, K_WARPS, PREFETCH_AHEAD, FLOW)
    else:
        pid_k = tl.program_id(1)
        k_start = pid_k * k_per_split
        _tile(x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr,
              sums_in_ptr, sums_out_ptr, flow_in_ptr, flow_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles,
              tiles, tl.program_id(0), pid_k, tl.num_programs(1), k_start, tl.minimum(k_start + k_per_split, K),
              stride_xm, stride_wn, stride_ym,
              HAS_SCALE, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, PARTIAL, NORM, RESIDUAL,
              ARGMAX, PDL, PREFETCH, LINES, SUMS_OUT, ARGMAX_GROUP, WORDS, EARLY, K_WARPS, PREFETCH_AHEAD, FLOW)
    if FLOW & 1:
        tl.debug_barrier()
        flow_finish(flow_in_ptr, K, tl.num_programs(0) * tl.num_programs(1))
        if PDL:
            gdc_wait()  # this grid's completion implies the producer's (the chain's ordering)


@triton.jit
def _tile(
    x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, part_ptr, ss_ptr, counters_ptr, key_ptr, tile_keys_ptr, sums_in_ptr,
    sums_out_ptr, flow_in_ptr, flow_out_ptr, M, N, K, half, inv_k, eps, sums_in_tiles, tiles, pid_n, slot, slots,
    k_start, k_end,
    stride_xm, stride_wn, stride_ym,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_IEEE: tl.constexpr, FAST_I8: tl.constexpr, SWIGLU: tl.constexpr,
    PARTIAL: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, PDL: tl.constexpr,
    PREFETCH: tl.constexpr, LINES: tl.constexpr, SUMS_OUT: tl.constexpr, ARGMAX_GROUP: tl.constexpr,
    WORDS: tl.constexpr, EARLY: tl.constexpr, K_WARPS: tl.constexpr, PREFETCH_AHEAD: tl.constexpr,
    FLOW: tl.constexpr,
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
                                 stride_wn, half, sums_in_ptr, sums_in_tiles, y_ptrs, mask, flow_in_ptr, K, HAS_SCALE,
                                 BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, DOT_IEEE, FAST_I8, SWIGLU, PDL, LOOP_NORM,
                                 PREFETCH, LINES, WORDS, EARLY_SUMS, EARLY_RES, K_WARPS, PREFETCH_AHEAD, FLOW & 1)
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
        if (slots > 1) & done:
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
            if FLOW & 2:
                tl.debug_barrier()  # every thread's stores before the count's release
                flow_signal(flow_out_ptr, pid_n * BLOCK_N, tl.minimum(pid_n * BLOCK_N + BLOCK_N, half if SWIGLU else N), M)


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


@dataclass(frozen=True)
class LaunchPlan:
    """How one skinny GEMM launch cuts its work: `tiles` of BLOCK_N rows, each `k_blocks` K-blocks deep, in
    `slots` shares at most (split-K's splits, or the programs that share a tile under stream-K), each
    split `k_per_split` deep; the grid; whether it is stream-K."""
    block_k: int
    tiles: int
    k_blocks: int
    slots: int
    k_per_split: int
    grid: tuple
    stream: bool


def launch_plan(rows: int, k: int, c: GemmConfig, device: torch.device, argmax: bool = False,
                sms: int | None = None) -> LaunchPlan:
    """The launch of config `c` over `rows` rows of W (a fused gate_up's gate half) and K = k on `sms` SMs
    (default the device's); the argmax LM head is never stream-K (its epilogue counts a tile per program), nor
    a product of one K-block a tile (each tile is then a unit: the per-tile launch; Triton 3.6's coalescing
    pass fails on the stream-K kernel specialized to k_blocks = 1)."""
    block_k = min(c.block_k, _pow2_at_least(k))
    tiles = triton.cdiv(rows, c.block_n)
    k_blocks = triton.cdiv(k, block_k)
    if c.stream_k and not argmax and k_blocks > 1:
        programs = min(c.stream_k * (sms or _num_sms(device)), tiles * k_blocks)
        return LaunchPlan(block_k, tiles, k_blocks, stream_k_slots(tiles, k_blocks, programs), k, (programs, 1), True)
    k_per_split = triton.cdiv(triton.cdiv(k, c.split_k), block_k) * block_k
    splits = triton.cdiv(k, k_per_split)  # never an empty split
    return LaunchPlan(block_k, tiles, k_blocks, splits, k_per_split, (tiles, splits), False)


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
    return num_sms(device)


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
    norm_sums: torch.Tensor | None = None, flow_in: str | None = None, flow_out: str | None = None,
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
    Column flows (`tileinfer.ops.flow`), each named by its pair (`flow.PAIRS`): `flow_out` makes this launch
    a producer whose output's columns are counted as its tiles store them; `flow_in` makes it the consumer
    launched right after one, x being that output: it reads x's K-blocks as they are counted instead of
    waiting for the producer to finish. Only for a pair launched back to back on one stream; a launch may
    be both (a chain of pairs). A consumer's norm takes Σx² from x as it comes (a GEMV's folded norm) or
    from the producer's row sums (`norm_sums`), after its K loop.
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
    flow = (1 if flow_in else 0) | (2 if flow_out else 0)
    assert not (flow and argmax), "the argmax LM head takes part in no flow"
    assert not flow_in or flow_in != flow_out, f"a launch consumes and produces on two pairs, got {flow_in!r} twice"
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
    # a flow's consumer reads nothing of the kernel before the producer until its first flow wait
    early = EARLY_EPILOGUE.on and (norm_mode == 3 or residual is not None) and not flow_in
    flow_in_buf = consumer_counters(x.device, flow_in, k) if flow_in else y
    flow_out_buf = produced(x.device, flow_out, half if swiglu else n) if flow_out else y

    def launch(c: GemmConfig):
        nonlocal sums_out
        plan = launch_plan(half if swiglu else n, k, c, x.device, argmax)
        block_k, tiles, k_blocks, slots, k_per_split, grid = (plan.block_k, plan.tiles, plan.k_blocks, plan.slots,
                                                               plan.k_per_split, plan.grid)
        shared = slots > 1 or plan.stream  # stream-K's kernel holds the shared-tile code even where no tile is shared
        if not shared:
            part = y
        elif flow_in:
            part = consumer_partials(x.device, (slots, m, n), flow_in)
        else:
            part = torch.empty(slots, m, n, device=x.device, dtype=torch.float32)
        groups = triton.cdiv(tiles, ARGMAX_GROUP) if argmax else 0
        # a consumer's tiles count on counters of their own: the producer may still be counting on the shared ones
        counters = (arrival_counters(x.device, tiles + (groups + 1) * COUNTER_STRIDE.value, apart=flow_in)
                    if shared or argmax else part)
        tile_keys = torch.empty(tiles, block_m, device=x.device, dtype=torch.int64) if argmax else part
        if norm_mode in (1, 2) and shared:
            sums = (consumer_partials(x.device, (slots, tiles, block_m), flow_in, "sums") if flow_in
                    else torch.empty(slots, tiles, block_m, device=x.device, dtype=torch.float32))
        else:
            sums = part
        if row_sums:
            sums_out = torch.empty(tiles, MAX_M, device=x.device, dtype=torch.float32)
        _skinny_gemm_kernel[grid](
            x, w, scale if scale is not None else w, norm if norm is not None else x, y, part, sums, counters,
            argmax_slots(x.device, MAX_M) if argmax else y, tile_keys,
            norm_sums if norm_sums is not None else part, sums_out if row_sums else part, flow_in_buf, flow_out_buf,
            m, n, k, k_per_split, half, 1.0 / k, eps, norm_sums.shape[0] if norm_sums is not None else 0,
            tiles, k_blocks, tiles * k_blocks,
            x.stride(0), w.stride(0), y.stride(0),
            HAS_SCALE=scale is not None, BLOCK_M=block_m, BLOCK_N=c.block_n, BLOCK_K=block_k,
            DOT_FP32=INTERPRET, DOT_IEEE=x.dtype == torch.float32, FAST_I8=scale is not None and c.fast_i8,
            SWIGLU=swiglu, PARTIAL=shared, NORM=norm_mode, RESIDUAL=residual is not None, ARGMAX=argmax,
            PREFETCH=0 if INTERPRET else min(c.prefetch_k, triton.cdiv(k_per_split, block_k)),
            LINES=max(1, block_k * w.element_size() // 128), SUMS_OUT=row_sums, ARGMAX_GROUP=ARGMAX_GROUP,
            WORDS=words and c.fast_i8, EARLY=early, K_WARPS=_k_warps(c, block_m, block_k),
            PREFETCH_AHEAD=0 if INTERPRET else c.prefetch_ahead, STREAM_K=plan.stream, FLOW=flow,
            num_warps=c.num_warps, num_stages=c.num_stages, **launch_options(x.device),
        )

    key = ("skinny_gemm", n, k, block_m, x.dtype, w.dtype, cfg, x.device, swiglu, norm_mode, residual is not None,
           argmax, row_sums, words, early, flow)
    launch_fitted(key, shrink(cfg, blocks=(("block_k", 32), ("block_n", 16))), launch)
    if flow_in:
        consumed(x.device, flow_in)
    return (y, sums_out) if row_sums else y
