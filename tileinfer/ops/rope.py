"""Qwen3's per-head RMSNorm on Q and K (q_norm / k_norm) fused with rotary position embedding.

RoPE is HF's rotate-half form: out = y * cat(c, c) + rotate_half(y) * cat(s, s), rotate_half(y) = cat(-y2, y1).
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops.attention import MAX_STEP_TOKENS
from tileinfer.ops.dequant import column_scaled, scale_columns_ref
from tileinfer.ops.pdl import launch_options
from tileinfer.ops.tuning import section

# The prompt's tiles (`_qk_norm_rope_rows_kernel`) unless the GPU's "norm_rope" section names its own.
ROWS_TILES = {"block_t": 32, "num_warps": 4}


def rope_cos_sin(head_dim, max_positions, theta, device=None):
    """[max_positions, head_dim] fp32 table: [:, :D/2] = cos(p * inv_freq), [:, D/2:] = sin(p * inv_freq)."""
    # the same fp32 ops as HF Qwen3RotaryEmbedding, so the table matches it bit for bit
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.arange(max_positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)


def _norm_rope_ref(x, weight, cos, sin, eps):
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    y1, y2 = y.chunk(2, dim=-1)
    return (y * cos + torch.cat((-y2, y1), dim=-1) * sin).to(x.dtype)


def _scaled_heads(x, scale):
    """x [T, H, D] with each column (head h, dim d) multiplied by scale[h·D + d], rounded to x's dtype."""
    return scale_columns_ref(x.reshape(x.shape[0], -1).clone(), scale).view(x.shape)


def qk_norm_rope_ref(q, k, q_weight, k_weight, cos_sin, positions, eps, v=None, k_cache=None, v_cache=None,
                     qkv_scale=None):
    """Plain-PyTorch definition. q [T, Hq, D] or None, k [T, Hk, D] -> new (q_out or None, k_out).

    With v and caches [P, Hk, D]: k_out and v are written into the caches at `positions` instead, and
    k_out is not returned (None). `qkv_scale` [(Hq + 2·Hk)·D] (with q, v and the caches): q, k and v are
    views of an INT8 qkv projection's unscaled product (`linear.linear_unscaled`), scaled first.
    """
    if qkv_scale is not None:
        _check_qkv_scale(q, k, v, k_cache, qkv_scale)
        hq, hk, d = q.shape[1], k.shape[1], k.shape[2]
        q = _scaled_heads(q, qkv_scale[:hq * d])
        k = _scaled_heads(k, qkv_scale[hq * d:(hq + hk) * d])
        v = _scaled_heads(v, qkv_scale[(hq + hk) * d:])
    c, s = cos_sin[positions.long()].chunk(2, dim=-1)
    cos, sin = torch.cat((c, c), -1)[:, None, :], torch.cat((s, s), -1)[:, None, :]
    q_out = None if q is None else _norm_rope_ref(q, q_weight, cos, sin, eps)
    k_out = _norm_rope_ref(k, k_weight, cos, sin, eps)
    if k_cache is None:
        return q_out, k_out
    k_cache.index_copy_(0, positions.long(), k_out)
    v_cache.index_copy_(0, positions.long(), v)
    return q_out, None


def _check_qkv_scale(q, k, v, k_cache, qkv_scale):
    if q is None or v is None or k_cache is None:
        raise ValueError("qk_norm_rope: qkv_scale takes q, k and v (views of one qkv product) and the caches")
    want = (q.shape[1] + 2 * k.shape[1]) * k.shape[2]
    if qkv_scale.shape != (want,) or qkv_scale.device != k.device:
        raise ValueError(f"qk_norm_rope: qkv_scale must be [{want}] on {k.device} (a column of q, k and v each), "
                         f"got {tuple(qkv_scale.shape)} on {qkv_scale.device}")


@triton.jit
def _norm_rope_head(x_ptr, out_ptr, w_ptr, cos, sin, offs, mask, eps, scale_ptr,
                    HEAD_DIM: tl.constexpr, HAS_SCALE: tl.constexpr):
    half: tl.constexpr = HEAD_DIM // 2
    x1 = column_scaled(tl.load(x_ptr + offs, mask=mask, other=0.0), scale_ptr, offs, mask, HAS_SCALE).to(tl.float32)
    x2 = column_scaled(tl.load(x_ptr + half + offs, mask=mask, other=0.0), scale_ptr, half + offs, mask,
                       HAS_SCALE).to(tl.float32)
    rstd = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM + eps)
    y1 = x1 * rstd * tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y2 = x2 * rstd * tl.load(w_ptr + half + offs, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + offs, (y1 * cos - y2 * sin).to(dtype), mask=mask)
    tl.store(out_ptr + half + offs, (y2 * cos + y1 * sin).to(dtype), mask=mask)


@triton.jit
def rope_factors(w_ptr, cs_ptrs, mask, HEAD_DIM: tl.constexpr):
    """What `norm_rope_tile` takes besides the rows: the norm's weight [D] and its rotated columns (d + D/2
    mod D), and each row's cos and sin [R, D] from `cs_ptrs` (each row's cos_sin entry for column d mod D/2,
    sin D/2 further). None of it comes from the kernel before: a PDL kernel loads it before its wait."""
    half: tl.constexpr = HEAD_DIM // 2
    d = tl.arange(0, HEAD_DIM)
    w = tl.load(w_ptr + d).to(tl.float32)
    w_rot = tl.load(w_ptr + (d + half) % HEAD_DIM).to(tl.float32)
    cos = tl.load(cs_ptrs, mask=mask, other=0.0)
    sin = tl.load(cs_ptrs + half, mask=mask, other=0.0)
    return w, w_rot, cos, sin


@triton.jit
def norm_rope_tile(x, x_rot, w, w_rot, cos, sin, eps, HEAD_DIM: tl.constexpr):
    """`_norm_rope_head` for a tile of rows x [R, HEAD_DIM] (a power of two) in fp32, given the same rows'
    rotated columns `x_rot` (column d + D/2 mod D: no register shuffle needed) and `rope_factors`."""
    half: tl.constexpr = HEAD_DIM // 2
    d = tl.arange(0, HEAD_DIM)
    x = x.to(tl.float32)
    x_rot = x_rot.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)
    y = x * rstd[:, None] * w[None, :]
    y_rot = x_rot * rstd[:, None] * w_rot[None, :]
    return y * cos + tl.where((d < half)[None, :], -y_rot, y_rot) * sin


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, k_out_ptr, v_out_ptr, q_weight_ptr, k_weight_ptr, cos_sin_ptr, positions_ptr,
    scale_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_cs, stride_ot,
    num_q_heads, num_kv_heads, eps,
    HEAD_DIM: tl.constexpr, BLOCK_HALF: tl.constexpr, TO_CACHE: tl.constexpr, HAS_SCALE: tl.constexpr,
    PDL: tl.constexpr,
):
    """One head of one token (heads 0..Hq-1 are Q, then Hk of K, then Hk of V), with p = positions[t]:
    y = x * rsqrt(mean(x^2) + eps) * weight;  out = y * cat(cos, cos)[p] + rotate_half(y) * cat(sin, sin)[p].
    TO_CACHE: K goes to row p of the K cache and V, unchanged, to row p of the V cache.
    HAS_SCALE: x is first multiplied by scale[head · HEAD_DIM + d] (the head counted in that order) and
    rounded to its dtype.
    """
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs = tl.arange(0, BLOCK_HALF)
    mask = offs < HEAD_DIM // 2
    pos = tl.load(positions_ptr + t).to(tl.int64)
    row = pos if TO_CACHE else t
    head_scale = scale_ptr + head * HEAD_DIM
    if head >= num_q_heads + num_kv_heads:
        head -= num_q_heads + num_kv_heads
        src = v_ptr + t * stride_vt + head * stride_vh
        dst = v_out_ptr + row * stride_ot + head * HEAD_DIM
        lo = column_scaled(tl.load(src + offs, mask=mask), head_scale, offs, mask, HAS_SCALE)
        hi = column_scaled(tl.load(src + HEAD_DIM // 2 + offs, mask=mask), head_scale, HEAD_DIM // 2 + offs, mask,
                           HAS_SCALE)
        tl.store(dst + offs, lo, mask=mask)
        tl.store(dst + HEAD_DIM // 2 + offs, hi, mask=mask)
        return
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs, mask=mask, other=0.0)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HEAD_DIM // 2 + offs, mask=mask, other=0.0)
    if head < num_q_heads:
        _norm_rope_head(q_ptr + t * stride_qt + head * stride_qh,
                        q_out_ptr + (t * num_q_heads + head) * HEAD_DIM,
                        q_weight_ptr, cos, sin, offs, mask, eps, head_scale, HEAD_DIM, HAS_SCALE)
    else:
        head -= num_q_heads
        _norm_rope_head(k_ptr + t * stride_kt + head * stride_kh,
                        k_out_ptr + row * stride_ot + head * HEAD_DIM,
                        k_weight_ptr, cos, sin, offs, mask, eps, head_scale, HEAD_DIM, HAS_SCALE)


@triton.jit
def _qk_norm_rope_rows_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, k_out_ptr, v_out_ptr, q_weight_ptr, k_weight_ptr, cos_sin_ptr, positions_ptr,
    scale_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_cs, stride_ot,
    T, num_q_heads, num_kv_heads, eps,
    HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, TO_CACHE: tl.constexpr, HAS_SCALE: tl.constexpr,
    PDL: tl.constexpr,
):
    """`_qk_norm_rope_kernel` for a prompt: BLOCK_T tokens of one head per program (a tile of
    `norm_rope_tile`), the same head order. One head of one token per program left a prefill chunk's
    ~200,000 one-warp programs waiting on their scheduling, not on memory."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    head = tl.program_id(1)
    valid = (t < T)[:, None]
    d = tl.arange(0, HEAD_DIM)
    half: tl.constexpr = HEAD_DIM // 2
    pos = tl.load(positions_ptr + t, mask=t < T, other=0).to(tl.int64)
    row = pos if TO_CACHE else t
    head_scale = scale_ptr + head * HEAD_DIM
    every_d = (d < HEAD_DIM)[None, :]  # a scale row is loaded once for the tile's tokens
    if head >= num_q_heads + num_kv_heads:
        head -= num_q_heads + num_kv_heads
        x = tl.load(v_ptr + t[:, None] * stride_vt + head * stride_vh + d[None, :], mask=valid)
        x = column_scaled(x, head_scale, d[None, :], every_d, HAS_SCALE)
        tl.store(v_out_ptr + row[:, None] * stride_ot + head * HEAD_DIM + d[None, :], x, mask=valid)
        return
    if head < num_q_heads:
        src = q_ptr + t[:, None] * stride_qt + head * stride_qh
        dst = q_out_ptr + (t[:, None] * num_q_heads + head) * HEAD_DIM
        w_ptr = q_weight_ptr
    else:
        head -= num_q_heads
        src = k_ptr + t[:, None] * stride_kt + head * stride_kh
        dst = k_out_ptr + row[:, None] * stride_ot + head * HEAD_DIM
        w_ptr = k_weight_ptr
    w, w_rot, cos, sin = rope_factors(w_ptr, cos_sin_ptr + pos[:, None] * stride_cs + (d % half)[None, :], valid,
                                      HEAD_DIM)
    x = column_scaled(tl.load(src + d[None, :], mask=valid, other=0.0), head_scale, d[None, :], every_d, HAS_SCALE)
    x_rot = column_scaled(tl.load(src + ((d + half) % HEAD_DIM)[None, :], mask=valid, other=0.0), head_scale,
                    ((d + half) % HEAD_DIM)[None, :], every_d, HAS_SCALE)
    y = norm_rope_tile(x, x_rot, w, w_rot, cos, sin, eps, HEAD_DIM)
    tl.store(dst + d[None, :], y.to(dst.dtype.element_ty), mask=valid)


def qk_norm_rope(q, k, q_weight, k_weight, cos_sin, positions, eps, v=None, k_cache=None, v_cache=None,
                 qkv_scale=None):
    """Triton version of `qk_norm_rope_ref`, one launch for Q and K (and the V copy into its cache); with
    `qkv_scale`, each column of q, k and v scaled as it is loaded (q, k, v themselves left as they are).

    q, k, v may be strided views into the fused qkv output (last dim contiguous); positions [T] int32/int64
    are read on the device, so a CUDA-graph replay can change them. Writing K/V straight into the caches
    saves two copy kernels per layer (~0.2 ms of a Qwen3-4B DFlash step on the H200). A step's tokens
    (up to MAX_STEP_TOKENS) take a program per head and token, a prompt's tiles of tokens.
    """
    T, num_kv_heads, D = k.shape
    assert D % 2 == 0 and k.stride(-1) == 1 and k_weight.shape == (D,)
    assert cos_sin.dtype == torch.float32 and cos_sin.shape[1] == D and cos_sin.stride(1) == 1
    assert positions.shape == (T,) and positions.dtype in (torch.int32, torch.int64)
    to_cache = k_cache is not None
    if to_cache:
        assert v is not None and v.shape == k.shape and v.stride(-1) == 1
        assert k_cache.shape[1:] == (num_kv_heads, D) and k_cache.is_contiguous() and v_cache.is_contiguous()
        assert k_cache.dtype == k.dtype and v_cache.dtype == v.dtype
        k_out, v_out, stride_ot = k_cache, v_cache, k_cache.stride(0)
    else:
        k_out = torch.empty((T, num_kv_heads, D), dtype=k.dtype, device=k.device)
        v, v_out, stride_ot = k, k_out, num_kv_heads * D
    has_q = q is not None
    if not has_q:  # the kernel never takes the Q branch; k stands in for the unused pointers
        num_q_heads, q, q_out, q_weight = 0, k, k_out, k_weight
    else:
        num_q_heads = q.shape[1]
        assert q.shape == (T, num_q_heads, D) and q.stride(-1) == 1 and q_weight.shape == (D,)
        q_out = torch.empty((T, num_q_heads, D), dtype=q.dtype, device=q.device)
    heads = num_q_heads + num_kv_heads * (2 if to_cache else 1)
    device = q.device if has_q else k.device
    if qkv_scale is not None:
        _check_qkv_scale(q if has_q else None, k, v if to_cache else None, k_cache, qkv_scale)
        qkv_scale = qkv_scale.contiguous()
    if T > MAX_STEP_TOKENS and D == triton.next_power_of_2(D) and D >= 16:
        tiles = {**ROWS_TILES, **section(device, "norm_rope")}
        _qk_norm_rope_rows_kernel[(triton.cdiv(T, tiles["block_t"]), heads)](
            q, k, v, q_out, k_out, v_out, q_weight, k_weight, cos_sin, positions,
            qkv_scale if qkv_scale is not None else cos_sin,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), cos_sin.stride(0), stride_ot,
            T, num_q_heads, num_kv_heads, eps,
            HEAD_DIM=D, BLOCK_T=tiles["block_t"], TO_CACHE=to_cache, HAS_SCALE=qkv_scale is not None,
            num_warps=tiles["num_warps"],
            **launch_options(device),
        )
    elif T > 0:
        block_half = triton.next_power_of_2(D // 2)
        _qk_norm_rope_kernel[(T, heads)](
            q, k, v, q_out, k_out, v_out, q_weight, k_weight, cos_sin, positions,
            qkv_scale if qkv_scale is not None else cos_sin,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), cos_sin.stride(0), stride_ot,
            num_q_heads, num_kv_heads, eps,
            HEAD_DIM=D, BLOCK_HALF=block_half, TO_CACHE=to_cache, HAS_SCALE=qkv_scale is not None,
            num_warps=max(1, min(4, block_half // 64)),
            **launch_options(device),
        )
    return (q_out if has_q else None), (None if to_cache else k_out)
