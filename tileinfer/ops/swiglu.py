"""SwiGLU activation on the fused gate_up projection output: silu(gate) * up.

`silu_mul` can also take the per-column scale of an INT8 projection whose product is still unscaled (a
prompt's gate_up, cuBLAS on the widened weight): each column is scaled and rounded as it is loaded, the
bits of `dequant.scale_columns_` before it, without that pass's read and write of the whole product."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tileinfer.ops.dequant import column_scaled


def silu_mul_ref(gate_up):
    """Plain-PyTorch definition: gate_up [T, 2I] -> silu(g) * u in fp32, cast to gate_up.dtype."""
    g, u = gate_up.chunk(2, dim=-1)
    return (F.silu(g.float()) * u.float()).to(gate_up.dtype)


@triton.jit
def _silu_mul_kernel(gate_up_ptr, scale_ptr, out_ptr, stride_in, stride_out, I, BLOCK: tl.constexpr,
                     HAS_SCALE: tl.constexpr):
    """out[t, i] = g * sigmoid(g) * u with g = gate_up[t, i], u = gate_up[t, I + i], fp32 math;
    HAS_SCALE: g and u are first multiplied by their column's scale and rounded to gate_up's dtype."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    g = tl.load(gate_up_ptr + row * stride_in + offs, mask=mask, other=0.0)
    u = tl.load(gate_up_ptr + row * stride_in + I + offs, mask=mask, other=0.0)
    g = column_scaled(g, scale_ptr, offs, mask, HAS_SCALE).to(tl.float32)
    u = column_scaled(u, scale_ptr, I + offs, mask, HAS_SCALE).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(out_ptr + row * stride_out + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up, scale=None):
    """Triton version of `silu_mul_ref`: gate_up [T, 2I] (rows may be strided) -> [T, I]. With `scale` [2I]
    (fp32, bf16 or fp16), the bits of `silu_mul(scale_columns_(gate_up, scale))`, gate_up left as it is."""
    assert gate_up.dim() == 2 and gate_up.stride(-1) == 1 and gate_up.shape[1] % 2 == 0
    T, I = gate_up.shape[0], gate_up.shape[1] // 2
    if scale is not None and (scale.shape != (2 * I,) or scale.device != gate_up.device):
        raise ValueError(f"silu_mul: scale must be [{2 * I}] on {gate_up.device} (a column of gate_up each), "
                         f"got {tuple(scale.shape)} on {scale.device}")
    out = torch.empty((T, I), dtype=gate_up.dtype, device=gate_up.device)
    if T == 0:
        return out
    block = min(1024, triton.next_power_of_2(I))
    _silu_mul_kernel[(T, triton.cdiv(I, block))](
        gate_up, scale.contiguous() if scale is not None else gate_up, out, gate_up.stride(0), out.stride(0), I,
        BLOCK=block, HAS_SCALE=scale is not None, num_warps=4,
    )
    return out
