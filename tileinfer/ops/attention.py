"""Attention over one layer's KV cache: the plain-PyTorch definition and the split-count heuristic.

Layout shared by every attention kernel of TileInfer:
- ``k_cache``, ``v_cache``: ``[max_positions, num_kv_heads, head_dim]``; positions ``[0, kv_len)`` are
  valid and already hold the new tokens' K/V.
- ``q``: ``[T, num_q_heads, head_dim]``; the T queries are the last T positions, query i sits at
  position ``kv_len - T + i``. Query head h reads KV head ``h // (num_q_heads // num_kv_heads)``.
- ``causal=True``: query i sees keys ``j <= kv_len - T + i``; ``causal=False``: all ``kv_len`` keys.
- Softmax in fp32; the output is ``[T, num_q_heads, head_dim]``, contiguous, in q's dtype.
"""

import torch

from tileinfer.ops.tuning import section

MAX_NUM_SPLITS = 16  # default_num_splits' limit where the GPU's configs name none


def attention_ref(q, k_cache, v_cache, kv_len: int, causal: bool = True, scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) v over cache positions [0, kv_len), in fp32."""
    kv_len = int(kv_len)
    num_q_tokens, num_q_heads, head_dim = q.shape
    group = num_q_heads // k_cache.shape[1]
    if scale is None:
        scale = head_dim**-0.5
    k = k_cache[:kv_len].float().repeat_interleave(group, dim=1)
    v = v_cache[:kv_len].float().repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,lhd->htl", q.float(), k) * scale
    if causal:
        q_pos = torch.arange(kv_len - num_q_tokens, kv_len, device=q.device)
        k_pos = torch.arange(kv_len, device=q.device)
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("htl,lhd->thd", probs, v).to(q.dtype).contiguous()


def max_num_splits(device) -> int:
    """The split-count limit of the GPU's "decode_attention" configs (see tuning.py), else MAX_NUM_SPLITS."""
    return section(device, "decode_attention").get("max_num_splits", MAX_NUM_SPLITS)


def default_num_splits(kv_len: int, num_q_tokens: int = 1, max_splits: int = MAX_NUM_SPLITS) -> int:
    """Split count for ``decode_attention``: 16 splits × 8 KV heads = 128 programs fill the H200's
    132 SMs in one wave; a short cache gets one 64-position block per split."""
    # H200, Qwen3-4B shapes, bf16, in a CUDA graph (bench/results/attention_h200.csv), µs by splits:
    #   q16  8k: 8 → 21.5, 12 → 18.3, 16 → 16.2, 24 → 19.7, 32 → 18.2, 64 → 25.2
    #   q16 32k: 8 → 63.3, 16 → 40.6, 24 → 45.1, 32 → 42.8, 64 → 51.5 (q1: 16 → 39.1, 32 → 38.0)
    #   q16  1k: 4 → 10.1, 8 → 8.9, 16 → 8.7, 64 → 15.1 (two launches dominate)
    # The best count did not depend on the number of query tokens (1 or 16).
    return max(1, min(max_splits, kv_len // EXACT_BLOCK_N))


EXACT_BLOCK_N = 64     # split sizes in exact mode are multiples of the decode kernel's key block
MAX_STEP_TOKENS = 16   # the most query tokens of a decode / verify step (a DFlash block)


def exact_split_size(max_length: int, num_splits: int) -> int:
    """Positions per split in exact mode, fixed for a whole request so that a row's splits start at the
    same positions whether it is decoded alone or verified inside a block: a power of two (at least the
    key block) giving between num_splits and 2·num_splits splits over the request's longest KV length.
    Powers of two keep the number of distinct captured step graphs small."""
    share = -(-max_length // (2 * num_splits))
    return max(EXACT_BLOCK_N, 1 << (share - 1).bit_length())


def exact_grid_splits(num_splits: int) -> int:
    """The decode kernel's split grid in exact mode: covers max_length + a block at any split size above."""
    return 2 * num_splits + 1


def exact_block_m(num_q_heads: int, num_kv_heads: int) -> int:
    """The decode kernel's query tile in exact mode: the same for 1 and for 16 tokens of a model."""
    rows = MAX_STEP_TOKENS * (num_q_heads // num_kv_heads)
    return max(16, 1 << (rows - 1).bit_length())
