"""Embedding rows in one launch: out[t] = table[ids[t]], or qweight[ids[t]] * scale[ids[t]] for an INT8
table (`linear.embedding` is the definition). PyTorch's indexing takes two kernels for a BF16 table's rows
and five for an INT8 one's (gather the rows, widen, gather the scales, multiply, narrow): ~12 µs at the
start of every INT8 step on an H200 (bench/results/floor_launches_int8_h200.csv)."""

import torch
import triton
import triton.language as tl

from tileinfer.ops.linear import Linear


@triton.jit
def _embedding_kernel(ids_ptr, table_ptr, scale_ptr, out_ptr, stride_table, stride_out, H,
                      HAS_SCALE: tl.constexpr, BLOCK: tl.constexpr):
    """Row t of out, columns [BLOCK·j, BLOCK·(j+1)): the table's row ids[t] (times its scale, in fp32)."""
    t = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < H
    row = tl.load(ids_ptr + t).to(tl.int64)
    v = tl.load(table_ptr + row * stride_table + offs, mask=mask, other=0)
    if HAS_SCALE:
        v = v.to(tl.float32) * tl.load(scale_ptr + row).to(tl.float32)
    tl.store(out_ptr + t.to(tl.int64) * stride_out + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


def embedding(ids: torch.Tensor, lin: Linear, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Triton version of `linear.embedding`, bit for bit: ids [T] (int32/int64, inside the table) -> [T, H]."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"embedding: ids must be int32/int64, got {ids.dtype}")
    if ids.dim() != 1:
        raise ValueError(f"embedding: ids must be one-dimensional, got shape {tuple(ids.shape)}")
    table = lin.qweight if lin.is_quantized else lin.weight
    if table.stride(-1) != 1:
        raise ValueError("embedding: the table's rows must be contiguous")
    dtype = dtype or (torch.bfloat16 if lin.is_quantized else table.dtype)
    T, H = ids.shape[0], table.shape[1]
    out = torch.empty((T, H), dtype=dtype, device=table.device)
    if T == 0:
        return out
    block = min(1024, triton.next_power_of_2(H))
    scale = lin.scale if lin.is_quantized else table
    _embedding_kernel[(T, triton.cdiv(H, block))](
        ids, table, scale, out, table.stride(0), out.stride(0), H,
        HAS_SCALE=lin.is_quantized, BLOCK=block, num_warps=4,
    )
    return out
