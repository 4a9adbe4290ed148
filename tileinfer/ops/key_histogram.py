"""Top-k, then top-p, of BF16/FP16 logits from one histogram of their 16-bit keys.

A BF16/FP16 logit has one of 65,536 order-preserving keys (`logit_keys`), and its weight
exp(x / T - max) is a function of its key. `_hist_kernel` counts each row's keys into the row's histogram
(integer atomics: the same counts in any order; `sample._stats_kernel` clears it and records each chunk's
largest keys, `_chunk_tops`). With a top-k only the keys from a lower bound of the k-th largest up are
counted (`_kth_lower_bound`): nothing below the k-th largest is kept or weighs in top-p's sums, and
the atomics, one per counted logit, are most of the filter's time. `_key_blocks_kernel`
sums the count and mass of each block of KEY_BLOCK keys, and `_hist_filter` (in `sample._finish_kernel`)
walks a row's blocks from the top, then the keys of one block: the k-th largest key, then the lowest key
whose strictly larger keys weigh less than top_p of the kept mass. A group of tied logits shares a key,
so it is kept or removed whole, as the reference's threshold does.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops.logit_keys import logit_keys, row_max_sum

KEYS = 1 << 16  # the keys of BF16 / FP16 logits: one histogram bin each
_KEYS = tl.constexpr(KEYS)
KEY_BLOCK = 1024  # keys a program of `_key_blocks_kernel` sums
TOPS = 4  # largest distinct keys each chunk records, for a lower bound of a row's k-th largest


@triton.jit
def _chunk_tops(tops_ptr, row, c, P, x, valid, TOPS: tl.constexpr):
    """A chunk's TOPS largest distinct keys and how many of its logits hold each (key -1: none left)."""
    key = tl.where(valid, logit_keys(x, 16).to(tl.int32), -1)
    prev = _KEYS
    for j in tl.static_range(TOPS):
        v = tl.max(tl.where(key < prev, key, -1), axis=0)
        n = tl.sum(((key == v) & (v >= 0)).to(tl.int32), axis=0)
        base = tops_ptr + ((row * P + c) * TOPS + j) * 2
        tl.store(base, v)
        tl.store(base + 1, n)
        prev = v


@triton.jit
def _kth_lower_bound(k_ptr, tops_ptr, row, P, V, P_BLOCK: tl.constexpr, TOPS: tl.constexpr):
    """A key at or below a row's k-th largest: the largest key that top_k of its chunks' largest logits
    reach (they are the row's own logits, counted with their ties), found bit by bit. 0 without a top-k,
    or when those logits are fewer than top_k."""
    top_k = tl.load(k_ptr)
    i = tl.arange(0, P_BLOCK * TOPS)
    inside = i < P * TOPS
    key = tl.load(tops_ptr + (row * P * TOPS + i) * 2, mask=inside, other=-1)
    count = tl.load(tops_ptr + (row * P * TOPS + i) * 2 + 1, mask=inside, other=0)
    lo = tl.zeros((), tl.int32)
    if top_k < V:
        for j in tl.static_range(16):
            t = lo | (1 << (15 - j))
            lo = tl.where(tl.sum(tl.where(key >= t, count, 0), axis=0) >= top_k, t, lo)
    return lo


@triton.jit
def _hist_kernel(x_ptr, stride_x, k_ptr, tops_ptr, hist_ptr, V, P, CHUNK: tl.constexpr, P_BLOCK: tl.constexpr,
                 TOPS: tl.constexpr, PDL: tl.constexpr):
    """Counts of each 16-bit key in a chunk, added into its row's histogram; with a top-k, only the keys
    from a lower bound of the k-th largest up (no key below it is kept or weighs in top-p's sums)."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, c = tl.program_id(0), tl.program_id(1)
    lo = _kth_lower_bound(k_ptr, tops_ptr, row, P, V, P_BLOCK, TOPS)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=0.0)
    key = logit_keys(x, 16).to(tl.int32)
    tl.atomic_add(hist_ptr + row * _KEYS + key, tl.full((CHUNK,), 1, tl.int32), mask=(offs < V) & (key >= lo),
                  sem="relaxed")


@triton.jit
def _key_weights(x_ptr, hist_ptr, row, keys, m, t):
    """(count, float64 mass count * exp(x / T - max)) of each key in `keys` of a row's histogram; x is the
    logit the key stands for (`logit_keys` inverted)."""
    count = tl.load(hist_ptr + row * _KEYS + keys)
    b = keys.to(tl.int32) - 32768
    bits = tl.where(b < 0, b ^ 0x7FFF, b).to(tl.int16)
    x = bits.to(x_ptr.dtype.element_ty, bitcast=True).to(tl.float32)
    w = tl.exp(x / t - m).to(tl.float64)
    return count, tl.where(count > 0, count.to(tl.float64) * w, 0.0)


@triton.jit
def _key_blocks_kernel(x_ptr, t_ptr, stats_ptr, hist_ptr, blocks_ptr, P, P_BLOCK: tl.constexpr,
                       KEY_BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Per block of KEY_BLOCK consecutive keys of a row's histogram: its count and mass."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, b = tl.program_id(0), tl.program_id(1)
    t = tl.load(t_ptr)
    m, _z = row_max_sum(stats_ptr, row, P, t, P_BLOCK)
    keys = b * KEY_BLOCK + tl.arange(0, KEY_BLOCK)
    count, mass = _key_weights(x_ptr, hist_ptr, row, keys, m, t)
    n_blocks = _KEYS // KEY_BLOCK
    tl.store(blocks_ptr + (row * n_blocks + b) * 2, tl.sum(count, axis=0).to(tl.float64))
    tl.store(blocks_ptr + (row * n_blocks + b) * 2 + 1, tl.sum(mass, axis=0))


@triton.jit
def _hist_filter(x_ptr, t_ptr, k_ptr, p_ptr, hist_ptr, blocks_ptr, row, m, V, KEY_BLOCK: tl.constexpr):
    """(threshold key, kept mass) of a row from its key histogram: top-k keeps the keys at or above the k-th
    largest; among them top-p keeps down to the lowest key whose strictly larger keys weigh less than
    top_p of their mass. Blocks first, then keys within the block found."""
    N_BLOCKS: tl.constexpr = _KEYS // KEY_BLOCK
    t = tl.load(t_ptr)
    top_k = tl.load(k_ptr)
    top_p = tl.load(p_ptr).to(tl.float64)
    b = tl.arange(0, N_BLOCKS)
    bcount = tl.load(blocks_ptr + (row * N_BLOCKS + b) * 2)
    bmass = tl.load(blocks_ptr + (row * N_BLOCKS + b) * 2 + 1)
    later = b[None, :] > b[:, None]                       # [block, other block]: the other is higher
    i = tl.arange(0, KEY_BLOCK)
    # top-k: the block holding the k-th largest key, then the key
    kth = tl.zeros((), tl.int32)
    kb = tl.zeros((), tl.int32)
    above = tl.zeros((), tl.float64)
    if top_k < V:
        count_after = tl.sum(tl.where(later, bcount[None, :], 0.0), axis=1)
        kb = tl.max(tl.where(count_after + bcount >= top_k.to(tl.float64), b, -1), axis=0)
        above = tl.sum(tl.where(b == kb, count_after, 0.0), axis=0)
    count, mass = _key_weights(x_ptr, hist_ptr, row, kb * KEY_BLOCK + i, m, t)
    if top_k < V:
        after = tl.sum(count, axis=0) - tl.cumsum(count, axis=0)  # counts of the higher keys in the block
        kth = kb * KEY_BLOCK + tl.max(tl.where(above + (after + count).to(tl.float64) >= top_k.to(tl.float64), i, -1),
                                      axis=0)
    # the blocks' masses at or above kth
    inside = kb * KEY_BLOCK + i >= kth
    bmass = tl.where(b > kb, bmass, tl.where(b == kb, tl.sum(tl.where(inside, mass, 0.0), axis=0), 0.0))
    bcount = tl.where(b > kb, bcount, tl.where(b == kb, tl.sum(tl.where(inside, count, 0), axis=0).to(tl.float64), 0.0))
    kept = tl.sum(bmass, axis=0)
    threshold = kth
    if top_p < 1:
        p_mass = top_p * kept
        mass_after = tl.sum(tl.where(later, bmass[None, :], 0.0), axis=1)
        pb = tl.min(tl.where((bcount > 0) & (mass_after < p_mass), b, N_BLOCKS), axis=0)
        above = tl.sum(tl.where(b == pb, mass_after, 0.0), axis=0)
        keys = pb * KEY_BLOCK + i
        count, mass = _key_weights(x_ptr, hist_ptr, row, keys, m, t)
        live = (keys >= kth) & (count > 0)
        mass = tl.where(keys >= kth, mass, 0.0)
        higher = above + (tl.sum(mass, axis=0) - tl.cumsum(mass, axis=0))  # mass of the strictly larger keys
        pick = tl.min(tl.where(live & (higher < p_mass), i, KEY_BLOCK), axis=0)
        threshold = pb * KEY_BLOCK + pick
        kept = above + tl.sum(tl.where(i >= pick, mass, 0.0), axis=0)
    return threshold, kept
