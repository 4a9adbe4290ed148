"""Flash-attention forward for many query tokens (prefill, chunked prefill).

Grid ``(cdiv(T, BLOCK_M), num_q_heads)``; each program streams the KV cache of its head's KV head
once with an online softmax. Under ``causal`` the key blocks wholly to the left of the query block
run without masks and the loop stops at the block's last visible key. The T queries sit at the
last T positions, so a chunk with ``kv_len > T`` attends to the cached prefix plus itself.
Reference: ``tileinfer.ops.attention.attention_ref``.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tileinfer.ops import INTERPRET
from tileinfer.ops.decode_attention import _check_inputs, _online_softmax_tile
from tileinfer.ops.fit import launch_fitted, shrink
from tileinfer.ops.tuning import section

LOG2E = 1.4426950408889634


@triton.jit
def _prefill_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
                  MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """`_online_softmax_tile` in fewer instructions per score, for a prompt's query blocks: the scale in
    the exponent's FMA, hidden keys at a large finite negative score (every row of a causal prompt sees
    its own key, whose weight then zeroes what they added), and the rescaled sums accumulated by the
    second dot itself."""
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    if MASK:
        visible = (n < kv_len)[None, :]
        if CAUSAL:
            visible = visible & (n[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, -1.0e6)
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _kv_block(K, V, k_base, v_base, n0, n, kv_col, stride_kn, stride_vn, kv_len,
              MASK: tl.constexpr, TMA: tl.constexpr):
    """Keys and values n0 .. n0 + BLOCK_N of the program's KV head, zero past kv_len under MASK: by TMA
    (K, V are descriptors of kv_len rows, which fill rows past them with zeros) or by pointers."""
    if TMA:
        k = K.load([n0, kv_col])
        v = V.load([n0, kv_col])
    elif MASK:
        k = tl.load(k_base + n[:, None] * stride_kn, mask=(n < kv_len)[:, None], other=0.0)
        v = tl.load(v_base + n[:, None] * stride_vn, mask=(n < kv_len)[:, None], other=0.0)
    else:
        k = tl.load(k_base + n[:, None] * stride_kn)
        v = tl.load(v_base + n[:, None] * stride_vn)
    return k, v


@triton.jit
def _prefill_attention_kernel(
    Q, K, V, OUT,
    num_q_tokens, kv_len, qk_scale,
    stride_qt, stride_qh, stride_qd,
    stride_kn, stride_kh,
    stride_vn, stride_vh,
    stride_out_t, stride_out_h,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, LONGEST_FIRST: tl.constexpr,
    FAST_SOFTMAX: tl.constexpr, TMA: tl.constexpr,
):
    """out_t = Σ_n softmax_n(q_t · k_n · scale) v_n over n < kv_len, and n <= kv_len − T + t when causal;
    one program per (BLOCK_M query tokens, query head). LONGEST_FIRST (grid (heads, query blocks)): the
    last query blocks, which see the most keys under a causal mask, of every head first, so that the
    grid's last wave holds the shortest programs. TMA: Q, K, V and OUT are tensor descriptors of the
    rows × (heads · HEAD_DIM) matrices (the strides are then unused)."""
    if LONGEST_FIRST:
        head = tl.program_id(0)
        start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    else:
        start_m = tl.program_id(0)
        head = tl.program_id(1)
    kv_head = head // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_valid = offs_m < num_q_tokens
    if TMA:
        q = Q.load([start_m * BLOCK_M, head * HEAD_DIM])
        k_base = K
        v_base = V
    else:
        q = tl.load(
            Q + offs_m[:, None] * stride_qt + head * stride_qh + offs_d[None, :] * stride_qd,
            mask=row_valid[:, None], other=0.0,
        )
        k_base = K + kv_head * stride_kh + offs_d[None, :]
        v_base = V + kv_head * stride_vh + offs_d[None, :]
    if UPCAST:
        q = q.to(tl.float32)
    prefix = kv_len - num_q_tokens
    q_pos = prefix + offs_m
    kv_col = kv_head * HEAD_DIM

    if CAUSAL:
        # Keys before the block's first query are visible to every row; the rest need the mask.
        unmasked_end = (prefix + start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = tl.minimum(kv_len, prefix + (start_m + 1) * BLOCK_M)
    else:
        unmasked_end = kv_len // BLOCK_N * BLOCK_N
        end = kv_len

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n0 in tl.range(0, unmasked_end, BLOCK_N):
        n = n0 + offs_n
        k, v = _kv_block(K, V, k_base, v_base, n0, n, kv_col, stride_kn, stride_vn, kv_len, False, TMA)
        if FAST_SOFTMAX:
            m_i, l_i, acc = _prefill_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
                                          False, CAUSAL, UPCAST, DOT_PRECISION)
        else:
            m_i, l_i, acc = _online_softmax_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
                                                 False, CAUSAL, UPCAST, DOT_PRECISION)
    for n0 in tl.range(unmasked_end, end, BLOCK_N):
        n = n0 + offs_n
        k, v = _kv_block(K, V, k_base, v_base, n0, n, kv_col, stride_kn, stride_vn, kv_len, True, TMA)
        if FAST_SOFTMAX:
            m_i, l_i, acc = _prefill_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
                                          True, CAUSAL, UPCAST, DOT_PRECISION)
        else:
            m_i, l_i, acc = _online_softmax_tile(q, k, v, n, q_pos, kv_len, m_i, l_i, acc, qk_scale,
                                                 True, CAUSAL, UPCAST, DOT_PRECISION)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    if TMA:
        OUT.store([start_m * BLOCK_M, head * HEAD_DIM], out.to(OUT.dtype))
    else:
        tl.store(
            OUT + offs_m[:, None] * stride_out_t + head * stride_out_h + offs_d[None, :],
            out.to(OUT.dtype.element_ty), mask=row_valid[:, None],
        )


@dataclass(frozen=True)
class PrefillAttentionConfig:
    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    longest_first: bool = False
    fast_softmax: bool = False
    tma: bool = False


def tma_loads_fit(q, k_cache, v_cache) -> bool:
    """Whether the tiles can move by TMA: 16-bit q, K and V whose heads lie side by side in each row
    (rows × heads · head_dim matrices with 16-byte aligned bases and rows), on a Hopper-class GPU or under
    the interpreter."""
    if q.dtype not in (torch.bfloat16, torch.float16) or not q.dtype == k_cache.dtype == v_cache.dtype:
        return False
    if not INTERPRET and (q.device.type != "cuda" or torch.cuda.get_device_capability(q.device)[0] < 9):
        return False
    for x in (q, k_cache, v_cache):
        if x.stride(2) != 1 or x.stride(1) != x.shape[2] or x.data_ptr() % 16 or (x.stride(0) * x.element_size()) % 16:
            return False
    return True


def _rows(x, rows: int, block_rows: int) -> TensorDescriptor:
    """The first `rows` rows of x [positions, heads, head_dim] as a rows × (heads · head_dim) descriptor
    that moves block_rows × head_dim tiles; reads past `rows` give zeros, writes past it are dropped."""
    return TensorDescriptor(x, [rows, x.shape[1] * x.shape[2]], [x.stride(0), 1], [block_rows, x.shape[2]])


def tuned_tiles(tuned: dict, num_q_tokens: int) -> dict:
    """A GPU section's tiles for a chunk of `num_q_tokens` queries: its "short" entry's values replace the
    others' for chunks of at most its "max_queries" (few query blocks per head: a taller tile fills the GPU
    with fewer, longer programs)."""
    tiles = {k: v for k, v in tuned.items() if k != "short"}
    short = dict(tuned.get("short", {}))
    if short and num_q_tokens <= short.pop("max_queries"):
        tiles |= short
    return tiles


def prefill_attention(
    q, k_cache, v_cache, kv_len: int, causal: bool = True, scale=None,
    *, block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None, longest_first: bool | None = None, fast_softmax: bool | None = None,
    tma: bool | None = None,
) -> torch.Tensor:
    """Attention of the T queries in ``q`` (the last T of ``kv_len`` cache positions); ``kv_len`` is a
    host int, ``kv_len >= T``."""
    # Tiles from the GPU's "prefill_attention" section, else PrefillAttentionConfig's defaults, measured on
    # the H200 (head_dim 128, bf16, causal): 64×64 tiles, 4 warps, 3 stages gave 256 TFLOP/s at 1k and 459
    # at 8k (128×64 with 8 warps: 217 and 457; SDPA flash: 158 and 319). fp32 tiles of that size need
    # 245,760 B of shared memory, more than the H200 has: they shrink to fit. The H200's section turns on
    # the longest-first order and the lean softmax tile, 128×128 tiles on 8 warps for long chunks and 64×64
    # on 4 for chunks of at most 2,048 queries (bench/prefill_attention_bench.py, three runs: 4,096 queries
    # over 8,192 keys 0.852-0.861 ms against 0.906-0.916; at 1k 0.025 against 0.030), and tiles moved by TMA
    # descriptors where the layout allows (a first H200 run: 4,096² 0.315 -> 0.279 ms, 1k 25.0 -> 22.9 µs).
    _check_inputs(q, k_cache, v_cache)
    num_q_tokens, num_q_heads, head_dim = q.shape
    kv_len = int(kv_len)
    assert num_q_tokens <= kv_len <= k_cache.shape[0], "the queries' own K/V must already be in the cache"
    if scale is None:
        scale = head_dim**-0.5
    out = torch.empty((num_q_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)

    def launch(c: PrefillAttentionConfig):
        blocks = triton.cdiv(num_q_tokens, c.block_m)
        use_tma = c.tma and tma_loads_fit(q, k_cache, v_cache)
        operands = (q, k_cache, v_cache, out)
        if use_tma:
            operands = (_rows(q, num_q_tokens, c.block_m), _rows(k_cache, kv_len, c.block_n),
                        _rows(v_cache, kv_len, c.block_n), _rows(out, num_q_tokens, c.block_m))
        _prefill_attention_kernel[(num_q_heads, blocks) if c.longest_first else (blocks, num_q_heads)](
            *operands,
            num_q_tokens, kv_len, scale * LOG2E,
            q.stride(0), q.stride(1), q.stride(2),
            k_cache.stride(0), k_cache.stride(1),
            v_cache.stride(0), v_cache.stride(1),
            out.stride(0), out.stride(1),
            GROUP=num_q_heads // k_cache.shape[1], HEAD_DIM=head_dim,
            BLOCK_M=c.block_m, BLOCK_N=c.block_n,
            CAUSAL=causal, UPCAST=INTERPRET, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
            LONGEST_FIRST=c.longest_first, FAST_SOFTMAX=c.fast_softmax, TMA=use_tma, num_warps=c.num_warps,
            num_stages=c.num_stages,
        )

    given = dict(block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
                 longest_first=longest_first, fast_softmax=fast_softmax, tma=tma)
    cfg = PrefillAttentionConfig(**(tuned_tiles(section(q.device, "prefill_attention"), num_q_tokens)
                                    | {k: v for k, v in given.items() if v is not None}))
    key = ("prefill_attention", num_q_heads // k_cache.shape[1], head_dim, q.dtype, k_cache.dtype, causal, cfg, q.device)
    launch_fitted(key, shrink(cfg, blocks=(("block_n", 16), ("block_m", 16))), launch)
    return out
