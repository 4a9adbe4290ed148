"""What the sampling step's launches share: order-preserving integer keys of float logits, and a row's max
and sum of exp from its chunks' statistics (`sample._stats_kernel`)."""

import triton
import triton.language as tl


@triton.jit
def logit_keys(x, KEY_BITS: tl.constexpr):
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
def row_max_sum(stats_ptr, row, P, t, P_BLOCK: tl.constexpr):
    """A row's max and sum of exp(x / T - max) from its chunks' (max logit, sum) pairs, in chunk order."""
    c = tl.arange(0, P_BLOCK)
    cm = tl.load(stats_ptr + (row * P + c) * 2, mask=c < P, other=-float("inf")) / t
    cs = tl.load(stats_ptr + (row * P + c) * 2 + 1, mask=c < P, other=0.0)
    m = tl.max(cm, axis=0)
    return m, tl.sum(tl.where(c < P, cs * tl.exp(cm - m), 0.0), axis=0)
