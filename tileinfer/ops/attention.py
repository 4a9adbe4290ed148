"""Attention over one layer's KV cache: the plain-PyTorch definition and the split-count heuristic.

Layout shared by every attention kernel of TileInfer:
- ``k_cache``, ``v_cache``: ``[max_positions, num_kv_heads, head_dim]``; positions ``[0, kv_len)`` are
  valid and already hold the new tokens' K/V.
- ``q``: ``[T, num_q_heads, head_dim]``; the T queries are the last T positions, query i sits at
  position ``kv_len - T + i``. Query head h reads KV head ``h // (num_q_heads // num_kv_heads)``.
- ``causal=True``: query i sees keys ``j <= kv_len - T + i``; ``causal=False``: all ``kv_len`` keys.
- Softmax in fp32; the output is ``[T, num_q_heads, head_dim]``, contiguous, in q's dtype.
"""

from dataclasses import dataclass

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
    return SplitPolicy.of(device).max_splits


def default_num_splits(kv_len: int, num_q_tokens: int = 1, max_splits: int = MAX_NUM_SPLITS,
                       one_token_max_splits: int | None = None) -> int:
    """Split count for ``decode_attention``: one token reads best with shares of 64 positions or more,
    a block of 16 (its 64-row partials to write and merge) with shares of 256 or more and, below 8k,
    at most 8 splits; never more than ``max_splits`` (16 × 8 KV heads = 128 programs, one wave on 132 SMs).
    ``one_token_max_splits`` lets one token past that, up to it, with shares of 256 positions or more."""
    # H200, Qwen3-4B heads, bf16, CUDA graph, µs by splits (bench/results/attention_splits_h200.csv):
    #   T=1:   1k 4 → 8.3, 8 → 7.9, 16 → 8.7;  4k 8 → 13.5, 16 → 12.3;  32k 16 → 40.0, 32 → 53.8
    #   T=1 since the merge needs no first pass (attention_stages_h200.csv, 1k after the QKV GEMV): 8 → 7.06,
    #   16 → 5.61; Qwen3-4B's plain step at 1k 2.752 → 2.728 ms with 16 (floor_step_kv_h200.csv)
    #   T=16:  1k 4 → 12.2, 8 → 13.6, 16 → 18.1;  2k 8 → 15.2, 16 → 19.4;  4k 8 → 18.7, 16 → 21.6;
    #          8k 8 → 25.5, 16 → 25.7;  32k 16 → 50.2, 32 → 64.1
    #   T=1 in Qwen3-4B's plain step (bench/results/floor_splits_h200.csv), ms at 16 / 32 splits: 4k 2.85 / 2.89,
    #   8k 3.14 / 3.04, 32k 4.57 / 3.98; a 16-token verify step loses with 32 (8k 4.41 / 4.87)
    if num_q_tokens == 1:
        splits = min(max_splits, kv_len // 64)
        if one_token_max_splits:
            splits = max(splits, min(one_token_max_splits, kv_len // 256))
        return max(1, splits)
    return max(1, min(max_splits, kv_len // 256, 8 if kv_len < 8192 else max_splits))


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """How a step's attention is cut outside exact mode, from the GPU's "decode_attention" section:
    `max_splits` ("max_num_splits"); below `row_blocks_below` positions a step of several tokens gives
    each program `tokens_per_program` of them and at most `row_block_max_splits` splits (None: no bound
    of its own); a one-token step may go past `max_splits` up to `one_token_max_splits` (None: not). The engine
    picks its steps' shapes from it and the activation model sizes their partials."""
    max_splits: int = MAX_NUM_SPLITS
    row_blocks_below: int = 0
    tokens_per_program: int | None = None
    row_block_max_splits: int | None = None
    one_token_max_splits: int | None = None

    @classmethod
    def of(cls, device) -> "SplitPolicy":
        return cls.from_section(section(device, "decode_attention"))

    @classmethod
    def from_section(cls, tuned: dict) -> "SplitPolicy":
        return cls(tuned.get("max_num_splits", MAX_NUM_SPLITS), tuned.get("row_blocks_below", 0),
                   tuned.get("tokens_per_program"), tuned.get("row_block_max_splits"),
                   tuned.get("one_token_max_splits"))

    def per_program(self, max_length: int, num_q_tokens: int) -> int:
        """Query tokens a program takes: `tokens_per_program` where the request stays below
        `row_blocks_below`, else all of them (one program per KV head and split)."""
        # H200, Qwen3-4B heads, bf16, 16 tokens, CUDA graph, µs at the split count default_num_splits gives
        # (bench/results/attention_row_blocks_h200.csv): 1k 4 splits: all 11.9, 4 a program 8.7; 2k 8 splits:
        # 15.8 / 14.4; 8k 16 splits: 27.3 / 35.6 (past ~4k the row blocks' repeated K/V reads cost more than
        # the smaller merges save).
        if num_q_tokens > 1 and max_length < self.row_blocks_below and self.tokens_per_program:
            return min(num_q_tokens, self.tokens_per_program)
        return num_q_tokens

    def num_splits(self, max_length: int, num_q_tokens: int) -> int:
        """`default_num_splits` under `max_splits`, and under `row_block_max_splits` where row blocks cut
        the step (at 2k, 16 tokens in blocks of 4: 8 splits 14.4 µs, 4 splits 12.6)."""
        limit = self.max_splits
        if self.row_block_max_splits and self.per_program(max_length, num_q_tokens) < num_q_tokens:
            limit = min(limit, self.row_block_max_splits)
        return default_num_splits(max_length, num_q_tokens, limit, self.one_token_max_splits)


def exact_num_splits(max_length: int, max_splits: int = MAX_NUM_SPLITS) -> int:
    """The split count exact mode starts from (``exact_split_size``), the same for steps of 1 and of 16
    tokens: it gives splits of about 256 positions at 1k and 512 from 4k on, the best of both step sizes."""
    # H200, Qwen3-4B heads, exact mode, µs (T=1 / T=16) by split size (bench/results/attention_splits_h200.csv):
    #   kv 1100: 64 → 10.7/27.1, 256 → 8.6/13.0;  4200: 256 → 14.4/24.2, 512 → 13.6/19.8;
    #   kv 8300: 256 → 20.3/42.4, 512 → 16.9/26.9, 1024 → 20.0/26.8
    return max(1, min(max_splits, max_length // 256))


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
