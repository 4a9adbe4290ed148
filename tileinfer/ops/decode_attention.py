"""Split-KV attention for a few query tokens (decode, DFlash verify, DFlash drafter block).

One launch, grid ``(num_kv_heads, num_splits, row_blocks)``: one program takes the query rows of one
KV head for a block of tokens — ``tokens_per_program`` tokens × the GQA group, padded to a ``tl.dot``
tile; all T tokens when there is one row block — over one contiguous share of the cache, and writes a
partial output and its log-sum-exp; the last program of a KV head and row block to finish (a counter
each, reset by that program) merges their partials by log-sum-exp, split by split in order, so the
result does not depend on which program came last. Row blocks read a share's K/V once each (the later
ones mostly from L2) and, causal, stop at their last token's position; what they buy is a smaller tile
and a merge of their own rows only, where a block of 16 tokens would leave one program per head to
merge 64 rows of every split. Splits that start past the KV length leave at
once and are not waited for. ``kv_len`` is read on the device and
``num_splits`` is a runtime argument, so a captured CUDA graph replays for any cache length and a
notebook can change the split count without recompiling. Reference: ``tileinfer.ops.attention.attention_ref``.

Exact mode (a ``split_size`` and a ``block_m`` fixed by the caller): splits start at multiples of
``split_size`` whatever the KV length, and the query tile has the same shape for 1 and for 16 tokens,
so a row's partial sums — and its output bits — are those it gets when it is computed alone. Keys a
row may not see contribute exact zeros, and splits it does not reach merge as exact no-ops (or are
not merged at all when they lie past the KV length).

Before the grid-dependency wait (PDL) each program can ask L2 for the first ``prefetch_rows`` positions
of its share of K and V, or all of it (`set_kv_prefetch`, TILEINFER_KV_PREFETCH=0 turns it off): the
cache of earlier positions streams in while the Q/K norm + RoPE kernel before it still runs. L2 is where
writes land, so a line that kernel writes afterwards is read as written. A whole long share does not
fit: past L2's size prefetched lines are evicted before the loop reads them. On the H200 no bound paid
(16 tokens: equal at 1k, 24 µs with none against 28 with whole shares at 8k, 48 against 63 at 32k;
bench/results/attention_prefetch_h200.csv), so its tuned ``prefetch_rows`` is 0. Where the caller knows
the rows before the step's tokens were cached by an earlier step (`early_kv`), each program can instead
load the first block of its share into registers before the wait; that made Qwen3-4B's steps slower on
the H200 (plain decode 2.77 → 2.81 ms, DFlash 3.85 → 3.93 ms at 1k, bench/results/floor_early_kv_h200.csv),
so it is off unless TILEINFER_EARLY_KV=1 or `set_early_kv(True)`. With `set_kv_first` (TILEINFER_KV_FIRST=1)
every program loads that block right after the wait instead, beside the step's raw q/k/v, so the HBM read no
longer waits for the step's rows to be normed, rotated and written; off, as on the H200 it slowed plain decode
up to 4k by 3-4 % and gained at most 1 % elsewhere (bench/results/floor_kv_first_h200.csv). With
`set_l2_ahead` (TILEINFER_L2_AHEAD=1; slower on the H200, bench/results/floor_l2_ahead_h200.csv) the
programs ask L2 for the next projection's weight right after the wait, in a few bulk requests each.
"""

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.errors import ConfigError
from tileinfer.ops import INTERPRET
from tileinfer.ops.attention import MAX_STEP_TOKENS
from tileinfer.ops.counters import arrival_counters
from tileinfer.ops.fit import launch_fitted, shrink
from tileinfer.ops.flow import flow_signal, produced
from tileinfer.ops.pdl import bulk_prefetch_l2, launch_options, prefetch_l2
from tileinfer.ops.rope import norm_rope_tile, rope_factors
from tileinfer.ops.stamps import SLOTS, stamp
from tileinfer.ops.switches import Switch
from tileinfer.ops.tuning import section

LOG2E = 1.4426950408889634
_kv_prefetch = os.environ.get("TILEINFER_KV_PREFETCH", "1") != "0"


_kv_prefetch_rows = None
# calls that pass `early_kv` read their first K/V block before PDL's wait
EARLY_KV = Switch("TILEINFER_EARLY_KV")
set_early_kv = EARLY_KV.set
# every call reads its first K/V block right after PDL's wait, before the step's own rows are written
KV_FIRST = Switch("TILEINFER_KV_FIRST")
set_kv_first = KV_FIRST.set


def early_kv_label() -> str:
    """Where the first K/V block is read, for benchmark tables: "on" (before PDL's wait, calls that pass
    `early_kv`), "after" (right after it, every call) or "off" (after the step's own rows are written)."""
    return "on" if EARLY_KV.on else "after" if KV_FIRST.on else "off"
# calls that pass `l2_ahead` ask L2 for those bytes right after PDL's wait; off: on the H200 the attention
# took the bytes' time and the o_proj after it gained a tenth of it (floor_l2_ahead_h200.csv)
L2_AHEAD = Switch("TILEINFER_L2_AHEAD")
set_l2_ahead, l2_ahead_label = L2_AHEAD.set, L2_AHEAD.label
AHEAD_PIECE = 64 * 1024  # bytes a bulk prefetch request asks for


def l2_ahead_for(device: torch.device) -> bool:
    """Whether kernels on `device` prefetch `l2_ahead`: asked for, compiled, on a GPU with bulk copies (sm_90+)."""
    device = torch.device(device)
    return (L2_AHEAD.on and not INTERPRET and device.type == "cuda"
            and torch.cuda.get_device_capability(device) >= (9, 0))


def set_kv_prefetch(on: bool, rows: int | None = None) -> None:
    """L2 prefetch of each split's K/V before PDL's wait, for kernels launched from now on; `rows`: how
    many positions of each share (-1 all), for calls that pass none (None: the GPU's tuned value)."""
    global _kv_prefetch, _kv_prefetch_rows
    _kv_prefetch = bool(on)
    _kv_prefetch_rows = rows


def kv_prefetch_label(device: torch.device) -> str:
    """What the kernels on `device` prefetch, for benchmark tables: "off" (nothing), "on" (each whole
    share) or a bound on the positions; the rows `set_kv_prefetch` fixed, else the GPU's tuned ones."""
    rows = _kv_prefetch_rows if _kv_prefetch_rows is not None else section(device, "decode_attention").get(
        "prefetch_rows", -1)
    if not kv_prefetch() or rows == 0:
        return "off"
    return "on" if rows == -1 else str(rows)


def kv_prefetch() -> bool:
    """Whether the kernels prefetch: asked for and compiled (the interpreter has no L2)."""
    return _kv_prefetch and not INTERPRET


@triton.jit
def _prefetch_rows_l2(base, start, end, stride_n, BLOCK_N: tl.constexpr, LINES: tl.constexpr,
                      LINE_ELEMS: tl.constexpr):
    """Ask L2 for rows [start, end) of one head's cache, one prefetch per 128-byte line; rows past the
    end ask for the first row instead."""
    offs_l = tl.arange(0, LINES) * LINE_ELEMS
    for n0 in tl.range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        prefetch_l2(base + tl.where(n < end, n, start)[:, None] * stride_n + offs_l[None, :])


@triton.jit
def _online_softmax_step(
    q, k_ptrs, v_ptrs, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
    MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    if MASK:
        n_valid = n < kv_len
        k = tl.load(k_ptrs, mask=n_valid[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=n_valid[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    return _online_softmax_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale, MASK, CAUSAL, UPCAST,
                                DOT_PRECISION)


@triton.jit
def _online_softmax_tile(
    q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
    MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One block of keys n (tiles k, v [BLOCK_N, D], finite where n >= kv_len) into the running softmax."""
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    if MASK:
        visible = (n < kv_len)[None, :]
        if CAUSAL:
            visible = visible & (n[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # Padded rows past T, or a row whose keys all sit in later blocks, keep m = −inf: shift by 0.
    m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_shift[:, None])
    alpha = tl.math.exp2(m_i - m_shift)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _merge_head(
    MID_O, MID_LSE, OUT, kv_head, token0, live_splits,
    stride_os, stride_ot, stride_oh, stride_ls, stride_lt, stride_out_t, stride_out_h,
    NUM_Q_TOKENS: tl.constexpr, TOKENS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    MERGE_M: tl.constexpr, UNROLL: tl.constexpr,
):
    """For every query row of one KV head and of tokens [token0, token0 + TOKENS):
    out = Σ_s w_s o_s / Σ_s w_s with w_s = exp2(lse_s − m), split by split in order against a running max m
    (the sums so far rescaled by exp2(m_old − m_new) when it grows; a split the row does not reach,
    lse = −inf, adds exact zeros). No first pass for the max: a split's
    loads do not wait on the sums, so UNROLL splits' partials are in flight at once. MERGE_M: the rows
    (TOKENS × group) padded to a power of two, whatever the attention's query tile."""
    rows = tl.arange(0, MERGE_M)
    token = token0 + rows // GROUP
    row_valid = (rows < TOKENS * GROUP) & (token < NUM_Q_TOKENS)
    head = kv_head * GROUP + rows % GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = MID_O + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    lse_ptrs = MID_LSE + token * stride_lt + head
    m = tl.full([MERGE_M], float("-inf"), tl.float32)
    denom = tl.zeros([MERGE_M], tl.float32)
    acc = tl.zeros([MERGE_M, HEAD_DIM], tl.float32)
    for s in tl.range(0, live_splits, loop_unroll_factor=UNROLL):
        # .cg: other programs wrote these; read them from L2, never from a stale L1 line
        lse = tl.load(lse_ptrs + s * stride_ls, mask=row_valid, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(o_ptrs + s * stride_os, mask=row_valid[:, None], other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, lse)
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m - m_shift)
        w = tl.math.exp2(lse - m_shift)
        # explicit FMAs: left to contraction, the T = 1 and T = 16 builds could round rows differently
        denom = tl.fma(denom, alpha, w)
        acc = tl.fma(w[:, None], o, acc * alpha[:, None])
        m = m_new
    out = acc / tl.where(row_valid, denom, 1.0)[:, None]
    out_ptrs = OUT + token[:, None] * stride_out_t + head[:, None] * stride_out_h + offs_d[None, :]
    tl.store(out_ptrs, out.to(OUT.dtype.element_ty), mask=row_valid[:, None])


@triton.jit
def _split_kv_attention_kernel(
    Q, K, V, KV_LEN, MID_O, MID_LSE, OUT, COUNTERS,
    K_NEW, V_NEW, Q_W, K_W, COS_SIN, POSITIONS, AHEAD, STAMP_BUF, FLOW_PTR,
    num_splits, split_size, qk_scale, eps, ahead_offset, ahead_bytes, ahead_max_kv,
    stride_qt, stride_qh, stride_qd,
    stride_kn, stride_kh,
    stride_vn, stride_vh,
    stride_os, stride_ot, stride_oh,
    stride_ls, stride_lt,
    stride_out_t, stride_out_h,
    stride_knt, stride_knh, stride_vnt, stride_vnh, stride_cs,
    NUM_Q_TOKENS: tl.constexpr, TOKENS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MERGE_M: tl.constexpr, MERGE_UNROLL: tl.constexpr,
    CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, PDL: tl.constexpr,
    PREFETCH_ROWS: tl.constexpr, LINES: tl.constexpr, NORM_ROPE: tl.constexpr, NEW_ROWS: tl.constexpr,
    TMA: tl.constexpr, EARLY: tl.constexpr, AHEAD_ON: tl.constexpr, AHEAD_PIECE: tl.constexpr,
    STAMPS: tl.constexpr, FLOW: tl.constexpr, TRIGGER_LATE: tl.constexpr,
):
    """For query row r = (token t, head kv_head·GROUP + g), over keys n of this split:
        s_rn = q_r · k_n · scale,  masked to n <= kv_len − T + t when causal
        o_r = Σ_n exp(s_rn − lse_r) v_n,  lse_r = log Σ_n exp(s_rn)      (lse kept in log2 units)
    with chunk = split_size when given (> 0), else cdiv(cdiv(kv_len, num_splits), BLOCK_N) · BLOCK_N,
    and split s covering [s·chunk, min((s+1)·chunk, kv_len)) for s < cdiv(kv_len, chunk) (later splits do
    nothing). A row that sees none of its split's keys gets o = 0 and lse = −inf. The head's last live
    program then merges its partials (_merge_head).

    NORM_ROPE: Q holds the step's raw q, K_NEW / V_NEW its raw k / v (views of the qkv projection). Each
    program norms and rotates its rows of q (`rope.norm_rope_tile`, the q_norm weight Q_W), and the programs
    whose share holds a step position p = POSITIONS[t] norm and rotate k[t] (K_W) into row p of the K cache
    and copy v[t] into the V cache before reading their share: no other program reads those rows.

    EARLY 1: the rows before the step's T tokens were cached by an earlier step, so each program loads the
    first block of its share before the grid-dependency wait (its HBM read overlaps the kernel before);
    the step's own rows in that block are loaded again after the wait (and after NORM_ROPE's writes).
    EARLY 2: the same first-block loads right after the wait, beside the step's raw q/k/v loads, not after
    NORM_ROPE's writes and barrier: one dependent round trip fewer, nothing read while the kernel before runs.
    Without NORM_ROPE the block is final after the wait and is read whole, the step's rows too; with it and one
    token, that token's row is taken from the registers that wrote it to the cache (either EARLY), not read back.

    AHEAD_ON: right after the wait the live programs ask L2 for the ahead_bytes at AHEAD + ahead_offset
    (the weight of the projection after this attention), a share each: while the attention's dependent
    loads and merge leave HBM mostly idle, the next kernel's weights stream in. Not past ahead_max_kv
    positions, where the K/V streaming through L2 would evict those lines before they are read.

    TRIGGER_LATE: the kernel after this one (under PDL) may start once every program has finished its K/V
    loop, not once every program is past its wait: its programs' first weight reads then no longer share
    HBM with this kernel's K/V reads.

    FLOW: each merge counts the columns it stored (its heads × HEAD_DIM, times its token rows) into
    FLOW_PTR's counters, for the o projection launched after it to read them as they come
    (`tileinfer.ops.flow`)."""
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    token0 = tl.program_id(2) * TOKENS
    me = (kv_head * tl.num_programs(1) + split) * tl.num_programs(2) + tl.program_id(2)
    if STAMPS:
        stamp(STAMP_BUF, me, 0, 0.0)
    kv_len = tl.load(KV_LEN).to(tl.int32)  # set at the step's start, before the kernel before this one
    if split_size > 0:
        chunk = split_size
    else:
        chunk = tl.cdiv(tl.cdiv(kv_len, num_splits), BLOCK_N) * BLOCK_N
    # Splits that start past the KV length (exact mode's grid covers the request's longest) have nothing
    # to contribute: they leave at once, and the head's merge waits for the live ones only.
    live_splits = tl.cdiv(kv_len, chunk)
    if split >= live_splits:
        return
    start = split * chunk
    end = tl.minimum(start + chunk, kv_len)
    offs_d = tl.arange(0, HEAD_DIM)
    n_first = start + tl.arange(0, BLOCK_N)
    k_first_ptrs = K + kv_head * stride_kh + n_first[:, None] * stride_kn + offs_d[None, :]
    v_first_ptrs = V + kv_head * stride_vh + n_first[:, None] * stride_vn + offs_d[None, :]
    settled = (n_first < tl.minimum(end, kv_len - NUM_Q_TOKENS))[:, None]
    # After the wait, with no cache writes of its own, the block is final: the step's rows come with it.
    after_wait = (n_first < end)[:, None] if EARLY == 2 and not NORM_ROPE else settled
    if EARLY == 1:
        k_first = tl.load(k_first_ptrs, mask=settled, other=0.0)
        v_first = tl.load(v_first_ptrs, mask=settled, other=0.0)
    if PREFETCH_ROWS != 0:
        ahead = end if PREFETCH_ROWS < 0 else tl.minimum(end, start + PREFETCH_ROWS)
        _prefetch_rows_l2(K + kv_head * stride_kh, start, ahead, stride_kn, BLOCK_N, LINES, HEAD_DIM // LINES)
        _prefetch_rows_l2(V + kv_head * stride_vh, start, ahead, stride_vn, BLOCK_N, LINES, HEAD_DIM // LINES)
    rows = tl.arange(0, BLOCK_M)
    token = token0 + rows // GROUP
    row_valid = (rows < TOKENS * GROUP) & (token < NUM_Q_TOKENS)
    head = kv_head * GROUP + rows % GROUP
    if CAUSAL:  # keys past this program's last token are masked for all its rows: not read at all
        loop_end = tl.minimum(end, kv_len - NUM_Q_TOKENS + tl.minimum(token0 + TOKENS, NUM_Q_TOKENS))
    else:
        loop_end = end
    if NORM_ROPE:
        # Positions, norm weights and RoPE rows are the step's inputs, not the kernel before's outputs:
        # loaded before the wait, so only the raw q/k/v loads stand between the wait and the cache writes.
        offs_rot = (offs_d + HEAD_DIM // 2) % HEAD_DIM
        offs_cs = offs_d % (HEAD_DIM // 2)
        t = tl.arange(0, NEW_ROWS)
        pos = tl.load(POSITIONS + t, mask=t < NUM_Q_TOKENS, other=-1).to(tl.int64)
        mine = ((t < NUM_Q_TOKENS) & (pos >= start) & (pos < end))[:, None]
        k_w, k_w_rot, k_cos, k_sin = rope_factors(K_W, COS_SIN + pos[:, None] * stride_cs + offs_cs[None, :], mine,
                                                  HEAD_DIM)
        q_pos_t = tl.load(POSITIONS + token, mask=row_valid, other=0).to(tl.int64)
        q_w, q_w_rot, q_cos, q_sin = rope_factors(Q_W, COS_SIN + q_pos_t[:, None] * stride_cs + offs_cs[None, :],
                                                  row_valid[:, None], HEAD_DIM)
    if PDL:
        gdc_wait()
        if not TRIGGER_LATE:
            gdc_launch_dependents()
    if STAMPS:
        stamp(STAMP_BUF, me, 1, 0.0)
    if EARLY == 2:
        k_first = tl.load(k_first_ptrs, mask=after_wait, other=0.0)
        v_first = tl.load(v_first_ptrs, mask=after_wait, other=0.0)
    if AHEAD_ON and kv_len <= ahead_max_kv:
        rank = (kv_head * live_splits + split) * tl.num_programs(2) + tl.program_id(2)
        bulk_prefetch_l2(AHEAD.to(tl.pointer_type(tl.int8)) + ahead_offset, ahead_bytes, rank,
                         tl.num_programs(0) * live_splits * tl.num_programs(2), AHEAD_PIECE)

    if NORM_ROPE:
        # The step's keys of this share, in a tile of NEW_ROWS rows whatever T is (the same bits for a row
        # computed alone or in a block), stored before the loop below loads them (one CTA: the barrier).
        k_src = K_NEW + t[:, None] * stride_knt + kv_head * stride_knh
        k_raw = tl.load(k_src + offs_d[None, :], mask=mine, other=0.0)
        k_raw_rot = tl.load(k_src + offs_rot[None, :], mask=mine, other=0.0)
        v_new = tl.load(V_NEW + t[:, None] * stride_vnt + kv_head * stride_vnh + offs_d[None, :], mask=mine)
        q_src = Q + token[:, None] * stride_qt + head[:, None] * stride_qh
        q_raw = tl.load(q_src + offs_d[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
        q_raw_rot = tl.load(q_src + offs_rot[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
        k_new = norm_rope_tile(k_raw, k_raw_rot, k_w, k_w_rot, k_cos, k_sin, eps, HEAD_DIM)
        tl.store(K + pos[:, None] * stride_kn + kv_head * stride_kh + offs_d[None, :],
                 k_new.to(K.dtype.element_ty), mask=mine)
        tl.store(V + pos[:, None] * stride_vn + kv_head * stride_vh + offs_d[None, :], v_new, mask=mine)
        tl.debug_barrier()
        q = norm_rope_tile(q_raw, q_raw_rot, q_w, q_w_rot, q_cos, q_sin, eps, HEAD_DIM)
        q = q.to(Q.dtype.element_ty)  # rounded as the two-launch path stores it
    else:
        q_ptrs = Q + token[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=row_valid[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    if STAMPS:
        stamp(STAMP_BUF, me, 2, tl.sum(tl.sum(q.to(tl.float32), 1), 0))
    q_pos = kv_len - NUM_Q_TOKENS + token

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    if TMA:
        # The copy engine fetches each block into shared memory; rows past the KV length come back as zeros
        # (the descriptor's shape ends there), rows of the next split are real keys that the mask drops.
        k_desc = tl.make_tensor_descriptor(K + kv_head * stride_kh, shape=[kv_len, HEAD_DIM], strides=[stride_kn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(V + kv_head * stride_vh, shape=[kv_len, HEAD_DIM], strides=[stride_vn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        for n0 in tl.range(start, loop_end, BLOCK_N):
            m_i, l_i, acc = _online_softmax_tile(
                q, k_desc.load([n0, 0]), v_desc.load([n0, 0]), n0 + offs_n, q_pos, end, m_i, l_i, acc, qk_scale,
                MASK=True, CAUSAL=CAUSAL, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION)
    else:
        loop_start = start
        if EARLY:
            fresh = ((n_first >= kv_len - NUM_Q_TOKENS) & (n_first < end))[:, None]
            if NORM_ROPE and NUM_Q_TOKENS == 1:
                # The one token's row is in registers: taken from there, not read back after its store (a max
                # against -inf picks row 0 with its bits, the sign of a zero included).
                held = (n_first == tl.max(tl.where(t == 0, pos, -1), 0))[:, None]
                k_row = tl.max(tl.where((t == 0)[:, None], k_new, float("-inf")), 0)
                v_row = tl.max(tl.where((t == 0)[:, None], v_new.to(tl.float32), float("-inf")), 0)
                k_first = tl.where(held, k_row[None, :].to(K.dtype.element_ty), k_first)
                v_first = tl.where(held, v_row[None, :].to(V.dtype.element_ty), v_first)
                fresh = fresh & ~held
            if EARLY == 1 or NORM_ROPE:
                k_first = tl.where(fresh, tl.load(k_first_ptrs, mask=fresh, other=0.0), k_first)
                v_first = tl.where(fresh, tl.load(v_first_ptrs, mask=fresh, other=0.0), v_first)
            m_i, l_i, acc = _online_softmax_tile(q, k_first, v_first, n_first, q_pos, end, m_i, l_i, acc, qk_scale,
                                                 MASK=True, CAUSAL=CAUSAL, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION)
            loop_start = start + BLOCK_N
        k_base = K + kv_head * stride_kh + offs_d[None, :]
        v_base = V + kv_head * stride_vh + offs_d[None, :]
        for n0 in tl.range(loop_start, loop_end, BLOCK_N):
            n = n0 + offs_n
            m_i, l_i, acc = _online_softmax_step(
                q, k_base + n[:, None] * stride_kn, v_base + n[:, None] * stride_vn, n, q_pos, end, m_i, l_i,
                acc, qk_scale, MASK=True, CAUSAL=CAUSAL, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION)

    if PDL and TRIGGER_LATE:
        gdc_launch_dependents()
    if STAMPS:
        stamp(STAMP_BUF, me, 3, tl.sum(l_i, 0))
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, m_i + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
    o_ptrs = MID_O + split * stride_os + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out, mask=row_valid[:, None])
    tl.store(MID_LSE + split * stride_ls + token * stride_lt + head, lse, mask=row_valid)

    # Every thread's partial stores come before the counter's release; the program that counts last
    # acquires them all, merges, and leaves the counter at 0 for the next launch (or graph replay).
    tl.debug_barrier()
    counter = COUNTERS + kv_head * tl.num_programs(2) + tl.program_id(2)
    arrived = tl.atomic_add(counter, 1, sem="acq_rel")
    if STAMPS:
        stamp(STAMP_BUF, me, 4, arrived.to(tl.float32))
    if arrived == live_splits - 1:
        _merge_head(MID_O, MID_LSE, OUT, kv_head, token0, live_splits,
                    stride_os, stride_ot, stride_oh, stride_ls, stride_lt, stride_out_t, stride_out_h,
                    NUM_Q_TOKENS, TOKENS, GROUP, HEAD_DIM, MERGE_M, MERGE_UNROLL)
        tl.atomic_xchg(counter, 0, sem="relaxed")
        if FLOW:
            tl.debug_barrier()  # every thread's stores of the merge before the count's release
            n0 = kv_head * GROUP * HEAD_DIM
            flow_signal(FLOW_PTR, n0, n0 + GROUP * HEAD_DIM, tl.minimum(TOKENS, NUM_Q_TOKENS - token0))
        if STAMPS:
            stamp(STAMP_BUF, me, 5, 0.0)


@dataclass(frozen=True)
class StepKV:
    """A step's raw K and V ([T, Hk, D] views of the qkv projection) with what Qwen3 applies before they
    are cached: the per-head q_norm / k_norm weights [D], the RoPE table (`rope_cos_sin`), each token's
    position [T] (read on the device) and the norms' eps."""
    k: torch.Tensor
    v: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    cos_sin: torch.Tensor
    positions: torch.Tensor
    eps: float


def _check_inputs(q, k_cache, v_cache):
    if q.dim() != 3 or k_cache.dim() != 3 or v_cache.shape != k_cache.shape:
        raise ConfigError(
            f"attention expects q [T, num_q_heads, head_dim] and k/v caches [max_positions, num_kv_heads, "
            f"head_dim] of one shape; got q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}"
        )
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    if k_cache.shape[2] != head_dim:
        raise ConfigError(
            f"q has head_dim {head_dim} but the KV cache has head_dim {k_cache.shape[2]}; "
            "build the cache with the model's head_dim"
        )
    if num_q_heads % k_cache.shape[1] != 0:
        raise ConfigError(
            f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads {k_cache.shape[1]}"
        )
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise ConfigError(f"head_dim must be a power of two >= 16, got {head_dim}")
    if k_cache.device != q.device or v_cache.device != q.device:
        raise ConfigError(f"q is on {q.device} but the KV cache is on {k_cache.device}/{v_cache.device}")
    assert k_cache.stride(2) == 1 and v_cache.stride(2) == 1, "KV cache rows must be contiguous"


def _check_step_kv(q, k_cache, new: StepKV):
    t, num_kv_heads, d = new.k.shape[0], k_cache.shape[1], k_cache.shape[2]
    if new.k.shape != (t, num_kv_heads, d) or new.v.shape != new.k.shape or t != q.shape[0]:
        raise ConfigError(f"step K/V must be [{q.shape[0]}, {num_kv_heads}, {d}] like the cache's rows, got k "
                          f"{tuple(new.k.shape)}, v {tuple(new.v.shape)}")
    if new.q_weight.shape != (d,) or new.k_weight.shape != (d,):
        raise ConfigError(f"q_norm / k_norm weights must be [{d}], got {tuple(new.q_weight.shape)}, "
                          f"{tuple(new.k_weight.shape)}")
    if new.positions.shape != (t,) or new.positions.dtype not in (torch.int32, torch.int64):
        raise ConfigError(f"positions must be [{t}] int32/int64, got {tuple(new.positions.shape)} {new.positions.dtype}")
    if new.cos_sin.dtype != torch.float32 or new.cos_sin.shape[1] != d:
        raise ConfigError(f"cos_sin must be an fp32 [positions, {d}] table, got {tuple(new.cos_sin.shape)} "
                          f"{new.cos_sin.dtype}")
    assert new.k.stride(2) == 1 and new.v.stride(2) == 1 and new.cos_sin.stride(1) == 1 and q.stride(2) == 1
    assert new.k.dtype == k_cache.dtype == new.v.dtype, "the step's K/V go into the caches as they are typed"


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory for the descriptors a launch makes in its kernels (128 B a program), asked for at launch:
    inside a graph capture it comes from the graph's pool."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ahead_bytes(l2_ahead: torch.Tensor | None, q: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(tensor, byte offset to its first 16-byte boundary, whole 16-byte granules from there in bytes) of
    what the kernel asks L2 for; (q, 0, 0) where there is nothing to ask or `l2_ahead_for` says no."""
    if l2_ahead is None:
        return q, 0, 0
    if not isinstance(l2_ahead, torch.Tensor) or l2_ahead.device != q.device or not l2_ahead.is_contiguous():
        what = type(l2_ahead).__name__ if not isinstance(l2_ahead, torch.Tensor) else (
            f"a tensor on {l2_ahead.device}" if l2_ahead.device != q.device else "a non-contiguous tensor")
        raise ConfigError(f"l2_ahead takes a contiguous tensor on q's device ({q.device}), got {what}")
    if not l2_ahead_for(q.device):
        return q, 0, 0
    offset = -l2_ahead.data_ptr() % 16
    nbytes = (l2_ahead.numel() * l2_ahead.element_size() - offset) // 16 * 16
    return l2_ahead, offset, max(nbytes, 0)


def merge_rows(num_q_tokens: int, group: int) -> int:
    """The merge's row tile: the query rows of a head and row block (tokens × group) padded to a power of two."""
    return triton.next_power_of_2(num_q_tokens * group)


def merge_unroll(merge_m: int, head_dim: int, num_warps: int, most: int = 8) -> int:
    """Partials the merge keeps in flight: up to `most` while they fit in ~64 registers a thread beside the
    accumulator (a 64-row tile of 128 fp32 takes 64 on 4 warps: one at a time, else it spills)."""
    tile_regs = merge_m * head_dim // (32 * num_warps)
    return max(1, min(most, 64 // max(tile_regs, 1)))


@dataclass(frozen=True)
class DecodeAttentionConfig:
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3


def decode_attention(
    q, k_cache, v_cache, kv_len: torch.Tensor, causal: bool = True, num_splits: int = 8, scale=None,
    *, split_size: int = 0, block_m: int | None = None, block_n: int = 64, num_warps: int | None = None,
    num_stages: int | None = None, step_kv: StepKV | None = None, prefetch_rows: int | None = None,
    tma: bool | None = None, early_kv: bool = False, tokens_per_program: int | None = None,
    l2_ahead: torch.Tensor | None = None, l2_ahead_max_kv: int | None = None, stamps: torch.Tensor | None = None,
    flow: bool = False,
) -> torch.Tensor:
    """Attention of T (1…16) query tokens over the cache, split over ``num_splits`` shares of the
    positions; ``kv_len`` is a 1-element integer tensor on q's device (never read on the host).

    ``split_size`` > 0 fixes each split to that many positions (a multiple of ``block_n``) instead of
    an even share of ``kv_len``: splits past the KV length are empty. ``block_m`` fixes the query tile
    (T × group rows, padded); exact mode passes both so that rows do not depend on T or ``kv_len``.

    ``step_kv``: q is the step's raw q, and the kernel applies Qwen3's Q/K RMSNorm and RoPE itself and
    writes the step's K/V into the caches first: ``qk_norm_rope`` and this attention in one launch.
    ``prefetch_rows``: positions of each share asked of L2 before PDL's wait (-1: the whole share, 0: none;
    default `set_kv_prefetch`'s rows, else the GPU's "decode_attention" section, else -1), where
    `kv_prefetch` is on. ``tma``: K/V blocks fetched by the Tensor Memory Accelerator through descriptors
    made in the kernel, not by each thread's loads (default the GPU section's "tma", else off; never with
    ``step_kv``, whose cache writes the copy engine would not see without a proxy fence).
    ``early_kv``: the cache rows before the step's tokens were written by an earlier step, not by a kernel
    this step launched, so each program reads the first block of its share before PDL's wait (not with
    TMA); the step's own rows are read after it. With `set_kv_first` every call (not with TMA) reads that
    block right after the wait instead, before the step's rows are written. The output's bits are the same
    either way.
    ``tokens_per_program``: query tokens a program takes (row blocks of the grid; default all T, the
    engine's choice is ``attention.SplitPolicy``); all T where ``block_m`` or ``step_kv`` is
    given: exact mode's tile is fixed, and a step's K/V rows are written by the one program that reads them.
    ``l2_ahead``: a contiguous tensor on q's device (the weight the next kernel reads) whose bytes the
    programs ask L2 for right after PDL's wait, where `l2_ahead_for` the device and the KV length is at
    most ``l2_ahead_max_kv`` (default the GPU section's; 0 or none: any); the output is the same.
    ``stamps``: an int64 [programs, stamps.SLOTS] buffer (`stamps.stamp_buffer`; programs = KV heads × splits
    × row blocks, in that order) that gets each program's `%globaltimer` at its start (slot 0), after PDL's
    wait (1), with q ready (2: normed, rotated and the step's K/V written), after its K/V loop (3), after its
    arrival count (4) and, for the program that merged, after the merge (5).
    ``flow``: the output's columns are counted as the merges store them (`tileinfer.ops.flow`), for a skinny
    GEMM launched right after with ``flow=1`` (the o projection, `Ops.attention_flows`), which clears them.
    Reference: ``rope.qk_norm_rope_ref`` (to the caches), then ``attention.attention_ref``."""
    # Warps and stages come from the GPU's "decode_attention" section (configs/<gpu>.json), else these
    # defaults, the H200 sweep's winners (q16, 8k and 32k, 16/32 splits, mean µs): BLOCK_N 64 with 4 warps
    # and 3 stages 29.5; 4 stages 30.7; 8 warps 40.3; BLOCK_N 128: 32.4 (4 warps), 40.3 (8). BLOCK_N stays
    # 64: exact mode's split sizes are multiples of it.
    _check_inputs(q, k_cache, v_cache)
    tuned = section(q.device, "decode_attention")
    warps_given = num_warps is not None
    num_warps = num_warps or tuned.get("num_warps", 4)
    num_stages = num_stages or tuned.get("num_stages", 3)
    unroll_most = tuned.get("merge_unroll", 8)
    trigger = tuned.get("trigger", "wait")
    if trigger not in ("wait", "loop") or not isinstance(unroll_most, int) or unroll_most < 1:
        raise ConfigError(f"the GPU's decode_attention section takes trigger 'wait' or 'loop' and merge_unroll a "
                          f"positive integer, got trigger {trigger!r}, merge_unroll {unroll_most!r}")
    trigger_late = trigger == "loop"
    if prefetch_rows is None:
        prefetch_rows = _kv_prefetch_rows if _kv_prefetch_rows is not None else tuned.get("prefetch_rows", -1)
    if not kv_prefetch():
        prefetch_rows = 0
    tma = bool(tuned.get("tma", False) if tma is None else tma) and step_kv is None
    ahead, ahead_offset, ahead_bytes = _ahead_bytes(l2_ahead, q)
    if l2_ahead_max_kv is None:
        l2_ahead_max_kv = tuned.get("l2_ahead_max_kv", 0)
    ahead_max_kv = int(l2_ahead_max_kv) or 2**31 - 1
    early = 0 if tma else 1 if early_kv and EARLY_KV.on else 2 if KV_FIRST.on else 0
    if tma:
        triton.set_allocator(_descriptor_scratch)
    if num_splits < 1:
        raise ConfigError(f"num_splits must be at least 1, got {num_splits}")
    if not isinstance(kv_len, torch.Tensor) or kv_len.numel() != 1 or kv_len.dtype not in (torch.int32, torch.int64):
        raise ConfigError("decode_attention takes kv_len as a 1-element int32/int64 tensor on q's device")
    if kv_len.device != q.device:
        raise ConfigError(f"kv_len is on {kv_len.device} but q is on {q.device}; keep kv_len on q's device")
    if split_size < 0 or split_size % block_n:
        raise ConfigError(f"split_size must be 0 (even splits) or a multiple of block_n {block_n}, got {split_size}")
    num_q_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    if tokens_per_program is None:
        tokens_per_program = num_q_tokens
    if not isinstance(tokens_per_program, int) or tokens_per_program < 1:
        raise ConfigError(f"tokens_per_program must be a positive integer, got {tokens_per_program!r}")
    if block_m is not None or step_kv is not None:
        tokens_per_program = num_q_tokens
    tokens = min(tokens_per_program, num_q_tokens)
    row_blocks = triton.cdiv(num_q_tokens, tokens)
    rows = tokens * group
    if block_m is None:
        block_m = max(16, triton.next_power_of_2(rows))
    if rows > block_m or block_m > 128:
        raise ConfigError(
            f"decode_attention takes at most 128 query rows per program (tokens × group), got {tokens} × {group}"
            f"{f' for a tile of {block_m}' if block_m < 128 else ''}; use prefill_attention for longer query blocks"
        )
    if block_m >= 128 and not warps_given:
        num_warps = max(num_warps, 8)  # a 128-row tile (Qwen3-14B's 16 × 5 rows) spills on 4 warps (sm_90)
    if scale is None:
        scale = head_dim**-0.5
    dot_precision = "ieee" if q.dtype == torch.float32 else "tf32"
    merge_m = merge_rows(tokens, group)

    mid_o = torch.empty((num_splits, num_q_tokens, num_q_heads, head_dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((num_splits, num_q_tokens, num_q_heads), dtype=torch.float32, device=q.device)
    out = torch.empty((num_q_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    counters = arrival_counters(q.device, num_kv_heads * row_blocks)
    new = step_kv or StepKV(q, q, q, q, q, kv_len, 0.0)  # without: stand-ins the kernel never reads
    if step_kv is not None:
        _check_step_kv(q, k_cache, step_kv)
    if stamps is not None:
        want = (num_kv_heads * num_splits * row_blocks, SLOTS)
        if stamps.shape != want or stamps.dtype != torch.int64 or stamps.device != q.device or not stamps.is_contiguous():
            raise ConfigError(f"stamps must be a contiguous int64 {list(want)} buffer on {q.device} (a row per "
                              f"program: KV heads × splits × row blocks), got {stamps.dtype} {list(stamps.shape)}")

    def launch(c: DecodeAttentionConfig):
        _split_kv_attention_kernel[(num_kv_heads, num_splits, row_blocks)](
            q, k_cache, v_cache, kv_len, mid_o, mid_lse, out, counters,
            new.k, new.v, new.q_weight, new.k_weight, new.cos_sin, new.positions, ahead,
            stamps if stamps is not None else counters,
            flow_buf if flow else counters,
            num_splits, split_size, scale * LOG2E, new.eps, ahead_offset, ahead_bytes, ahead_max_kv,
            q.stride(0), q.stride(1), q.stride(2),
            k_cache.stride(0), k_cache.stride(1),
            v_cache.stride(0), v_cache.stride(1),
            mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
            mid_lse.stride(0), mid_lse.stride(1),
            out.stride(0), out.stride(1),
            new.k.stride(0), new.k.stride(1), new.v.stride(0), new.v.stride(1), new.cos_sin.stride(0),
            NUM_Q_TOKENS=num_q_tokens, TOKENS=tokens, GROUP=group, HEAD_DIM=head_dim,
            BLOCK_M=block_m, BLOCK_N=c.block_n, MERGE_M=merge_m,
            MERGE_UNROLL=merge_unroll(merge_m, head_dim, c.num_warps, unroll_most),
            CAUSAL=causal, UPCAST=INTERPRET, DOT_PRECISION=dot_precision,
            PREFETCH_ROWS=prefetch_rows, LINES=max(1, head_dim * k_cache.element_size() // 128),
            NORM_ROPE=step_kv is not None, NEW_ROWS=MAX_STEP_TOKENS, TMA=tma, EARLY=early,
            AHEAD_ON=ahead_bytes > 0, AHEAD_PIECE=AHEAD_PIECE, STAMPS=stamps is not None, FLOW=flow,
            TRIGGER_LATE=trigger_late, num_warps=c.num_warps, num_stages=c.num_stages, **launch_options(q.device),
        )

    if flow:
        flow_buf = produced(q.device, "o", num_q_heads * head_dim)
    cfg = DecodeAttentionConfig(block_n, num_warps, num_stages)
    key = ("decode_attention", num_q_tokens, tokens, group, head_dim, block_m, q.dtype, k_cache.dtype, causal,
           cfg, q.device, prefetch_rows, step_kv is not None, tma, early, ahead_bytes > 0, stamps is not None, flow,
           unroll_most, trigger_late)
    launch_fitted(key, shrink(cfg, blocks=(("block_n", 16),)), launch)
    return out
