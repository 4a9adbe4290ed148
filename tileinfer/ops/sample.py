"""A speculative-sampling step in a few launches, each spreading every row over many programs.

The reference is `tileinfer.sampling`: `log_probs` (tempering, vLLM's top-k then top-p, log-softmax) then
`speculative_sample` with a deterministic drafter. CUDA's kernels for those run one 151,936-logit row
on one block (a log-softmax alone takes 33 µs, a sort 51 µs, bench/results/sampling_ops_h200.csv); here
a row is cut into chunks, one program each:

1. `_stats_kernel`: each chunk's max and sum of exp of the tempered logits (and, filtering BF16/FP16
   logits, it clears the row's key histogram).
2. top-k, then top-p, on the logits' order-preserving integer keys (`_keys`). A BF16/FP16 logit has one
   of 65,536 keys, and its weight exp(x / T - max) is a function of its key: `_hist_kernel` counts each
   row's keys (integer atomics: the same counts in any order), `_key_blocks_kernel` sums the count and
   mass of each block of 1,024 keys, and `_finish_kernel` walks the blocks from the top, then the keys
   of one block: the k-th largest key, and the lowest key whose strictly larger keys weigh less than
   top_p of the kept mass. FP32 logits (32-bit keys) take a radix select instead, four bits a launch:
   each program counts its chunk's keys per digit (top-p also sums their probability mass; each thread
   into its own sums, reduced once); the next launch's programs each reduce all chunks' sums in the same
   order, so every program picks the same digit (top-k by counts, top-p by mass), and chunk 0 records
   it. A chunk whose largest key is below the range, or that held no key in the digit chosen, is left
   out. Where top-k keeps at most `GATHER` logits, top-p's first launch gathers them instead and its
   other launches do nothing. Either way a row's threshold keeps a group of tied logits whole, as the
   reference's does.
3. `_finish_kernel`: per row its max, threshold and the mass kept (the histogram's walk; after radix
   passes, top-p among gathered logits sorts them by key and takes one cumulative sum).
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

from tileinfer.ops.pdl import launch_options

DIGIT_BITS = 4
DIGITS = 1 << DIGIT_BITS
_DIGIT_BITS, _DIGITS = tl.constexpr(DIGIT_BITS), tl.constexpr(DIGITS)  # as the kernels read them
KEYS = 1 << 16  # the keys of BF16 / FP16 logits: one histogram bin each
_KEYS = tl.constexpr(KEYS)
KEY_BLOCK = 1024  # keys a program of `_key_blocks_kernel` sums
MIN_CHUNK, MAX_CHUNK = 1024, 4096
SUB = 256  # logits a radix pass takes at a time
GATHER = 256  # top-k survivors up to which top-p is found among them, not by radix passes
IDX_BITS = 24  # a gathered logit's index, packed below its key for sorting
PROGRAMS = 264  # two per SM of an H100/H200, shared by the rows


def chunk_size(rows: int, vocab: int) -> int:
    """Logits per program: enough programs to fill the GPU whatever the rows, within [MIN_CHUNK, MAX_CHUNK]."""
    per_row = max(1, PROGRAMS // max(rows, 1))
    return max(MIN_CHUNK, min(MAX_CHUNK, triton.next_power_of_2(triton.cdiv(vocab, per_row))))


@triton.jit
def _keys(x, KEY_BITS: tl.constexpr):
    """Order-preserving integer keys of float logits (int64 in [0, 2**KEY_BITS)); -0.0 is +0.0."""
    if KEY_BITS == 16:
        b = x.to(tl.int16, bitcast=True).to(tl.int32)
        b = tl.where(x == 0, 0, b)
        k = (b ^ ((b >> 15) & 0x7FFF)).to(tl.int64) + 32768
    else:
        b = x.to(tl.int32, bitcast=True)
        b = tl.where(x == 0, 0, b)
        k = (b ^ ((b >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648
    return k


@triton.jit
def _row_max_sum(stats_ptr, row, P, t, P_BLOCK: tl.constexpr):
    """A row's max and sum of exp(x / T - max) from its chunks' (max logit, sum) pairs, in chunk order."""
    c = tl.arange(0, P_BLOCK)
    cm = tl.load(stats_ptr + (row * P + c) * 2, mask=c < P, other=-float("inf")) / t
    cs = tl.load(stats_ptr + (row * P + c) * 2 + 1, mask=c < P, other=0.0)
    m = tl.max(cm, axis=0)
    return m, tl.sum(tl.where(c < P, cs * tl.exp(cm - m), 0.0), axis=0)


@triton.jit
def _digit_sums(part_ptr, row, P, P_BLOCK: tl.constexpr):
    """A row's per-digit counts and masses [DIGITS] over its chunks, summed in chunk order."""
    c = tl.arange(0, P_BLOCK)[:, None]
    d = tl.arange(0, 16)[None, :]
    base = (row * P + c) * 32
    counts = tl.load(part_ptr + base + d, mask=c < P, other=0.0)
    mass = tl.load(part_ptr + base + 16 + d, mask=c < P, other=0.0)
    return tl.sum(counts, axis=0), tl.sum(mass, axis=0)


@triton.jit
def _select(state_ptr, part_ptr, row, n_rows, P, j, top_k, p_mass,
            TOP_P: tl.constexpr, KEY_BITS: tl.constexpr, P_BLOCK: tl.constexpr):
    """The range after pass j, (lo, above_count, above_mass, inclusive_mass, inclusive_count), from pass j's state and its
    chunks' digit sums. Top-k keeps the digit holding the k-th largest key; top-p the lowest digit
    holding a key whose strictly larger keys weigh less than p_mass."""
    s = state_ptr + (j * n_rows + row) * 4
    lo = tl.load(s).to(tl.int64)
    above_count = tl.load(s + 1)
    above_mass = tl.load(s + 2)
    counts, mass = _digit_sums(part_ptr + j * n_rows * P * 32, row, P, P_BLOCK)
    d = tl.arange(0, 16)
    later = d[None, :] > d[:, None]                       # [digit, other digit]: the other is larger
    mass_after = tl.sum(tl.where(later, mass[None, :], 0.0), axis=1).to(tl.float64)
    count_after = tl.sum(tl.where(later, counts[None, :], 0.0), axis=1).to(tl.float64)
    if TOP_P:
        ok = (counts > 0) & (above_mass + mass_after < p_mass)
        pick = tl.min(tl.where(ok, d, 16), axis=0)
    else:
        ok = above_count + count_after + counts.to(tl.float64) >= top_k.to(tl.float64)
        pick = tl.max(tl.where(ok, d, -1), axis=0)
    chosen = d == pick
    new_above_mass = above_mass + tl.sum(tl.where(chosen, mass_after, 0.0), axis=0)
    new_above_count = above_count + tl.sum(tl.where(chosen, count_after, 0.0), axis=0)
    return (lo + (pick.to(tl.int64) << (KEY_BITS - _DIGIT_BITS * (j + 1))),
            new_above_count,
            new_above_mass,
            new_above_mass + tl.sum(tl.where(chosen, mass, 0.0), axis=0).to(tl.float64),
            new_above_count + tl.sum(tl.where(chosen, counts, 0.0), axis=0).to(tl.float64))


@triton.jit
def _kth_key(state_ptr, part_ptr, row, n_rows, P, top_k, V, KEY_BITS: tl.constexpr, P_BLOCK: tl.constexpr):
    """(the k-th largest key of a row, how many keys are at or above it, ties included): the lowest key
    and V without a top-k."""
    kth = tl.zeros((), tl.int64)
    n_kept = V.to(tl.float64)
    if top_k < V:
        kth, _c, _a, _i, n_kept = _select(state_ptr, part_ptr, row, n_rows, P, KEY_BITS // _DIGIT_BITS - 1, top_k,
                                          0.0, False, KEY_BITS, P_BLOCK)
    return kth, n_kept


@triton.jit
def _gathered(top_k, V, n_kept, GATHER: tl.constexpr):
    """Whether a row's top-k survivors are gathered, and top-p found among them."""
    return (top_k < V) & (n_kept <= GATHER)


@triton.jit
def _gathered_filter(x_ptr, stride_x, cand_ptr, row, n_kept, kth, m, temperature, top_p,
                     KEY_BITS: tl.constexpr, GATHER: tl.constexpr, IDX_BITS: tl.constexpr):
    """(threshold key, kept mass) from a row's gathered top-k survivors: sorted by key (then index, so the
    sums do not depend on the order they were gathered in), top-p keeps down to the last survivor whose
    more likely survivors weigh less than top_p of theirs all (a tie group stands or falls whole: its
    first member has the least mass before it)."""
    i = tl.arange(0, GATHER)
    valid = i < n_kept
    idx = tl.load(cand_ptr + row * GATHER + i, mask=valid, other=0)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + idx, mask=valid, other=-float("inf"))
    packed = tl.where(valid, (_keys(x, KEY_BITS) << IDX_BITS) | idx.to(tl.int64), -1)
    packed = tl.sort(packed, descending=True)
    valid = packed >= 0
    idx = (packed & ((1 << IDX_BITS) - 1)).to(tl.int32)
    key = packed >> IDX_BITS
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + idx, mask=valid, other=-float("inf"))
    w = tl.where(valid, tl.exp(x.to(tl.float32) / temperature - m), 0.0).to(tl.float64)
    total = tl.sum(w, axis=0)
    threshold = kth
    kept = total
    if top_p < 1:
        before = tl.cumsum(w, axis=0) - w
        last = tl.max(tl.where(valid & (before < top_p.to(tl.float64) * total), i, 0), axis=0)
        threshold = tl.sum(tl.where(i == last, key, 0), axis=0)
        kept = tl.sum(tl.where(valid & (key >= threshold), w, 0.0), axis=0)
    return threshold, kept


@triton.jit
def _kept_mass(ppart_ptr, row, P, P_BLOCK: tl.constexpr):
    """The mass of a row's keys at or above its k-th largest: all of the top-p search's first pass's."""
    _counts, mass = _digit_sums(ppart_ptr, row, P, P_BLOCK)
    return tl.sum(mass.to(tl.float64), axis=0)


@triton.jit
def _digits(x_ptr, stride_x, row, offs, V, kth, lo, width, KEY_BITS: tl.constexpr):
    """The next digit (int32) of each key at offs in the range [lo, lo + 2**width) at or above kth (DIGITS
    for a key outside it), and the logits."""
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=-float("inf"))
    key = _keys(x, KEY_BITS)
    inside = (offs < V) & (key >= kth) & ((key >> width) == (lo >> width))
    digit = tl.where(inside, ((key >> (width - _DIGIT_BITS)) & (_DIGITS - 1)).to(tl.int32), _DIGITS)
    return digit, x


@triton.jit
def _stats_kernel(x_ptr, stride_x, t_ptr, stats_ptr, hist_ptr, V, P, CHUNK: tl.constexpr, ZERO: tl.constexpr,
                  PDL: tl.constexpr):
    """Each chunk's max logit and sum of exp(x / T - max); with ZERO, the chunk's share of its row's
    key histogram is cleared for `_hist_kernel`."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, c = tl.program_id(0), tl.program_id(1)
    if ZERO:
        span = tl.cdiv(_KEYS, P)
        z = c * span + tl.arange(0, ZERO)
        tl.store(hist_ptr + row * _KEYS + z, tl.zeros((ZERO,), tl.int32), mask=(z < (c + 1) * span) & (z < _KEYS))
    offs = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=-float("inf"))
    t = tl.load(t_ptr)
    # the chunk's largest logit untempered: the radix passes take its key; dividing by T after the max
    # gives the max of x / T, rounding being monotone
    cx = tl.max(x.to(tl.float32), axis=0)
    tl.store(stats_ptr + (row * P + c) * 2, cx)
    tl.store(stats_ptr + (row * P + c) * 2 + 1, tl.sum(tl.exp(x.to(tl.float32) / t - cx / t), axis=0))


@triton.jit
def _hist_kernel(x_ptr, stride_x, hist_ptr, V, CHUNK: tl.constexpr, PDL: tl.constexpr):
    """Counts of each 16-bit key in a chunk, added into its row's histogram."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, c = tl.program_id(0), tl.program_id(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=0.0)
    key = _keys(x, 16)
    tl.atomic_add(hist_ptr + row * _KEYS + key, tl.full((CHUNK,), 1, tl.int32), mask=offs < V, sem="relaxed")


@triton.jit
def _key_weights(x_ptr, hist_ptr, row, keys, m, t):
    """(count, float64 mass count * exp(x / T - max)) of each key in `keys` of a row's histogram; x is the
    logit the key stands for (`_keys` inverted)."""
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
    m, _z = _row_max_sum(stats_ptr, row, P, t, P_BLOCK)
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
    if top_k < V:
        count_after = tl.sum(tl.where(later, bcount[None, :], 0.0), axis=1)
        kb = tl.max(tl.where(count_after + bcount >= top_k.to(tl.float64), b, -1), axis=0)
        above = tl.sum(tl.where(b == kb, count_after, 0.0), axis=0)
        count, _mass = _key_weights(x_ptr, hist_ptr, row, kb * KEY_BLOCK + i, m, t)
        after = tl.sum(count, axis=0) - tl.cumsum(count, axis=0)  # counts of the higher keys in the block
        kth = kb * KEY_BLOCK + tl.max(tl.where(above + (after + count).to(tl.float64) >= top_k.to(tl.float64), i, -1),
                                      axis=0)
    # the blocks' masses at or above kth
    count, mass = _key_weights(x_ptr, hist_ptr, row, kb * KEY_BLOCK + i, m, t)
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


@triton.jit
def _radix_pass_kernel(x_ptr, stride_x, t_ptr, k_ptr, p_ptr, stats_ptr, state_ptr, part_ptr, kstate_ptr, kpart_ptr,
                       count_ptr, cand_ptr, V, P, n_rows, J, TOP_P: tl.constexpr, KEY_BITS: tl.constexpr,
                       CHUNK: tl.constexpr, SUB: tl.constexpr, P_BLOCK: tl.constexpr, GATHER: tl.constexpr,
                       PDL: tl.constexpr):
    """Pass J of a row's top-k (counts) or top-p (counts and masses) search over one chunk: sums per digit
    of the keys in the range the passes before chose. kstate/kpart: the top-k search's buffers, which
    top-p reads. Where top-k leaves at most GATHER keys, top-p's first pass gathers their indices into
    cand (count: how many so far) and its other passes do nothing; otherwise top-p's first pass also runs
    for a top-k alone: its masses sum to the mass top-k keeps."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row, c = tl.program_id(0), tl.program_id(1)
    top_k = tl.load(k_ptr)
    top_p = tl.load(p_ptr)
    if TOP_P:
        if (top_p < 1) | (top_k < V):
            kth, n_kept = _kth_key(kstate_ptr, kpart_ptr, row, n_rows, P, top_k, V, KEY_BITS, P_BLOCK)
            if _gathered(top_k, V, n_kept, GATHER):
                if J == 0:
                    _gather_chunk(x_ptr, stride_x, stats_ptr, count_ptr, cand_ptr, row, c, V, P, kth,
                                  KEY_BITS, CHUNK, SUB, GATHER)
            elif (top_p < 1) | (J == 0):
                _count_chunk(x_ptr, stride_x, t_ptr, stats_ptr, state_ptr, part_ptr, row, c, V, P, n_rows, J,
                             top_k, top_p, kth, True, KEY_BITS, CHUNK, SUB, P_BLOCK)
    elif top_k < V:
        if (J == 0) & (c == 0):
            tl.store(count_ptr + row, 0)
        _count_chunk(x_ptr, stride_x, t_ptr, stats_ptr, state_ptr, part_ptr, row, c, V, P, n_rows, J,
                     top_k, top_p, tl.zeros((), tl.int64), False, KEY_BITS, CHUNK, SUB, P_BLOCK)


@triton.jit
def _gather_chunk(x_ptr, stride_x, stats_ptr, count_ptr, cand_ptr, row, c, V, P, kth,
                  KEY_BITS: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr, GATHER: tl.constexpr):
    """The indices of a chunk's keys at or above kth, each into the next free slot of its row's cand."""
    top = _keys(tl.load(stats_ptr + (row * P + c) * 2).to(x_ptr.dtype.element_ty), KEY_BITS)
    if top >= kth:
        for start in tl.range(0, CHUNK, SUB, loop_unroll_factor=4):
            offs = c * CHUNK + start + tl.arange(0, SUB)
            x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=-float("inf"))
            keep = (offs < V) & (_keys(x, KEY_BITS) >= kth)
            if tl.max(keep.to(tl.int32), axis=0) > 0:
                slot = tl.atomic_add(count_ptr + row + tl.zeros((SUB,), tl.int32), 1, mask=keep)
                tl.store(cand_ptr + row * GATHER + slot, offs, mask=keep & (slot < GATHER))


@triton.jit
def _count_chunk(x_ptr, stride_x, t_ptr, stats_ptr, state_ptr, part_ptr, row, c, V, P, n_rows, J, top_k, top_p,
                 kth, TOP_P: tl.constexpr, KEY_BITS: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr,
                 P_BLOCK: tl.constexpr):
    """A chunk's counts (and top-p's masses) per digit in pass J; chunk 0 records the range."""
    t = tl.load(t_ptr)
    m, z = _row_max_sum(stats_ptr, row, P, t, P_BLOCK)
    p_mass = tl.zeros((), tl.float64)
    if TOP_P:
        if J > 0:
            p_mass = top_p.to(tl.float64) * _kept_mass(part_ptr, row, P, P_BLOCK)
    lo = tl.zeros((), tl.int64)
    above_count = tl.zeros((), tl.float64)
    above_mass = tl.zeros((), tl.float64)
    # whether the chunk may hold a key in the range: its largest key reaches the range (and kth), and
    # after the first pass its count in the digit the pass before chose is not zero
    top = _keys(tl.load(stats_ptr + (row * P + c) * 2).to(x_ptr.dtype.element_ty), KEY_BITS)
    live = top >= kth
    if J > 0:
        lo, above_count, above_mass, _i, _n = _select(state_ptr, part_ptr, row, n_rows, P, J - 1, top_k, p_mass,
                                                      TOP_P, KEY_BITS, P_BLOCK)
        chosen = (lo >> (KEY_BITS - _DIGIT_BITS * J)) & (_DIGITS - 1)
        before = tl.load(part_ptr + (((J - 1) * n_rows + row) * P + c) * 32 + chosen)
        live = live & (top >= lo) & (before > 0)
    if c == 0:
        s = state_ptr + (J * n_rows + row) * 4
        tl.store(s, lo.to(tl.float64))
        tl.store(s + 1, above_count)
        tl.store(s + 2, above_mass)
    width = KEY_BITS - _DIGIT_BITS * J
    d = tl.arange(0, 16)
    counts = tl.zeros((16,), tl.float32)
    mass = tl.zeros((16,), tl.float32)
    if live:
        # Each thread counts its own logits per digit in bytes of two words (digits 0-7, 8-15; a chunk
        # gives a thread at most CHUNK / SUB <= 16 logits), and top-p sums their weights into [16, SUB];
        # both are reduced once, at the chunk's end. A sub-block with no key in the range is passed by.
        low = tl.zeros((SUB,), tl.int64)
        high = tl.zeros((SUB,), tl.int64)
        weights = tl.zeros((16, SUB), tl.float32)
        for start in tl.range(0, CHUNK, SUB, loop_unroll_factor=4):  # four loads in flight
            offs = c * CHUNK + start + tl.arange(0, SUB)
            digit, x = _digits(x_ptr, stride_x, row, offs, V, kth, lo, width, KEY_BITS)
            if tl.min(digit, axis=0) < _DIGITS:
                one = tl.full((SUB,), 1, tl.int64) << ((digit & 7) * 8).to(tl.int64)
                low += tl.where(digit < 8, one, 0)
                high += tl.where((digit >= 8) & (digit < _DIGITS), one, 0)
                if TOP_P:
                    w = tl.exp(x.to(tl.float32) / t - m)
                    weights += tl.where(d[:, None] == digit[None, :], w[None, :], 0.0)
        word = tl.where(d[:, None] < 8, low[None, :], high[None, :])
        counts = tl.sum((word >> ((d[:, None] & 7) * 8).to(tl.int64)) & 255, axis=1).to(tl.float32)
        if TOP_P:
            mass = tl.sum(weights, axis=1)
    base = part_ptr + ((J * n_rows + row) * P + c) * 32
    tl.store(base + d, counts)
    tl.store(base + 16 + d, mass)


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
    m, z = _row_max_sum(stats_ptr, row, P, temperature, P_BLOCK)
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
    p = tl.where(_keys(x, KEY_BITS) >= t, tl.exp(xf - m.to(tl.float32)).to(tl.float64) / kept, 0.0)
    ok = tl.load(u_ptr + 1 + i, mask=valid, other=1.0) < p
    return tl.min(tl.where(valid & ~ok, i, n_rows - 1), axis=0)


@triton.jit
def _weights(x_ptr, stride_x, t_ptr, drafts_ptr, final_ptr, row, offs, n_rows, V, KEY_BITS: tl.constexpr):
    """float64 weights exp(x - max) of row `row`'s kept logits at offs; a rejected draft's is zero."""
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=0.0)
    xf = x.to(tl.float32) / tl.load(t_ptr)
    m = tl.load(final_ptr + row * 4).to(tl.float32)
    t = tl.load(final_ptr + row * 4 + 1).to(tl.int64)
    w = tl.where((offs < V) & (_keys(x, KEY_BITS) >= t), tl.exp(xf - m), 0.0).to(tl.float64)
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
        out |= {"hist": ((rows, KEYS), torch.int32), "blocks": ((rows, KEYS // KEY_BLOCK, 2), torch.float64)}
    elif filtered:
        passes = _key_bits(dtype) // DIGIT_BITS
        out |= {"state": ((2, passes, rows, 4), torch.float64), "part": ((2, passes, rows, P, 32), torch.float32),
                "count": ((rows,), torch.int32), "cand": ((rows, GATHER), torch.int32)}
    return out


def row_filters(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                filtered: bool, buf: dict | None = None) -> torch.Tensor:
    """Per row of logits [n, V], what `sampling.log_probs` keeps: [n, 4] float64 of (max of x / T, the
    threshold key: the logits whose order-preserving key (`_keys`) is at or above it are kept, their
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
    hist_bins, blocks = (buf["hist"], buf["blocks"]) if hist else (stats, stats)
    _stats_kernel[(n, P)](*args, stats, hist_bins, vocab, P, CHUNK=chunk,
                          ZERO=triton.next_power_of_2(triton.cdiv(KEYS, P)) if hist else 0, num_warps=4, **pdl)
    kstate = kpart = pstate = ppart = cand = stats
    if hist:
        _hist_kernel[(n, P)](logits, logits.stride(0), hist_bins, vocab, CHUNK=chunk, num_warps=4, **pdl)
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
