"""Top-k, then top-p, of FP32 logits: a radix select of one threshold per row on the logits' 32-bit keys.

Four bits a launch. Each program counts its chunk's keys per digit (top-p also sums their probability
mass; each thread into its own sums, reduced once); the next launch's programs each reduce all chunks'
sums in the same order, so every program picks the same digit (top-k by counts, top-p by mass), and
chunk 0 records it. A chunk whose largest key is below the range, or that held no key in the digit
chosen, is left out. A row's threshold keeps a group of tied logits whole, as the reference's does.
Where top-k keeps at most `GATHER` logits, top-p's first launch gathers them instead, its other launches
do nothing, and `sample._finish_kernel` sorts them by key and takes one cumulative sum.
(BF16/FP16 logits take `key_histogram` instead: their 16-bit keys fit one histogram.)
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops.logit_keys import logit_keys, row_max_sum

DIGIT_BITS = 4
DIGITS = 1 << DIGIT_BITS
_DIGIT_BITS, _DIGITS = tl.constexpr(DIGIT_BITS), tl.constexpr(DIGITS)  # as the kernels read them
SUB = 256  # logits a radix pass takes at a time
GATHER = 256  # top-k survivors up to which top-p is found among them, not by radix passes
IDX_BITS = 24  # a gathered logit's index, packed below its key for sorting


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
    packed = tl.where(valid, (logit_keys(x, KEY_BITS) << IDX_BITS) | idx.to(tl.int64), -1)
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
    key = logit_keys(x, KEY_BITS)
    inside = (offs < V) & (key >= kth) & ((key >> width) == (lo >> width))
    digit = tl.where(inside, ((key >> (width - _DIGIT_BITS)) & (_DIGITS - 1)).to(tl.int32), _DIGITS)
    return digit, x


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
    top = logit_keys(tl.load(stats_ptr + (row * P + c) * 2).to(x_ptr.dtype.element_ty), KEY_BITS)
    if top >= kth:
        for start in tl.range(0, CHUNK, SUB, loop_unroll_factor=4):
            offs = c * CHUNK + start + tl.arange(0, SUB)
            x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < V, other=-float("inf"))
            keep = (offs < V) & (logit_keys(x, KEY_BITS) >= kth)
            if tl.max(keep.to(tl.int32), axis=0) > 0:
                slot = tl.atomic_add(count_ptr + row + tl.zeros((SUB,), tl.int32), 1, mask=keep)
                tl.store(cand_ptr + row * GATHER + slot, offs, mask=keep & (slot < GATHER))


@triton.jit
def _count_chunk(x_ptr, stride_x, t_ptr, stats_ptr, state_ptr, part_ptr, row, c, V, P, n_rows, J, top_k, top_p,
                 kth, TOP_P: tl.constexpr, KEY_BITS: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr,
                 P_BLOCK: tl.constexpr):
    """A chunk's counts (and top-p's masses) per digit in pass J; chunk 0 records the range."""
    t = tl.load(t_ptr)
    m, z = row_max_sum(stats_ptr, row, P, t, P_BLOCK)
    p_mass = tl.zeros((), tl.float64)
    if TOP_P:
        if J > 0:
            p_mass = top_p.to(tl.float64) * _kept_mass(part_ptr, row, P, P_BLOCK)
    lo = tl.zeros((), tl.int64)
    above_count = tl.zeros((), tl.float64)
    above_mass = tl.zeros((), tl.float64)
    # whether the chunk may hold a key in the range: its largest key reaches the range (and kth), and
    # after the first pass its count in the digit the pass before chose is not zero
    top = logit_keys(tl.load(stats_ptr + (row * P + c) * 2).to(x_ptr.dtype.element_ty), KEY_BITS)
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
