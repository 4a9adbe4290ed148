"""A step's commit in one launch: how many drafts the target accepts, and the state the next step reads.

After a verify pass of `size` tokens [anchor, drafts...] with the target's tokens `posterior` (greedy: the
argmax at each row; sampling: the tokens it drew), the step commits `accepted` drafts and one token of the
target's: result = [accepted, posterior...], the drafter's new context starts where this block started, the
next anchor sits accepted + 1 positions on and is posterior[accepted]. `commit_ref` is the definition, in
PyTorch; it takes about ten small kernels in a DFlash step (compare, scan, sum, copies, gather), ~12 µs on
an H200 (bench/results/floor_launches_int8_h200.csv), where `commit` takes one.
"""

import torch
import triton
import triton.language as tl

from tileinfer.ops.attention import MAX_STEP_TOKENS


def commit_ref(block_ids, posterior, size: int, result, start_t, ctx_start_t, accepted=None, forced=None):
    """Greedy acceptance where `accepted` is None (the drafts up to the first that differs from the target's
    token before it), else `accepted` as given; `forced` [1] caps it instead (a replayed acceptance)."""
    if accepted is None:
        matches = (block_ids[1:size] == posterior[: size - 1]).to(torch.int64)
        accepted = matches.cumprod(0).sum().view(1)
    if forced is not None:
        accepted = torch.minimum(forced, torch.full_like(accepted, size - 1))
    result[:1].copy_(accepted)
    result[1:size + 1].copy_(posterior[:size])
    ctx_start_t.copy_(start_t)
    start_t.add_(accepted + 1)
    block_ids[:1].copy_(posterior.gather(0, accepted))


@triton.jit
def _commit_kernel(block_ids_ptr, posterior_ptr, result_ptr, start_ptr, ctx_start_ptr, accepted_ptr, forced_ptr,
                   size, GIVEN: tl.constexpr, FORCED: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    post = tl.load(posterior_ptr + i, mask=i < size, other=0)
    if GIVEN:
        accepted = tl.load(accepted_ptr).to(tl.int64)
    else:
        drafts = tl.load(block_ids_ptr + 1 + i, mask=i < size - 1, other=0)
        differs = (drafts != post) & (i < size - 1)
        accepted = tl.min(tl.where(differs, i, size - 1), axis=0).to(tl.int64)
    if FORCED:
        accepted = tl.minimum(tl.load(forced_ptr).to(tl.int64), size - 1)
    start = tl.load(start_ptr)
    anchor = tl.load(posterior_ptr + accepted)
    tl.store(result_ptr, accepted)
    tl.store(result_ptr + 1 + i, post, mask=i < size)
    tl.store(ctx_start_ptr, start)
    tl.store(start_ptr, start + accepted + 1)
    tl.store(block_ids_ptr, anchor)


def commit(block_ids, posterior, size: int, result, start_t, ctx_start_t, accepted=None, forced=None):
    """Triton version of `commit_ref` (the same tensors written, the same values)."""
    if not 1 <= size <= MAX_STEP_TOKENS:
        raise ValueError(f"commit: a step has 1 to {MAX_STEP_TOKENS} tokens, got {size}")
    for name, t in (("block_ids", block_ids), ("posterior", posterior), ("result", result), ("start_t", start_t),
                    ("ctx_start_t", ctx_start_t), ("accepted", accepted), ("forced", forced)):
        if t is not None and (t.dtype != torch.int64 or not t.is_contiguous()):
            raise ValueError(f"commit: {name} must be a contiguous int64 tensor, got {t.dtype}")
    if posterior.numel() < size or block_ids.numel() < size or result.numel() < size + 1:
        raise ValueError(f"commit: a step of {size} tokens needs {size} block ids and posterior tokens and "
                         f"{size + 1} result slots")
    _commit_kernel[(1,)](
        block_ids, posterior, result, start_t, ctx_start_t,
        accepted if accepted is not None else start_t, forced if forced is not None else start_t, size,
        GIVEN=accepted is not None, FORCED=forced is not None, BLOCK=MAX_STEP_TOKENS, num_warps=1,
    )
