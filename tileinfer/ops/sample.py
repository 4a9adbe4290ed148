"""A speculative-sampling step in a few launches, each spreading every row over many programs.

The reference is `tileinfer.sampling`: `log_probs` (tempering, vLLM's top-k then top-p, log-softmax) then
`speculative_sample` with a deterministic drafter. CUDA's kernels for those run one 151,936-logit row
on one block (a log-softmax alone takes 33 µs, a sort 51 µs, bench/results/sampling_ops_h200.csv); here
a row is cut into chunks, one program each:

1. `_stats_kernel`: each chunk's max and sum of exp of the tempered logits (and, filtering BF16/FP16
   logits, it clears the row's key histogram).
2. top-k, then top-p: one threshold key per row, from a histogram of the keys for BF16/FP16 logits
   (`key_histogram`: two launches) or a radix select for FP32 (`radix_select`: eight).
3. `_finish_kernel`: per row its max, threshold and the mass kept.
4. `_mass_kernel`: the accept test of the drafts (u_i < p(draft_i)), then the float64 mass per chunk of
   the row the token is drawn from (the residual: the rejected draft's probability taken out).
5. `_pick_kernel`: inverse CDF, the chunk then the token within it.

Every launch reads its parameters and uniforms from device tensors (CUDA-graph safe, any temperature in
one graph) and is deterministic. Draws equal the reference's but where u · total falls within float64
rounding of a CDF step (the sums are taken in another order).
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops.key_histogram import (_KEYS, KEY_BLOCK, KEYS, TOPS, _chunk_tops, _hist_filter, _hist_kernel,
                                         _key_blocks_kernel)
from tileinfer.ops.logit_keys import logit_keys, row_max_sum
from tileinfer.ops.pdl import launch_options
from tileinfer.ops.radix_select import (_DIGIT_BITS, DIGIT_BITS, GATHER, IDX_BITS, SUB, _gathered, _gathered_filter,
                                        _kept_mass, _kth_key, _radix_pass_kernel, _select)

MIN_CHUNK, MAX_CHUNK = 1024, 4096
PROGRAMS = 264  # two per SM of an H100/H200, shared by the rows


def chunk_size(rows: int, vocab: int) -> int:
    """Logits per program: enough programs to fill the GPU whatever the rows, within [MIN_CHUNK, MAX_CHUNK]."""
    per_row = max(1, PROGRAMS // max(rows, 1))
    return max(MIN_CHUNK, min(MAX_CHUNK, triton.next_power_of_2(triton.cdiv(vocab, per_row))))


@triton.jit
def _stats_kernel(x_ptr, stride_x, t_ptr, stats_ptr, hist_ptr, tops_ptr, V, P, CHUNK: tl.constexpr,
                  ZERO: tl.constexpr, TOPS: tl.constexpr, PDL: tl.constexpr):
    """Each chunk's max logit and sum of exp(x / T - max); with ZERO, the chunk's share of its row's
    key histogram is cleared for `_hist_kernel` and the chunk's TOPS largest keys recorded."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, c = tl.program_id(0), tl.program_id(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=-float("inf"))
    if ZERO:
        span = tl.cdiv(_KEYS, P)
        z = c * span + tl.arange(0, ZERO)
        tl.store(hist_ptr + row * _KEYS + z, tl.zeros((ZERO,), tl.int32), mask=(z < (c + 1) * span) & (z < _KEYS))
        _chunk_tops(tops_ptr, row, c, P, x, offs < V, TOPS)
    t = tl.load(t_ptr)
    # the chunk's largest logit untempered: the radix passes take its key; dividing by T after the max
    # gives the max of x / T, rounding being monotone
    cx = tl.max(x.to(tl.float32), axis=0)
    tl.store(stats_ptr + (row * P + c) * 2, cx)
    tl.store(stats_ptr + (row * P + c) * 2 + 1, tl.sum(tl.exp(x.to(tl.float32) / t - cx / t), axis=0))


@triton.jit
def _finish_kernel(x_ptr, stride_x, t_ptr, k_ptr, p_ptr, stats_ptr, kstate_ptr, kpart_ptr, pstate_ptr, ppart_ptr,
                   cand_ptr, hist_ptr, blocks_ptr, final_ptr, V, P, n_rows, FILTERED: tl.constexpr,
                   HIST: tl.constexpr, KEY_BITS: tl.constexpr, P_BLOCK: tl.constexpr, GATHER: tl.constexpr,
                   IDX_BITS: tl.constexpr, KEY_BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Per row: (max, threshold key, kept mass) of the filtered distribution."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row = tl.program_id(0)
    temperature = tl.load(t_ptr)
    m, z = row_max_sum(stats_ptr, row, P, temperature, P_BLOCK)
    t = tl.zeros((), tl.int64)
    kept = z.to(tl.float64)
    if HIST:
        t32, kept = _hist_filter(x_ptr, t_ptr, k_ptr, p_ptr, hist_ptr, blocks_ptr, row, m, V, KEY_BLOCK)
        t = t32.to(tl.int64)
    elif FILTERED:
        top_k = tl.load(k_ptr)
        top_p = tl.load(p_ptr)
        t, n_kept = _kth_key(kstate_ptr, kpart_ptr, row, n_rows, P, top_k, V, KEY_BITS, P_BLOCK)
        if _gathered(top_k, V, n_kept, GATHER):
            t, kept = _gathered_filter(x_ptr, stride_x, cand_ptr, row, n_kept, t, m, temperature, top_p, KEY_BITS,
                                       GATHER, IDX_BITS)
        else:
            if (top_k < V) | (top_p < 1):
                kept = _kept_mass(ppart_ptr, row, P, P_BLOCK)
            if top_p < 1:
                t, _c, _a, kept, _n = _select(pstate_ptr, ppart_ptr, row, n_rows, P, KEY_BITS // _DIGIT_BITS - 1,
                                              top_k, top_p.to(tl.float64) * kept, True, KEY_BITS, P_BLOCK)
    tl.store(final_ptr + row * 4, m.to(tl.float64))
    tl.store(final_ptr + row * 4 + 1, t.to(tl.float64))
    tl.store(final_ptr + row * 4 + 2, kept)


@triton.jit
def _accepted(x_ptr, stride_x, t_ptr, drafts_ptr, u_ptr, final_ptr, n_rows,
              KEY_BITS: tl.constexpr, N_BLOCK: tl.constexpr):
    """Drafts accepted in a row: draft i (tested on row i - 1) while u[i] < p(draft i)."""
    i = tl.arange(0, N_BLOCK)
    valid = i < n_rows - 1
    tok = tl.load(drafts_ptr + i, mask=valid, other=0)
    x = tl.load(x_ptr + i.to(tl.int64) * stride_x + tok, mask=valid, other=0.0)
    m = tl.load(final_ptr + i * 4, mask=valid, other=0.0)
    t = tl.load(final_ptr + i * 4 + 1, mask=valid, other=0.0).to(tl.int64)
    kept = tl.load(final_ptr + i * 4 + 2, mask=valid, other=1.0)
    xf = x.to(tl.float32) / tl.load(t_ptr)
    p = tl.where(logit_keys(x, KEY_BITS) >= t, tl.exp(xf - m.to(tl.float32)).to(tl.float64) / kept, 0.0)
    ok = tl.load(u_ptr + 1 + i, mask=valid, other=1.0) < p
    return tl.min(tl.where(valid & ~ok, i, n_rows - 1), axis=0)


@triton.jit
def _weights(x_ptr, stride_x, t_ptr, drafts_ptr, final_ptr, row, offs, n_rows, V, KEY_BITS: tl.constexpr):
    """float64 weights exp(x - max) of row `row`'s kept logits at offs; a rejected draft's is zero."""
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=0.0)
    xf = x.to(tl.float32) / tl.load(t_ptr)
    m = tl.load(final_ptr + row * 4).to(tl.float32)
    t = tl.load(final_ptr + row * 4 + 1).to(tl.int64)
    w = tl.where((offs < V) & (logit_keys(x, KEY_BITS) >= t), tl.exp(xf - m), 0.0).to(tl.float64)
    rejected = tl.load(drafts_ptr + row, mask=row < n_rows - 1, other=-1)
    return tl.where(offs == rejected, 0.0, w)


@triton.jit
def _mass_kernel(x_ptr, stride_x, t_ptr, drafts_ptr, u_ptr, final_ptr, chunk_mass_ptr, accepted_ptr, V, n_rows,
                 KEY_BITS: tl.constexpr, CHUNK: tl.constexpr, N_BLOCK: tl.constexpr, PDL: tl.constexpr):
    """The accept test, then this chunk's float64 mass of the row the token is drawn from."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    c = tl.program_id(0)
    a = _accepted(x_ptr, stride_x, t_ptr, drafts_ptr, u_ptr, final_ptr, n_rows, KEY_BITS, N_BLOCK)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    w = _weights(x_ptr, stride_x, t_ptr, drafts_ptr, final_ptr, a, offs, n_rows, V, KEY_BITS)
    tl.store(chunk_mass_ptr + c, tl.sum(w, axis=0))
    if c == 0:
        tl.store(accepted_ptr, a.to(tl.int64))


@triton.jit
def _pick_kernel(x_ptr, stride_x, t_ptr, drafts_ptr, u_ptr, final_ptr, chunk_mass_ptr, accepted_ptr, tokens_ptr,
                 V, P, n_rows, KEY_BITS: tl.constexpr, CHUNK: tl.constexpr, P_BLOCK: tl.constexpr,
                 N_BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Inverse CDF with u[0]: the chunk whose running mass passes u * total, then the token inside it."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    a = tl.load(accepted_ptr).to(tl.int32)
    c = tl.arange(0, P_BLOCK)
    cm = tl.load(chunk_mass_ptr + c, mask=c < P, other=0.0)
    target = tl.load(u_ptr) * tl.sum(cm, axis=0)
    running = tl.cumsum(cm, axis=0)
    chunk = tl.minimum(tl.sum(tl.where((c < P) & (running <= target), 1, 0), axis=0),
                       tl.max(tl.where(cm > 0, c, 0), axis=0))
    base = tl.sum(tl.where(c == chunk, running - cm, 0.0), axis=0)
    j = tl.arange(0, CHUNK)
    w = _weights(x_ptr, stride_x, t_ptr, drafts_ptr, final_ptr, a, chunk * CHUNK + j, n_rows, V, KEY_BITS)
    cdf = base + tl.cumsum(w, axis=0)
    idx = tl.minimum(tl.sum(tl.where(cdf <= target, 1, 0), axis=0), tl.max(tl.where(w > 0, j, 0), axis=0))
    token = (chunk * CHUNK + idx).to(tl.int64)
    i = tl.arange(0, N_BLOCK)
    drafts = tl.load(drafts_ptr + i, mask=i < n_rows - 1, other=0)
    tl.store(tokens_ptr + i, tl.where(i == a, token, drafts), mask=i < n_rows)


def _key_bits(dtype: torch.dtype) -> int:
    return 32 if dtype == torch.float32 else 16


def buffers(rows: int, vocab: int, dtype: torch.dtype, filtered: bool) -> dict:
    """name -> (shape, dtype) of what `sample_block` allocates (the memory plan counts them)."""
    P = triton.cdiv(vocab, chunk_size(rows, vocab))
    out = {"stats": ((rows, P, 2), torch.float32), "final": ((rows, 4), torch.float64),
           "chunk_mass": ((P,), torch.float64), "accepted": ((1,), torch.int64), "tokens": ((rows,), torch.int64)}
    if filtered and _key_bits(dtype) == 16:
        out |= {"hist": ((rows, KEYS), torch.int32), "blocks": ((rows, KEYS // KEY_BLOCK, 2), torch.float64),
                "tops": ((rows, P, TOPS, 2), torch.int32)}
    elif filtered:
        passes = _key_bits(dtype) // DIGIT_BITS
        out |= {"state": ((2, passes, rows, 4), torch.float64), "part": ((2, passes, rows, P, 32), torch.float32),
                "count": ((rows,), torch.int32), "cand": ((rows, GATHER), torch.int32)}
    return out


def row_filters(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                filtered: bool, buf: dict | None = None) -> torch.Tensor:
    """Per row of logits [n, V], what `sampling.log_probs` keeps: [n, 4] float64 of (max of x / T, the
    threshold key: the logits whose order-preserving key (`logit_keys`) is at or above it are kept, their
    mass sum(exp(x / T - max)), unused). `buf`: `buffers`' tensors, allocated here if None."""
    n, vocab = logits.shape
    assert vocab < 1 << IDX_BITS, f"a vocabulary of {vocab} is too large to sample here (at most {(1 << IDX_BITS) - 1})"
    if buf is None:
        buf = {name: torch.empty(shape, dtype=dtype, device=logits.device)
               for name, (shape, dtype) in buffers(n, vocab, logits.dtype, filtered).items()}
    key_bits = _key_bits(logits.dtype)
    hist = filtered and key_bits == 16
    chunk = chunk_size(n, vocab)
    P = triton.cdiv(vocab, chunk)
    p_block = max(16, triton.next_power_of_2(P))
    pdl = launch_options(logits.device)
    stats, final = buf["stats"], buf["final"]
    args = (logits, logits.stride(0), temperature)
    hist_bins, blocks, tops = (buf["hist"], buf["blocks"], buf["tops"]) if hist else (stats, stats, stats)
    _stats_kernel[(n, P)](*args, stats, hist_bins, tops, vocab, P, CHUNK=chunk,
                          ZERO=triton.next_power_of_2(triton.cdiv(KEYS, P)) if hist else 0, TOPS=TOPS, num_warps=4,
                          **pdl)
    kstate = kpart = pstate = ppart = cand = stats
    if hist:
        _hist_kernel[(n, P)](logits, logits.stride(0), top_k, tops, hist_bins, vocab, P, CHUNK=chunk, P_BLOCK=p_block,
                             TOPS=TOPS, num_warps=4, **pdl)
        _key_blocks_kernel[(n, KEYS // KEY_BLOCK)](logits, temperature, stats, hist_bins, blocks, P, P_BLOCK=p_block,
                                                   KEY_BLOCK=KEY_BLOCK, num_warps=4, **pdl)
    elif filtered:
        state, part, count, cand = buf["state"], buf["part"], buf["count"], buf["cand"]
        for search in (0, 1):
            for j in range(key_bits // DIGIT_BITS):
                _radix_pass_kernel[(n, P)](*args, top_k, top_p, stats, state[search], part[search], state[0], part[0],
                                           count, cand, vocab, P, n, j, TOP_P=bool(search), KEY_BITS=key_bits,
                                           CHUNK=chunk, SUB=min(chunk, SUB), P_BLOCK=p_block, GATHER=GATHER,
                                           num_warps=4, **pdl)
        kstate, kpart, pstate, ppart = state[0], part[0], state[1], part[1]
    _finish_kernel[(n,)](*args, top_k, top_p, stats, kstate, kpart, pstate, ppart, cand, hist_bins, blocks, final,
                         vocab, P, n, FILTERED=filtered, HIST=hist, KEY_BITS=key_bits, P_BLOCK=p_block, GATHER=GATHER,
                         IDX_BITS=IDX_BITS, KEY_BLOCK=KEY_BLOCK, num_warps=4, **pdl)
    return final


def sample_block(logits: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor, temperature: torch.Tensor,
                 top_k: torch.Tensor, top_p: torch.Tensor, filtered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`sampling.speculative_sample(sampling.log_probs(logits, ...), drafts, u)` for a deterministic drafter.

    logits: [n, V] bf16, fp16 or fp32 (rows may be strided); drafts: [n - 1] int64; u: [>= n] float64 uniforms;
    temperature / top_p: float32 [1]; top_k: int64 [1]; filtered: whether top-k / top-p may remove
    anything (else their launches are left out).
    Returns (accepted [1] int64, tokens [n] int64)."""
    assert logits.dim() == 2 and logits.stride(-1) == 1, "logits must be [n, V] with contiguous rows"
    assert logits.dtype in (torch.bfloat16, torch.float16, torch.float32), \
        f"logits of {logits.dtype} are not sampled here"
    n, vocab = logits.shape
    assert drafts.shape == (n - 1,) and u.dtype == torch.float64 and u.numel() >= n
    dev = logits.device
    key_bits = _key_bits(logits.dtype)
    chunk = chunk_size(n, vocab)
    P = triton.cdiv(vocab, chunk)
    p_block = max(16, triton.next_power_of_2(P))
    n_block = max(16, triton.next_power_of_2(n))
    pdl = launch_options(dev)
    drafts = drafts.contiguous()
    u = u.contiguous()
    buf = {name: torch.empty(shape, dtype=dtype, device=dev)
           for name, (shape, dtype) in buffers(n, vocab, logits.dtype, filtered).items()}
    final = row_filters(logits, temperature, top_k, top_p, filtered, buf)
    chunk_mass, accepted, tokens = buf["chunk_mass"], buf["accepted"], buf["tokens"]
    args = (logits, logits.stride(0), temperature)
    _mass_kernel[(P,)](*args, drafts, u, final, chunk_mass, accepted, vocab, n, KEY_BITS=key_bits, CHUNK=chunk,
                       N_BLOCK=n_block, num_warps=4, **pdl)
    _pick_kernel[(1,)](*args, drafts, u, final, chunk_mass, accepted, tokens, vocab, P, n, KEY_BITS=key_bits,
                       CHUNK=chunk, P_BLOCK=p_block, N_BLOCK=n_block, num_warps=8, **pdl)
    return accepted, tokens
