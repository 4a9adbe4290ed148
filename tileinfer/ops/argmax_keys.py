"""Argmax across programs as one integer maximum: the LM head's epilogue returns token ids, not logits.

A value v at column n becomes the int64 key  order(v) · 2^32 + (2^32 − 1 − n), where order maps the
float's bits to a signed integer with the same order (−0 taken as +0, NaN above +inf). The largest key
is the largest value and, among equal values, the smallest column: `torch.argmax`'s answer. Each program
folds its tile into one key per row and `atomic_max`es it into a per-device slot; a maximum does not
depend on the order the programs arrive in, so the ids are deterministic. The last program to arrive
reads the slots, writes the ids and leaves the slots at EMPTY for the next launch or graph replay.
"""

import torch
import triton
import triton.language as tl

EMPTY = -(2**63)  # below every key; the slots (tileinfer.ops.counters.argmax_slots) hold it between launches


@triton.jit
def argmax_keys(vals, cols, valid):
    """The keys of fp32 `vals` at int columns `cols` (same shape); invalid entries get EMPTY."""
    v = tl.where(vals == 0.0, 0.0, vals)
    v = tl.where(v != v, float("nan"), v)
    bits = v.to(tl.int32, bitcast=True)
    order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    key = (order.to(tl.int64) << 32) | (4294967295 - cols.to(tl.int64))
    return tl.where(valid, key, -9223372036854775808)


@triton.jit
def key_column(key):
    """The column a key was made for."""
    return 4294967295 - (key & 4294967295)


def argmax_keys_ref(vals: torch.Tensor) -> torch.Tensor:
    """The row-wise maximum key of `vals` [..., N] (float), computed with PyTorch: the kernel's definition."""
    v = vals.float()
    v = torch.where(v == 0, torch.zeros_like(v), v)
    v = torch.where(torch.isnan(v), torch.full_like(v, float("nan")), v)
    bits = v.view(torch.int32).to(torch.int64)
    order = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    cols = torch.arange(v.shape[-1], device=v.device, dtype=torch.int64)
    return ((order << 32) | (4294967295 - cols)).amax(dim=-1)
